"""Strategy plugins (issue 56, round 5, item 5's follow-up): a strategy plugin (a ``*.dist-info`` of the entry-point
group ``"cl_graft.strategies"`` on ``PYTHONPATH``) that cannot be imported leaves ``--help`` and a run of built-in
strategies working and fails only a ``--strategies`` naming a plugin's, in one line naming it and its
distribution; a ``module:attr`` entry point runs with its own settings option, both recorded in config.json; a plugin's
strategy named as a built-in one is refused naming both."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .harness import DIGITS, Case, Probe, error_line

TITLE = "strategy plugins"

TOY = '''from dataclasses import dataclass, field

from cl_graft.strategies.interface.entry import StrategyEntry, model_bytes
from cl_graft.strategies.interface.settings import Settings


@dataclass(frozen=True)
class ToySettings(Settings):
    toy_scale: float = field(default=1.0, metadata={{"help": "Toy: factor on every training loss."}})


def build(ctx):
    from avalanche.training import Naive

    return Naive(**ctx.template, plugins=ctx.plugins)


def kept(strategy, model):
    return model_bytes(strategy.model), {{}}


MINE = tuple(StrategyEntry(name=name, help="a plugin's Naive", stores="the trained weights", build=build,
                           kept_bytes=kept, settings=ToySettings, scenarios=("task",)) for name in {names!r})
'''


def cases(p: Probe) -> list[Case]:
    r = p.root / "r5s"
    o = r / "o"
    run = ["run", "--stream", "permuted-digits:2", *DIGITS, "--steps", "2"]
    broken = _plugin(r / "broken", "r5s_broken", "raise RuntimeError('the plugin needs a licence key')\n")
    toy = _plugin(r / "toy", "r5s_toy", TOY.format(names=("r5s-toy",)), value="r5s_toy:MINE")
    named = _plugin(r / "named", "r5s_named", TOY.format(names=("naive", "r5s-other")), value="r5s_named:MINE")
    listed = Case("broken plugin: cl-graft run --help", ["run", "--help"], want=0, env=broken,
                  check=lambda: "help shown")
    served = Case("module:attr plugin: run --strategies r5s-toy --toy-scale 0.5",
                  [*run, "--strategies", "r5s-toy", "--toy-scale", "0.5", "--out", r / "toy-run"], want=0, env=toy)
    served.check = _recorded(r / "toy-run", "r5s-toy", {"toy_scale": 0.5})
    return [listed,
            _named("broken plugin: run --strategies naive,toy", [*run, "--strategies", "naive,toy", "--out", o], o,
                   broken, "strategy plugin toy = r5s_broken", "distribution r5s-broken 0.1", "RuntimeError"),
            served,
            _named("plugin strategy named naive: run --strategies r5s-other", [*run, "--strategies", "r5s-other",
                                                                              "--out", o], o, named,
                   "two strategies are called 'naive'", "'naive' (built in)", "r5s-named 0.1")]


def _plugin(folder: Path, module: str, source: str, *, value: str | None = None) -> dict[str, str]:
    """A plugin distribution in ``folder`` (``module.py`` and its ``*.dist-info`` declaring the entry point
    ``toy = value`` of the strategies' group); the environment that installs it (``PYTHONPATH``)."""
    dist = folder / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (folder / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[cl_graft.strategies]\ntoy = {value or module}\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))}


def _named(name: str, args: list, out: Path, env: dict[str, str], *words: str) -> Case:
    """A case refused in one line (exit 2) naming ``words``, nothing written to ``out``."""
    case = Case(name, args, env=env)

    def check() -> str:
        line = error_line(case)
        missing = [w for w in words if w not in line]
        if missing:
            return f"FAILED: the error does not name {missing}"
        return "one line naming them, nothing written" if not out.exists() else f"{out.name} EXISTS"

    case.check = check
    return case


def _recorded(folder: Path, strategy: str, settings: dict):
    """A check: ``folder/config.json`` records ``strategy``'s ``settings`` as run and the plugin's distribution."""
    def check() -> str:
        if not (folder / "config.json").is_file():
            return "FAILED: no config.json"
        record = json.loads((folder / "config.json").read_text())
        ran = (record.get("strategy_settings") or {}).get(strategy)
        source = ((record.get("strategy_plugins") or {}).get(strategy) or {}).get("distribution")
        if ran != settings or source is None:
            return f"FAILED: config.json has settings {ran}, plugin {source}"
        return f"config.json: {strategy} of {source} ran with {ran}"
    return check
