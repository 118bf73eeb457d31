"""A new baseline is one registry entry plus its class: its settings become `cl-graft run` options, the runner
runs it and ``--tune`` tries its grid, with nothing else edited."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from cl_graft.task import TaskRows, TaskSpec

from helpers import save_tiny_model, tiny_bert, write_task

avalanche = pytest.importorskip("avalanche")

from avalanche.training.templates import SupervisedTemplate
from cl_graft.benchmarks.streams import Stream
from cl_graft.strategies.comparison.registry import (
    STRATEGIES,
    StrategyEntry,
    registry_options,
    strategy_settings,
)
from cl_graft.strategies.comparison.runner import run_continual
from cl_graft.strategies.interface.config import continual_setup
from cl_graft.strategies.interface.entry import model_bytes
from cl_graft.strategies.interface.settings import Settings

from cl_graft.cli import main
from cl_graft.cli.run import run_command

GRID = ({"loss_scale": 0.5}, {"loss_scale": 1.0}, {"loss_scale": 2.0})
WORDS = {0: ["bad", "dull", "terrible", "boring"], 1: ["good", "great", "fun", "wonderful"]}


class ScaledNaive(SupervisedTemplate):
    """Plain fine-tuning with every training loss multiplied by ``loss_scale``."""

    def __init__(self, *, loss_scale: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.loss_scale = loss_scale

    def criterion(self):
        return self.loss_scale * super().criterion()


@dataclass(frozen=True)
class ScaledSettings(Settings):
    loss_scale: float = field(default=1.0, metadata={"help": "Factor on every training loss."})


ENTRY = StrategyEntry(
    name="scaled", help="fine-tuning with a scaled loss (registered by a test)", stores="the trained weights",
    build=lambda ctx: ScaledNaive(**ctx.template, plugins=ctx.plugins,
                                  loss_scale=ctx.settings.loss_scale),
    kept_bytes=lambda strategy, model: (model_bytes(strategy.model), {"loss_scale": strategy.loss_scale}),
    settings=ScaledSettings, grid=GRID)


def _rows(n: int, seed: int, flip: bool) -> list[dict]:
    rng = random.Random(seed)
    labels = [rng.randrange(2) for _ in range(n)]
    return [{"text": f"it was {rng.choice(WORDS[y])}", "label": y ^ flip} for y in labels]


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(STRATEGIES, "scaled", ENTRY)
    monkeypatch.setitem(main.commands, "run", run_command())        # the command as built with the new entry


def test_the_runner_runs_a_new_entry_with_its_settings(registered, tmp_path):
    specs = [TaskSpec("pos", ("negative", "positive")), TaskSpec("neg", ("positive", "negative"))]
    model = tiny_bert()
    for i, spec in enumerate(specs):
        model.add_task(spec, seed=i)
    splits = [TaskRows(s, train=_rows(32, 2 * i, bool(i)), dev=[], test=_rows(16, 2 * i + 1, bool(i)))
              for i, s in enumerate(specs)]
    data, cfg = continual_setup("smoke", seed=0)
    settings = strategy_settings("scaled", data, seed=0, given={"loss_scale": 0.25, "ewc_lambda": 3.0})
    assert settings == ScaledSettings(loss_scale=0.25)                 # other strategies' keys are not its own
    results = run_continual(model, Stream.make(splits, model), {"scaled": settings}, cfg, out=tmp_path)
    res = results["scaled"]
    assert res.info["loss_scale"] == 0.25 and len(res.matrix) == 2 and res.bytes == model_bytes(model)
    assert json.loads((tmp_path / "scaled" / "result.json").read_text())["info"]["loss_scale"] == 0.25


@pytest.fixture(scope="module")
def run_args(tmp_path_factory) -> list[str]:
    """``cl-graft run`` arguments up to the strategies: a saved tiny BERT, a two-task stream of local data."""
    root = tmp_path_factory.mktemp("new_baseline")
    for i, name in enumerate(("alpha", "beta")):
        sizes = (("train", 64), ("test", 24))
        splits = {split: _rows(n, 2 * i + j, bool(i)) for j, (split, n) in enumerate(sizes)}
        write_task(root / "data" / name, ["negative", "positive"], splits)
    return ["run", "--model", str(save_tiny_model(root / "model")), "--data-dir", str(root / "data"),
            "--preset", "smoke", "--quiet", "--stream", "alpha,beta"]


def test_its_settings_are_cli_options_and_its_grid_is_tuned(registered, run_args, tmp_path):
    help_text = CliRunner().invoke(main, ["run", "--help"]).output
    assert "--loss-scale" in help_text and "Factor on every training loss." in help_text
    assert "scaled: the trained weights" in help_text                 # what it stores, from its entry
    out = str(tmp_path / "given")
    result = CliRunner().invoke(main, [*run_args, "--strategies", "scaled,naive", "--loss-scale", "0.25",
                                       "--out", out])
    assert result.exit_code == 0, result.output
    saved = json.loads(Path(out, "results.json").read_text())
    assert saved["strategies"]["scaled"]["info"]["loss_scale"] == 0.25
    assert saved["run"]["strategy_settings"] == {"scaled": {"loss_scale": 0.25}, "naive": {}}
    out = str(tmp_path / "tuned")
    result = CliRunner().invoke(main, [*run_args, "--strategies", "scaled", "--tune", "--out", out])
    assert result.exit_code == 0, result.output
    scaled = json.loads(Path(out, "results.json").read_text())["strategies"]["scaled"]
    assert scaled["info"]["tuning"]["grid"] == list(GRID) and len(scaled["info"]["tuning"]["dev_average"]) == 3
    assert {"loss_scale": scaled["info"]["loss_scale"]} == scaled["info"]["tuning"]["chosen"]


@pytest.mark.parametrize("scenario,floats", [("task", 64 * 256 + 256 + 2 * (256 * 10 + 10)),   # a head per task
                                             ("class", 64 * 256 + 256 + 256 * 10 + 10)])     # one head
def test_it_runs_on_a_digits_stream_in_either_scenario(registered, scenario, floats, tmp_path):
    out = str(tmp_path / scenario)
    result = CliRunner().invoke(main, ["run", "--stream", "permuted-digits:2", "--model", "mlp", "--scenario",
                                       scenario, "--preset", "smoke", "--quiet", "--steps", "2",
                                       "--strategies", "scaled", "--tune", "--out", out])
    assert result.exit_code == 0, result.output
    saved = json.loads(Path(out, "results.json").read_text())
    scaled = saved["strategies"]["scaled"]
    assert saved["scenario"] == scenario and scaled["bytes"] == floats * 4
    assert scaled["info"]["tuning"]["grid"] == list(GRID) and scaled["info"]["tuning"]["chosen"] in list(GRID)


def test_a_setting_of_no_chosen_strategy_is_refused(run_args, tmp_path):
    args = [*run_args, "--strategies", "naive", "--ewc-lambda", "5", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--ewc-lambda is a setting of none of --strategies naive" in result.output
    assert result.output.strip().count("\n") == 0 and not (tmp_path / "o").exists()


def test_settings_that_name_another_strategys_setting_alike_are_refused():
    @dataclass(frozen=True)
    class Clash(Settings):
        tolerance: float = 0.5                       # --tolerance already means graft's region_size.tolerance

    assert "loss_scale" in [o.name for o in registry_options([*STRATEGIES.values(), ENTRY])]
    with pytest.raises(ValueError, match="clashes with another strategy's 'region_size.tolerance'"):
        registry_options([*STRATEGIES.values(), StrategyEntry(name="clash", help="x", stores="y", build=print,
                                                              kept_bytes=print, settings=Clash)])
