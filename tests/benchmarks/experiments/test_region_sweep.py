"""The honest learned-vs-top-k sweep: its dev split, the dev-only choice, the paired standard error."""
from __future__ import annotations

import numpy as np
import pytest
from cl_graft.benchmarks.experiments.region_sweep import choose, paired_se, split_dev
from cl_graft.benchmarks.experiments.verdicts import se_verdict as verdict


def _rows(n_per_label: tuple[int, ...]) -> list[dict]:
    return [{"text": f"{label}-{i}", "label": label} for label, n in enumerate(n_per_label) for i in range(n)]


def test_split_dev_is_disjoint_stratified_and_deterministic():
    rows = _rows((64, 64, 7))
    select, choose_rows = split_dev(rows, seed=13)
    texts = lambda rs: [r["text"] for r in rs]
    assert not set(texts(select)) & set(texts(choose_rows))
    assert sorted(texts(select) + texts(choose_rows)) == sorted(texts(rows))
    assert [sum(r["label"] == k for r in select) for k in range(3)] == [32, 32, 3]     # odd extra to dev-choose
    assert split_dev(rows, seed=13) == (select, choose_rows)
    assert split_dev(rows, seed=14)[0] != select
    assert texts(select) == [t for t in texts(rows) if t in set(texts(select))]          # original order kept


def test_choose_reads_dev_only_and_refuses_test_scores():
    cands = [{"dev_choose": 0.7}, {"dev_choose": 0.8}, {"dev_choose": 0.8}, {"dev_choose": 0.6}]
    assert choose(cands) == 1                                     # best dev, the earliest on ties
    with pytest.raises(ValueError, match="before scoring test"):
        choose([*cands[:3], {"dev_choose": 0.1, "test": {"accuracy": 1.0}}])
    with pytest.raises(ValueError):
        choose([])


def test_paired_se_and_verdict():
    a = np.array([1, 1, 0, 1, 0, 1, 1, 0])
    assert paired_se(a, a) == 0.0
    b = np.array([1, 0, 0, 1, 0, 1, 0, 0])
    d = a - b
    assert paired_se(a, b) == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)))
    assert verdict(0.03, 0.01) == "beats" and verdict(-0.03, 0.01) == "loses"
    assert verdict(0.015, 0.01) == "within noise"


def _part(task: str, revision: str) -> dict:
    cand = lambda name, dev, acc: {"name": name, "size": 10, "seconds": 1.0, "dev_choose": dev,
                                    "test": {"accuracy": acc, "ece": 0.05}}
    cell = {"chosen": "graft[lr=2,base_fraction=1]", "chosen_point": {"lr": 2.0, "base_fraction": 1.0},
            "candidates": [cand("topk", 0.6, 0.70), {**cand("graft[lr=2,base_fraction=1]", 0.7, 0.72),
                                                     "best_step": 4}],
            "diff_test": 0.02, "se_single": 0.014, "se_paired": 0.006, "verdict": "beats",
            "posthoc_best_test": {"name": "graft[lr=2,base_fraction=1]", "diff_test": 0.02}}
    return {"config": {"command_line": f"sweep {task}", "git_revision": revision},
            "localize_base": {"steps": 12}, "grid": [{"lr": 2.0, "base_fraction": 1.0}], "split_seed": 13,
            "ft": {task: {"n_test": 1000, "test": 0.75}}, "cells": {task: {"0.0001": cell}}}


def test_merge_and_markdown():
    from cl_graft.benchmarks.experiments.region_sweep import markdown, merge

    merged = merge([_part("sst2", "abc"), _part("qnli", "abc")])
    assert list(merged["cells"]) == ["sst2", "qnli"] and len(merged["runs"]) == 2
    text = markdown(merged)
    assert "| sst2 | 0.01% | 1000 | 75.0 | 60.0 / 70.0 | lr=2,base_fraction=1 | 70.0 / 72.0 | +2.0 |" in text
    assert "(chosen)" in text
    other = _part("agnews", "abc")
    other["grid"] = [{"lr": 4.0, "base_fraction": 1.0}]
    with pytest.raises(SystemExit):
        merge([_part("sst2", "abc"), other])


def test_sweep_reads_its_batch_normalize_and_device_options(tmp_path):
    """The options added for the high-power comparison reach the sweep: it gets as far as reading the fine-tune."""
    from click.testing import CliRunner

    from cl_graft.benchmarks.experiments.region_sweep import main

    res = CliRunner().invoke(main, ["--finetuned", f"sst2={tmp_path / 'none'}", "--batch-size", "64", "--normalize",
                                    "none", "--device", "cpu", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "config.json: not found" in res.output, res.output
