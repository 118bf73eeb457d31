"""The results pages read results as cl-graft does: a page script refuses a tampered value (an average of 7.5) in
one line, runs on legitimate runs (a graft run without ``single`` says what it needs; a record without a scenario
is a text run's), and refuses bad options in one line. Reads ``r4/tuned`` (:mod:`.recorded_settings`) and
``r4/resumed`` (:mod:`.resume`)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from . import scripts
from .harness import Case, Probe

TITLE = "pages read results as cl-graft does"
TEXT_SIZE, RETRAIN, DIGITS = "text_size_page", "probes.retrain_ab", "digits"
"""The page scripts, as modules of ``cl_graft.benchmarks.experiments``."""


def cases(p: Probe) -> list[Case]:
    r, o = p.root / "r4", p.root / "r4" / "page"
    return [
        Case("text_size_page of a run with summary.average 7.5", [TEXT_SIZE, "--runs", r / "avg75.json", "--out", o],
             script=scripts.PAGE, setup=_tampered(r / "tuned/results.json", r / "avg75.json", _average_75),
             check=p.absent(o)),
        Case("retrain_ab (retrain_page) of a run with summary.average 7.5",
             [RETRAIN, "--runs", r / "avg75.json", "--out", o], script=scripts.PAGE, check=p.absent(o)),
        Case("text_size_page of a graft run without single", [TEXT_SIZE, "--runs", r / "resumed", "--out", o],
             script=scripts.PAGE, check=p.absent(o)),
        Case("retrain_ab (retrain_page) of a run whose record names no scenario (a text run's)",
             [RETRAIN, "--runs", r / "text-like.json", "--out", r / "retrain"], want=0, script=scripts.PAGE,
             setup=_tampered(r / "resumed/results.json", r / "text-like.json", _older_record),
             check=lambda: "page written" if (r / "retrain/retrain.md").is_file() else "FAILED"),
        Case("digits --seeds a,b", [DIGITS, "--seeds", "a,b", "--out", o], script=scripts.PAGE, check=p.absent(o)),
        Case("digits --report-from a folder without runs/", [DIGITS, "--report-from", r / "tuned", "--out", o],
             script=scripts.PAGE, check=p.absent(o)),
    ]


def _tampered(source: Path, path: Path, change) -> Callable[[], None]:
    def setup() -> None:
        data = json.loads(source.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return setup


def _average_75(results: dict) -> None:
    for res in results["strategies"].values():
        res["summary"]["average"] = 7.5


def _older_record(results: dict) -> None:
    """A record as cl-graft wrote it before runs named their scenario, and before ``results.json`` was sealed."""
    results["run"].pop("scenario")
    results.pop("sha256")
