"""Strategy plugins (issue 56, round 5, item 5's follow-up): a strategy plugin (a ``*.dist-info`` of the entry-point
group ``"cl_graft.strategies"`` on ``PYTHONPATH``) that cannot be imported leaves ``--help`` and a run of built-in
strategies working and fails only a ``--strategies`` naming a plugin's, in one line naming it and its
distribution; a ``module:attr`` entry point runs with its own settings option, both recorded in config.json; a plugin's
strategy named as a built-in one is refused naming both."""
from __future__ import annotations

import json
from pathlib import Path

from .harness import DIGITS, Case, Probe, plugin_distribution, refused_naming

STRATEGIES = "cl_graft.strategies"
"""The strategies' entry-point group."""

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
    broken = plugin_distribution(STRATEGIES, r / "broken", "r5s_broken", "raise RuntimeError('the plugin needs a licence key')\n")
    toy = plugin_distribution(STRATEGIES, r / "toy", "r5s_toy", TOY.format(names=("r5s-toy",)), value="r5s_toy:MINE")
    named = plugin_distribution(STRATEGIES, r / "named", "r5s_named", TOY.format(names=("naive", "r5s-other")), value="r5s_named:MINE")
    listed = Case("broken plugin: cl-graft run --help", ["run", "--help"], want=0, env=broken,
                  check=lambda: "help shown")
    served = Case("module:attr plugin: run --strategies r5s-toy --toy-scale 0.5",
                  [*run, "--strategies", "r5s-toy", "--toy-scale", "0.5", "--out", r / "toy-run"], want=0, env=toy)
    served.check = _recorded(r / "toy-run", "r5s-toy", {"toy_scale": 0.5})
    return [listed,
            refused_naming("broken plugin: run --strategies naive,toy", [*run, "--strategies", "naive,toy", "--out", o], o,
                   broken, "strategy plugin toy = r5s_broken", "distribution r5s-broken 0.1", "RuntimeError"),
            served,
            refused_naming("plugin strategy named naive: run --strategies r5s-other", [*run, "--strategies", "r5s-other",
                                                                              "--out", o], o, named,
                   "two strategies are called 'naive'", "'naive' (built in)", "r5s-named 0.1")]


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
