"""Where fine-tuning pays (benchmarks/experiments/text_heads_page.py): the committed page is what its committed runs
give, and runs that cannot be paired are refused in one line."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from cl_graft.benchmarks.experiments.script_out import ScriptError, load_results
from cl_graft.benchmarks.experiments.text_heads_page import paired, page_text

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "text_heads"
SEEDS = (0, 1, 2)


def _runs(kind: str) -> list[dict]:
    return [load_results(RESULTS / kind / f"seed{s}") for s in SEEDS]


def test_the_committed_page_is_what_its_runs_give():
    text = page_text(paired(_runs("graft"), _runs("heads")))
    assert (RESULTS / "text_heads.md").read_text(encoding="utf-8") == text
    graft = [json.loads((RESULTS / "graft" / f"seed{s}" / "results.json").read_text())["strategies"]["graft"]
             for s in SEEDS]
    routed = sum(sum(g["info"]["task_inference"]["accuracy"]) / 3 for g in graft) / 3
    assert f"{100 * routed:.1f} ± " in text                        # graft without task labels, from its runs


def test_runs_that_cannot_be_paired_are_refused():
    grafts, heads = _runs("graft"), _runs("heads")
    with pytest.raises(ScriptError, match=r"graft runs of seeds \[0, 1\] but heads runs of seeds \[0, 1, 2\]"):
        paired(grafts[:2], heads)
    with pytest.raises(ScriptError, match="two graft runs of seed 0"):
        paired([grafts[0], grafts[0]], heads[:2])
    other = copy.deepcopy(heads)
    other[1]["run"]["k"] = 64
    with pytest.raises(ScriptError, match="seed 1: the graft and heads runs differ in 'k'"):
        paired(grafts, other)
    unrouted = copy.deepcopy(grafts)
    del unrouted[2]["strategies"]["graft"]["info"]["task_inference"]
    with pytest.raises(ScriptError, match="seed 2 has no graft scored without task labels"):
        paired(unrouted, heads)
