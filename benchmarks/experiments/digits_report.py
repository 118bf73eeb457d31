"""The digits page from the summaries of :mod:`.seeds_report`: per strategy the test rows it sees, its dev-chosen
setting, final average accuracy, forgetting, bytes and wall seconds over seeds, and graft minus it with Holm's
correction."""
from __future__ import annotations

from cl_graft.units import BYTE_UNIT

from .seeds_report import FORGETTING, HOW_TO_READ, SEES, SETTING, STORED, STRATEGY, WALL, Column, page, table_lines
from .verdicts import pm

COLUMNS = [STRATEGY, Column(header="test rows", cell=lambda name, row, s: SEES[s["scenario"]]), SETTING,
           Column(header="average %", cell=lambda name, row, s: pm(row)), FORGETTING, STORED, WALL]


def render(summaries: list[dict]) -> str:
    """The page: one section per benchmark (:func:`.seeds_report.table_lines`) under a header that says how to
    read them."""
    return page("Digits benchmarks through `cl-graft run`", (
        "Made by `benchmarks/experiments/digits.py` (every number from `cl-graft run` invocations; tables by "
        "`benchmarks/experiments/digits_report.py`, data: `digits.json`; artifact paths relative to this "
        "folder). Per strategy: final average accuracy over tasks and forgetting (mean ± sample sd over seeds, %), "
        f"stored bytes ({BYTE_UNIT}) as each strategy's entry counts them (mean over seeds; a baseline's trained weights and what "
        "its method keeps, graft's regions, heads and feature statistics beside the starting model; replay-matched "
        "holds as many bytes of memory rows as graft keeps in the same run), wall seconds (2 shared CPU cores: "
        "noisy). " + HOW_TO_READ), (table_lines(s, COLUMNS) for s in summaries))
