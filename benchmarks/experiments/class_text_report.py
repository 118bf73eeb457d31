"""The class-incremental text page (issue 43) from the summaries of :mod:`.seeds_report`: beside the digits page's
columns, per strategy whether it keeps training rows, its average incremental accuracy and the share of test rows a
routing strategy sends to their own experience; under each table, plainly, whether a strategy that keeps no
training rows beats graft."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from cl_graft.strategies.comparison.metrics import average_incremental_accuracy

from .seeds_report import (
    FORGETTING,
    HOW_TO_READ,
    REFERENCE,
    SETTING,
    STORED,
    STRATEGY,
    WALL,
    Column,
    benchmark_summary,
    page,
    table_lines,
)
from .verdicts import mean_sd, pm

ROW_PARTS = ("memory", "rows", "held_out")
"""The parts of a strategy's kept state (``info["kept"]``, :mod:`cl_graft.strategies.baselines.common`) that are
training rows: a replay memory, every row seen, rows held out to fit a layer."""


def keeps_rows(info: dict) -> bool:
    """Whether a result's kept state holds training rows (:data:`ROW_PARTS`, more than 0 bytes)."""
    return any(info.get("kept", {}).get(part, 0) > 0 for part in ROW_PARTS)


def text_fields(results: list[dict]) -> dict:
    """A strategy's extra fields (one ``results.json`` entry per seed): ``incremental`` (average incremental
    accuracy, mean ± sd over seeds), ``task_id`` (share of test rows routed to their own experience, mean over
    experiences of ``info["task_id"]``, then over the seeds that route; None where none does) and
    ``keeps_rows``."""
    routed = [float(np.mean(r["info"]["task_id"])) for r in results if r["info"].get("task_id")]
    return {"incremental": mean_sd([average_incremental_accuracy(r["matrix"]) for r in results]),
            "task_id": mean_sd(routed), "keeps_rows": any(keeps_rows(r["info"]) for r in results)}


def summary(folders: dict[str, list[Path]], *, root: Path) -> dict:
    """One benchmark's summary (:func:`.seeds_report.benchmark_summary`) with :func:`text_fields` in each row."""
    return benchmark_summary(folders, root=root, row_fields=text_fields)


COLUMNS = [STRATEGY,
           Column(header="keeps training rows", cell=lambda name, row, s: "yes" if row["keeps_rows"] else "no"),
           SETTING, Column(header="after the last experience %", cell=lambda name, row, s: pm(row)),
           Column(header="average incremental %", cell=lambda name, row, s: pm(row["incremental"])), FORGETTING,
           Column(header="task identified %", cell=lambda name, row, s: pm(row["task_id"])), STORED, WALL]


def rowless_line(s: dict) -> list[str]:
    """Whether a strategy that keeps no training rows beats graft (its Holm verdict ``graft behind``), said
    plainly, and which of them score higher than graft on average without being separable: one line, none where
    graft is the only such strategy."""
    minus = s["graft_minus"]
    rowless = [n for n, row in s["rows"].items() if n in minus and not row["keeps_rows"]]
    if not rowless:
        return []
    beat = [n for n in rowless if minus[n]["ahead"] == -1]
    higher = [n for n in rowless if n not in beat and minus[n]["mean"] < 0]
    if beat:
        line = ("**Beaten by a strategy that keeps no training rows:** " + ", ".join(
            f"{n} is ahead of graft by {-100 * minus[n]['mean']:.1f} points" for n in beat)
                + " (Holm interval excludes 0)")
    else:
        line = (f"No strategy that keeps no training rows ({', '.join(rowless)}) beats {REFERENCE} by its Holm "
                "interval")
    if higher:
        line += (f"; {', '.join(higher)} {'scores' if len(higher) == 1 else 'score'} higher than graft on average, "
                 "not separable")
    return [line + "."]


def render(summaries: list[dict]) -> str:
    """The page: one section per benchmark (:func:`.seeds_report.table_lines`, :func:`rowless_line` under its
    verdicts) under a header that says how to read them."""
    return page("Class-incremental text through `cl-graft run`", (
        "Made by `benchmarks/experiments/class_text.py` (every number from `cl-graft run` invocations; tables by "
        "`benchmarks/experiments/class_text_report.py`, data: `class_text.json`; artifact paths relative to this "
        "folder). Per strategy, mean ± sample sd over seeds (%): accuracy after the last experience (the mean "
        "over experiences of the accuracy matrix's last row), average incremental accuracy (after each experience "
        "the mean accuracy over the experiences seen so far, averaged over the experiences), forgetting, and for "
        "the strategies that route a test row to one of their tasks (class scenario) the share of test rows sent "
        "to their own experience (\"task identified\", `info.task_id` of the last evaluation, averaged over "
        "experiences). \"keeps training rows\": its kept state holds rows of the stream (a replay memory, every "
        "row seen, held-out rows; `info.kept`). Stored bytes as each strategy's entry counts them (mean over "
        "seeds; a baseline's trained weights and what its method keeps, graft's regions, heads and feature "
        "statistics beside the starting model; replay-matched holds as many bytes of memory rows as graft keeps "
        "in the same run), wall seconds per strategy (CPU timings beside other work are noisy). " + HOW_TO_READ),
        (table_lines(s, COLUMNS, rowless_line(s)) for s in summaries))
