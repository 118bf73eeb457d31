"""What runs is what is recorded: an explicit setting against ``--tune`` and ``--settings-from`` (refused in one
line, not silently overridden), and the settings ``config.json`` records after tuning (the ones that ran). Digits
streams and a small MLP keep it short; ``r4/tuned`` is read by :mod:`.pages`."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .harness import DIGITS, Case, Probe

TITLE = "what runs is what is recorded"


def cases(p: Probe) -> list[Case]:
    r, o = p.root / "r4", p.root / "r4" / "o"
    run = ["run", "--stream", "permuted-digits:2", *DIGITS, "--steps", "5"]
    tuned = [*run, "--strategies", "ewc,replay"]
    return [
        Case("run --tune --tune-budget 2 (ewc, replay): config.json records what ran",
             [*tuned, "--tune", "--tune-budget", "2", "--out", r / "tuned"], want=0, check=lambda: _tuned_recorded(r)),
        Case("--settings-from T --ewc-lambda 5 (T chose another)",
             [*run, "--strategies", "ewc", "--settings-from", r / "tuned", "--ewc-lambda", "5", "--out", o],
             check=p.absent(o)),
        Case("--tune --tune-budget 2 --ewc-lambda 5", [*run, "--strategies", "ewc", "--tune", "--tune-budget", "2",
                                                       "--ewc-lambda", "5", "--out", o], check=p.absent(o)),
        Case("--settings-from T: the settings T chose, recorded", [*tuned, "--settings-from", r / "tuned",
                                                                  "--out", r / "reused"], want=0,
             check=_same_settings(r, r / "reused")),
    ]


def _tuned_recorded(r: Path) -> str:
    results = json.loads((r / "tuned/results.json").read_text())
    recorded = json.loads((r / "tuned/config.json").read_text())["strategy_settings"]
    ran = {n: results["strategies"][n]["info"]["tuning"]["chosen"] for n in ("ewc", "replay")}
    same = all(recorded[n][k] == v for n, point in ran.items() for k, v in point.items())
    return f"config.json records the chosen {ran}" if same else f"FAILED: chose {ran}, recorded {recorded}"


def _same_settings(r: Path, folder: Path) -> Callable[[], str]:
    def check() -> str:
        tuned = json.loads((r / "tuned/config.json").read_text())["strategy_settings"]
        reused = json.loads((folder / "config.json").read_text())["strategy_settings"]
        return "strategy_settings equal the tuned run's" if reused == tuned else "FAILED: settings DIFFER"
    return check
