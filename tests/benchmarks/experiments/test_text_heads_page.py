"""Where fine-tuning pays (benchmarks/experiments/text_heads_page.py): the committed page is what its committed runs
(and graft's strict re-scoring) give, and runs that cannot be paired are refused in one line."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from cl_graft.benchmarks.experiments.script_out import ScriptError, load_results
from cl_graft.benchmarks.experiments.text_heads_page import paired, page_text, read_rescoring, strict_graft

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "text_heads"
SEEDS = (0, 1, 2)


def _runs(kind: str) -> list[dict]:
    return [load_results(RESULTS / kind / f"seed{s}") for s in SEEDS]


def _rescored() -> list[dict]:
    return [read_rescoring(RESULTS / "graft_strict" / f"seed{s}") for s in SEEDS]


def test_the_committed_page_is_what_its_runs_give():
    pairs = paired(_runs("graft"), _runs("heads"))
    strict = strict_graft(pairs, _rescored()[::-1])                          # paired by count, not by order
    text = page_text(pairs, strict)
    assert (RESULTS / "text_heads.md").read_text(encoding="utf-8") == text
    graft = [g["strategies"]["graft"]["info"]["task_inference"]["accuracy"] for g, _ in pairs]
    assert f"[{100 * sum(sum(a) / 3 for a in graft) / 3:.1f} ± " in text    # Avalanche's count, from graft's runs
    assert f"{100 * sum(sum(strict[s]['accuracy']) / 3 for s in SEEDS) / 3:.1f} ± " in text
    assert all(strict[s]["run"]["git_revision"][:7] in text for s in SEEDS)         # the re-scorings' records
    for name in ("slda", "ranpac", "ncm"):                                   # the heads without task labels
        routed = [h["strategies"][name]["info"]["task_inference"] for _, h in pairs]
        assert f"| {100 * sum(sum(r['accuracy']) / 3 for r in routed) / 3:.1f} ± " in text, name
        assert all(a <= t for r in routed for a, t in zip(r["accuracy"], r["task_id"])), name
    assert "without task labels, both counted strictly" in text


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


def test_a_rescoring_that_is_not_a_runs_is_refused():
    pairs = paired(_runs("graft"), _runs("heads"))
    rescored = _rescored()
    other = copy.deepcopy(rescored)
    other[1]["rules"]["features"]["avalanche"][0] += 0.01
    with pytest.raises(ScriptError, match="--graft-strict 2: its Avalanche count .* is not the recorded one"):
        strict_graft(pairs, other)
    with pytest.raises(ScriptError, match="is not the recorded one of exactly one seed's"):
        strict_graft(pairs, [rescored[0], rescored[0]])
    with pytest.raises(ScriptError, match=r"--graft-strict holds seeds \[0, 1\], the runs \[0, 1, 2\]"):
        strict_graft(pairs, rescored[:2])


def test_graft_runs_that_counted_strictly_are_read_as_they_are():
    grafts = copy.deepcopy(_runs("graft"))
    for g in grafts:
        g["strategies"]["graft"]["info"]["task_inference"]["count"] = "strict"
    pairs = paired(grafts, _runs("heads"))
    text = page_text(pairs)
    own = [sum(g["strategies"]["graft"]["info"]["task_inference"]["accuracy"]) / 3 for g in grafts]
    row = next(line for line in text.splitlines() if line.startswith("| graft |"))
    assert "graft's runs count so too" in text and "given in brackets" not in text and "[" not in row
    assert f"| {100 * sum(own) / 3:.1f} ± " in text and "without task labels, both counted strictly" in text
    del grafts[1]["strategies"]["graft"]["info"]["task_inference"]["count"]        # one run of an older revision
    mixed = page_text(paired(grafts, _runs("heads")))
    assert "given in brackets" in mixed and "both counted strictly" not in mixed


def test_the_held_out_page_is_what_its_runs_give():
    """mnli → qqp → mpqa (the 12-task stream's next tasks with dev rows for every class): graft's runs count
    strictly themselves, no re-scoring."""
    held_out = RESULTS / "heldout"
    pairs = paired([load_results(held_out / "graft" / f"seed{s}") for s in SEEDS],
                   [load_results(held_out / "heads" / f"seed{s}") for s in SEEDS])
    text = page_text(pairs)
    assert (held_out / "text_heads.md").read_text(encoding="utf-8") == text
    assert "graft's runs count so too" in text and "without task labels, both counted strictly" in text
