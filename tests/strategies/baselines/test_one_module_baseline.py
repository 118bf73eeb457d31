"""A new baseline is one module: its settings, ``--tune`` grid, builder, kept bytes and the scenarios it serves sit
in one file that defines ``ENTRY``, and nothing else is edited. Here a toy baseline lives in a package of the
user's (a folder on the path with its metadata declaring the entry point group ``cl_graft.strategies``) and a
fresh ``cl-graft run`` finds it, runs it on a tiny digits stream and writes it to ``results.json``; the
baselines of this package are each one module named as the strategy."""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys

import pytest

from cl_graft.errors import UserError

avalanche = pytest.importorskip("avalanche")

import cl_graft.strategies.baselines as baselines
from cl_graft.strategies.comparison.registry import find

from helpers import entry_point_module

TOY = '''
    """``toy``: Naive with every training loss scaled by ``toy_scale`` (task-incremental only)."""
    from dataclasses import dataclass, field

    from cl_graft.strategies.interface.entry import StrategyEntry, model_bytes
    from cl_graft.strategies.interface.settings import Settings


    @dataclass(frozen=True)
    class ToySettings(Settings):
        toy_scale: float = field(default=1.0, metadata={"help": "Toy: factor on every training loss."})


    GRID = ({"toy_scale": 0.5}, {"toy_scale": 2.0})


    def build(ctx):
        from avalanche.training import Naive

        class Scaled(Naive):
            def criterion(self):
                return self.toy_scale * super().criterion()

        strategy = Scaled(**ctx.template, plugins=ctx.plugins)
        strategy.toy_scale = ctx.settings.toy_scale
        return strategy


    def kept(strategy, model):
        return model_bytes(strategy.model), {"kept": {}, "toy_scale": strategy.toy_scale}


    ENTRY = StrategyEntry(name="toy", help="Naive with a scaled loss (a user's package)", stores="the trained weights",
                          build=build, kept_bytes=kept, settings=ToySettings, grid=GRID, scenarios=("task",))
'''


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """A folder holding ``toy_baseline.py`` and its distribution's metadata (the entry point), on the path."""
    entry_point_module(tmp_path, "toy_baseline", TOY, group="cl_graft.strategies", name="toy")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("toy_baseline", None)


def _cli(folder, *args: str) -> subprocess.CompletedProcess:
    """``cl-graft run`` in a new interpreter that has ``folder`` on its path (the registry is built at import)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "cl_graft.cli", "run", "--stream", "permuted-digits:2", "--model",
                           "mlp", "--preset", "smoke", "--quiet", "--steps", "2", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_a_baseline_in_a_users_package_is_found_and_run(toy_package):
    found = {name: find(name) for name in ("toy", "naive")}
    assert found["toy"] is importlib.import_module("toy_baseline").ENTRY and found["naive"] is not None
    out = toy_package / "run"
    done = _cli(toy_package, "--strategies", "toy,naive", "--toy-scale", "0.5", "--out", str(out))
    assert done.returncode == 0, done.stderr
    saved = json.loads((out / "results.json").read_text())
    toy = saved["strategies"]["toy"]
    assert toy["info"]["toy_scale"] == 0.5 and len(toy["matrix"]) == 2
    assert saved["run"]["strategy_settings"]["toy"] == {"toy_scale": 0.5}
    assert saved["run"]["strategy_plugins"] == {"toy": {"name": "toy", "module": "toy_baseline", "distribution":
                                                        "toy-baseline 0.1", "entry_point": "toy"}}
    assert toy["matrix"] != saved["strategies"]["naive"]["matrix"]              # the scaled loss trained it
    with pytest.raises(UserError, match="^toy is a task-incremental method: it runs with --scenario task"):
        found["toy"].check_scenario("class")                     # what the run refuses before training


def test_every_baseline_is_one_module_named_as_its_strategy():
    """A module of ``baselines/`` either defines one ``ENTRY``, named as the module (``er_ace.py``: ``er-ace``),
    or is one of the shared ones (:mod:`~cl_graft.strategies.baselines.common`, the closed-form heads'
    :mod:`~cl_graft.strategies.baselines.closed_form` and the frozen-encoder heads' routing
    :mod:`~cl_graft.strategies.baselines.all_columns`), which define none."""
    modules = [info.name for info in pkgutil.iter_modules(baselines.__path__)]
    entries = {}
    for name in modules:
        module = importlib.import_module(f"{baselines.__name__}.{name}")
        assert not hasattr(module, "ENTRIES"), name
        if name not in ("common", "closed_form", "all_columns"):
            entries[name] = module.ENTRY
    assert {e.name for e in entries.values()} >= {"naive", "ewc", "replay", "single", "ncm"}
    assert all(e.name == name.replace("_", "-") for name, e in entries.items())
    assert list(baselines.ENTRIES) == list(entries.values())                    # what the registry collects
