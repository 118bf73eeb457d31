"""The small-regions probe's pages and row sampling (benchmarks/experiments/small_regions.py); its regions, grafts
and training are find_region, graft_model and finetune_, tested with the rest of cl_graft, and its ``--combine`` is
script_out.combine_seeds, tested through the retraining probe."""
from __future__ import annotations

from cl_graft.benchmarks.experiments.probes.small_regions import outside_rows, page, seeds_page


def _result(seed: int, topk: float) -> dict:
    cells = [{"region": "topk", "share": 0.01, "accuracy": topk, "seconds": 2.0},
             {"region": "fish-trained", "share": 0.01, "lr": 0.05, "accuracy": 0.78, "seconds": 110.0}]
    return {"steps": 200, "probe_rows": 1000, "config": {"seed": seed, "command_line": f"python -m x --seed {seed}",
                                                         "git_revision": "abcdef0"},
            "tasks": {t: {"full": 0.80, "seconds": 120.0, "cells": cells} for t in ("a", "b")}}


def test_rows_outside_the_used_ones_only():
    rows = [{"text": str(i), "label": i % 2} for i in range(10)]
    got = outside_rows(rows, [dict(r) for r in rows[:4]], 100, seed=0)
    assert sorted(r["text"] for r in got) == [str(i) for i in range(4, 10)]
    again = outside_rows(rows, [], 3, seed=1)
    assert again == outside_rows(rows, [], 3, seed=1) and len(again) == 3


def test_page_gives_each_cell_as_a_share_of_full():
    text = page(_result(0, 0.76))
    assert "| a | full | 100 |  | 80.0 | 100.0 | 120 |" in text
    assert "| a | topk | 1.0 |  | 76.0 | 95.0 | 2 |" in text
    assert "| b | fish-trained | 1.0 | 0.05 | 78.0 | 97.5 | 110 |" in text


def test_seeds_page_pairs_each_cell_with_full_over_seeds():
    results = [_result(0, 0.76), _result(1, 0.77), _result(2, 0.78)]
    text = seeds_page(results)
    assert "| topk | 1.0 |  | 96.2 | -3.0 [-5.5, -0.5] |" in text                    # t(2) = 4.303, sd 1
    assert "| fish-trained | 1.0 | 0.05 | 97.5 | -2.0 [-2.0, +0.0] |" in text   # std 0: sign test, 3 pairs
