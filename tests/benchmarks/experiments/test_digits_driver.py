"""The digits driver (benchmarks/experiments/digits.py, the digits preset of seeds.py) runs ``cl-graft run`` and
keeps no strategy of its own; its report (seeds_report.py, the digits page digits_report.py) pairs seeds against
graft with Holm's step-down correction (verdicts.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from cl_graft.benchmarks.experiments.digits_report import render
from cl_graft.benchmarks.experiments.seeds_report import benchmark_summary, verdict_line
from cl_graft.benchmarks.experiments.verdicts import bonferroni_verdict, holm_intervals
from click.testing import CliRunner

from helpers import results_json, strategy_json

pytest.importorskip("avalanche")


def test_holm_steps_down_and_its_intervals_agree_with_its_decisions():
    diffs = {"clear": [0.50, 0.51, 0.52], "second": [0.10, 0.12, 0.11], "weak": [0.02, -0.01, 0.05],
             "behind": [-0.30, -0.31, -0.29]}
    out = holm_intervals(diffs)
    order = sorted(out, key=lambda k: out[k]["p"])
    assert [out[k]["level"] for k in order[:3]] == pytest.approx([0.05 / 4, 0.05 / 3, 0.05 / 2])
    assert out["weak"]["ahead"] == 0 and out["weak"]["low"] < 0 < out["weak"]["high"]
    assert out["clear"]["ahead"] == 1 and out["behind"]["ahead"] == -1 and out["second"]["ahead"] == 1
    for s in out.values():                                     # the interval excludes 0 exactly where Holm rejects
        assert (s["low"] > 0 or s["high"] < 0) == (s["ahead"] != 0)
        assert (s["p_holm"] <= 0.05) == (s["ahead"] != 0)


def test_a_difference_without_spread_over_seeds_needs_the_sign_tests_evidence():
    """The same difference on every seed (one test row) is no t-test evidence: 3 seeds cannot separate it, 8 can."""
    three = holm_intervals({"lwf": [-0.002] * 3})["lwf"]
    assert three["ahead"] == 0 and three["p"] == pytest.approx(0.25) and three["low"] < 0 <= three["high"]
    eight = holm_intervals({"lwf": [-0.002] * 8})["lwf"]
    assert eight["ahead"] == -1 and eight["p"] == pytest.approx(2 / 256) and eight["high"] < 0


def test_holm_stops_at_the_first_comparison_it_keeps():
    # p ordered: a rejected at 0.05/3; b not at 0.05/2 -> c keeps b's level even if its own p would pass 0.05/1
    out = holm_intervals({"a": [1.0, 1.01, 0.99], "b": [0.1, 0.3, -0.05], "c": [0.1, 0.35, -0.06]})
    assert out["a"]["ahead"] == 1 and out["b"]["ahead"] == 0 and out["c"]["ahead"] == 0
    assert out["c"]["level"] == out["b"]["level"] == pytest.approx(0.025)


def test_bonferroni_names_the_holm_verdicts_its_simultaneous_intervals_would_change():
    """Holm's later steps test at wider levels than Bonferroni's α/m: a comparison Holm rejects at its last step
    can be kept by Bonferroni, and the line under the table says so; the ceiling is counted apart from the peers."""
    diffs = {"a": [0.50, 0.51, 0.52, 0.50, 0.49], "b": [0.30, 0.31, 0.29, 0.30, 0.32],
             "c": [0.10, 0.12, 0.11, 0.10, 0.13], "cumulative": [0.2, 0.21, 0.19, 0.2, 0.22]}
    out = holm_intervals(diffs)
    assert out["c"]["ahead"] == 1 and bonferroni_verdict(out["c"], 4) == 1
    weak = holm_intervals({"x": [1.0, 1.01, 0.99, 1.0, 1.02], "y": [0.01, 0.05, 0.005, 0.06, 0.03]})
    assert weak["y"]["ahead"] == 1 and bonferroni_verdict(weak["y"], 2) == 0
    line = verdict_line({"graft_minus": weak, "graft_minus_sizes": {}, "seeds": [0, 1, 2, 3, 4]})
    assert "y (graft ahead → not separable)" in line and "of the 2 peers" in line
    line = verdict_line({"graft_minus": out, "graft_minus_sizes": {}, "seeds": [0, 1, 2, 3, 4]})
    assert "ahead of 3 of the 3 peers" in line and "cumulative (keeps every row: a reference, not a peer): graft ahead" in line
    assert line.endswith("the same verdicts.")


def _results(seed: int, graft: float, naive: float, *, scenario: str = "class") -> dict:
    entry = lambda a, b: strategy_json([a, a], bytes=b, seconds=3.0)
    return results_json({"seed": seed, "command_line": "cl-graft run", "git_revision": "abc", "device_name": "cpu",
                         "stream": "permuted-digits:2", "model": "mlp", "preset": "smoke"}, ["t0", "t1"],
                        {"graft": entry(graft, 1000), "naive": entry(naive, 0), "copy": entry(naive, 0)},
                        scenario=scenario, chance=[[0.08, 0.12], [0.08, 0.12]])


def test_the_report_names_scenario_bytes_flags_and_artifacts(tmp_path):
    folders = []
    for seed, (g, n) in enumerate([(0.9, 0.5), (0.92, 0.5), (0.91, 0.52)]):
        folder = tmp_path / "runs" / "b" / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(_results(seed, g, n)))
        folders.append(folder)
    summary = benchmark_summary({"main": folders}, root=tmp_path)
    assert summary["rows"]["copy"]["sanity"] and not summary["rows"]["graft"]["sanity"]   # equals naive's matrix
    assert summary["artifacts"][0] == "runs/b/seed0/results.json"
    page = render([summary])
    assert "class-incremental: no strategy gets a task label" in page
    assert "| copy! | no task label |" in page and "! copy probably misconfigured on seeds 0, 1, 2" in page
    assert "1000 B" in page or "1.0 KB" in page
    assert summary["graft_minus"]["naive"]["mean"] == pytest.approx(np.mean([0.4, 0.42, 0.39]))


def test_the_driver_runs_cl_graft_run_per_seed_and_writes_the_tables(tmp_path, monkeypatch):
    from cl_graft.benchmarks.experiments import seeds
    from cl_graft.benchmarks.experiments.digits import main

    from helpers import InProcessCli

    monkeypatch.chdir(tmp_path)
    started = InProcessCli()                                     # `python -m cl_graft.cli`, in this process
    monkeypatch.setattr(seeds, "subprocess", started)
    out = tmp_path / "digits"
    args = ["--out", str(out), "--benchmarks", "permuted-digits:2/mlp/task", "--seeds", "0,1",
            "--task-peers", "graft,naive", "--tune-budget", "1", "--graft-variants", "open",
            "--run-option=--preset=smoke", "--run-option=--steps=1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert [a[:2] + a[a.index("--seed"):a.index("--seed") + 2] for a in started.commands] == \
        [["run", "--stream", "--seed", s] for s in ("0", "0", "1", "1")]          # main and open, per seed
    run0 = json.loads((out / "runs/permuted-digits-2-mlp-task/seed0/results.json").read_text())
    run1 = json.loads((out / "runs/permuted-digits-2-mlp-task/seed1/results.json").read_text())
    assert run0["run"]["command_line"].startswith("cl-graft run --stream permuted-digits:2 --model mlp")
    assert "--tune" in run0["run"]["command_line"] and "--settings-from work/" in run1["run"]["command_line"]
    page = (out / "digits.md").read_text()
    assert "task-incremental: every strategy gets the task label at test" in page and "reuse them" in page
    assert "| naive | task label given |" in page and "runs/permuted-digits-2-mlp-task/seed1/results.json" in page
    opened = json.loads((out / "runs/permuted-digits-2-mlp-task/graft-open/seed1/results.json").read_text())
    assert "--plan open" in opened["run"]["command_line"] and "| graft[open] |" in page   # no stream length
    assert str(tmp_path) not in page + (out / "digits.json").read_text()
    again = tmp_path / "again"
    assert CliRunner().invoke(main, ["--out", str(again), "--benchmarks", "permuted-digits:2/mlp/task",
                                     "--report-from", str(out)]).exit_code == 0
    assert (again / "digits.md").read_text() == page


def test_the_size_line_counts_tasks_below_cap_misses_and_learned_regions_that_won(tmp_path):
    folders = []
    for seed in range(2):
        results = _results(seed, 0.9, 0.5, scenario="task")
        sizing = [{"share": 0.01, "cap_share": 0.05, "below_cap": True, "met": True, "refined_gain": 0.02},
                  {"share": 0.05, "cap_share": 0.05, "below_cap": False, "met": seed == 0, "refined_gain": 0.0}]
        results["strategies"]["graft"]["info"] = {"sizing": sizing}
        folder = tmp_path / "runs" / "b" / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(results))
        folders.append(folder)
    summary = benchmark_summary({"main": folders}, root=tmp_path)
    line = next(x for x in render([summary]).splitlines() if x.startswith("graft: region per task"))
    assert "seed 0 (% of graftable elements): 1, 5" in line and "below their cap, per seed: 1, 1 of 2" in line
    assert "1 of 4 task runs missed the size target" in line
    assert "scored above the chosen rung's top-|Δ| region on the dev rows, per seed: 1, 1." in line
    for folder in folders:                                       # older records hold no refined_gain: no claim
        results = json.loads((folder / "results.json").read_text())
        for record in results["strategies"]["graft"]["info"]["sizing"]:
            del record["refined_gain"]
        (folder / "results.json").write_text(json.dumps(results))
    assert "top-|Δ|" not in render([benchmark_summary({"main": folders}, root=tmp_path)])
