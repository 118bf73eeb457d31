"""The multi-seed drivers (:mod:`...seeds`, here its digits preset) own their invocations: an ``--out`` spelled
with ``..`` runs (its invocations are inside the folder the driver lends them); a ``--run-option`` naming an option
the driver sets (``--seed``, ``--out``), a seed or a benchmark listed twice, and ``--report-from`` a folder without
the benchmark are refused in one line before anything is written; ``--settings-from`` a run that chose no settings,
or whose ``results.json`` was edited, is refused in one line; the driver module run alone names its page scripts.
Reads ``run`` (:mod:`.references`) and ``r4/tuned`` (:mod:`.recorded_settings`)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from . import scripts
from .harness import DIGITS, RUN, Case, Probe

TITLE = "multi-seed drivers own their invocations"
DRIVER = "digits"
"""The driver's preset the cases run (digits streams: no data folder, a small MLP)."""
BENCH = "permuted-digits:2/mlp/task"


def cases(p: Probe) -> list[Case]:
    r = p.root / "r5"
    o = r / "o"
    driver = [DRIVER, "--benchmarks", BENCH, "--task-peers", "naive", "--run-option=--preset=smoke",
              "--run-option=--steps=2"]
    digits = ["run", "--stream", "permuted-digits:2", *DIGITS, "--steps", "2"]
    seeds_alone = Case("the driver module alone (python -m ...experiments.seeds)", ["seeds"], script=scripts.PAGE)
    seeds_alone.check = lambda: _one_line(seeds_alone)
    return [
        Case("--out r5/sub/../S2 (a path through `..`), seeds 0,1", [*driver, "--seeds", "0,1", "--out",
                                                                      r / "sub" / ".." / "S2"],
             want=0, script=scripts.PAGE, setup=lambda: (r / "sub").mkdir(parents=True), check=lambda: _page(r / "S2")),
        Case("--run-option=--seed=7 with --seeds 0,1", [*driver, "--seeds", "0,1", "--run-option=--seed=7",
                                                        "--out", o], script=scripts.PAGE, check=p.absent(o)),
        Case("--run-option=--seed --run-option=7", [*driver, "--seeds", "0,1", "--run-option=--seed",
                                                    "--run-option=7", "--out", o], script=scripts.PAGE,
             check=p.absent(o)),
        Case("--run-option=--out=<an absolute folder>", [*driver, "--seeds", "0,1", f"--run-option=--out={r / 'abs'}",
                                                         "--out", o], script=scripts.PAGE,
             check=lambda: "nothing written" if not o.exists() and not (r / "abs").exists() else "a folder EXISTS"),
        Case("--seeds 0,0", [*driver, "--seeds", "0,0", "--out", o], script=scripts.PAGE, check=p.absent(o)),
        Case("--benchmarks B,B", [DRIVER, "--benchmarks", f"{BENCH},{BENCH}", "--task-peers", "naive", "--seeds", "0,1",
                                  "--out", o], script=scripts.PAGE, check=p.absent(o)),
        Case("--report-from a folder without the benchmark", [DRIVER, "--benchmarks", "permuted-digits:3/mlp/task",
                                                              "--report-from", r / "S2", "--out", o],
             script=scripts.PAGE, check=p.absent(o)),
        Case("run --settings-from a run that chose no settings (naive)",
             ["run", "--stream", "sst2,cr", "--data-dir", p.data, *RUN, "--strategies", "naive", "--settings-from",
              p.root / "run", "--out", o], check=p.absent(o)),
        Case("run --settings-from a run whose results.json was edited (another grid point)",
             [*digits, "--strategies", "ewc", "--settings-from", r / "edited", "--out", o],
             setup=_edited_choice(p.root / "r4" / "tuned", r / "edited"), check=p.absent(o)),
        seeds_alone,
    ]


def _page(out: Path) -> str:
    """What the driver's run under ``out`` made: its page and the seeds of its table."""
    if not (out / f"{DRIVER}.md").is_file():
        return "NO page"
    seeds = json.loads((out / f"{DRIVER}.json").read_text())["benchmarks"][0]["seeds"]
    return f"page written, seeds {', '.join(map(str, seeds))}"


def _edited_choice(tuned: Path, folder: Path) -> Callable[[], None]:
    """A setup: ``folder`` holds ``tuned``'s results.json with ewc's chosen point replaced by another point of the
    grid it tried (valid, not chosen), its sha256 left as it was."""
    def setup() -> None:
        results = json.loads((tuned / "results.json").read_text())
        tuning = results["strategies"]["ewc"]["info"]["tuning"]
        tuning["chosen"] = next(point for point in tuning["grid"] if point != tuning["chosen"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(results))
    return setup


def _one_line(case: Case) -> str:
    """Whether the case's stderr is one ``Error:`` line and nothing else."""
    lines = case.result.get("stderr", "").strip().splitlines()
    return "one line" if len(lines) == 1 and lines[0].startswith("Error:") else f"{len(lines)} lines, NO one line"
