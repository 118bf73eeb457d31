"""Sanity flags: a strategy whose accuracy matrix equals Naive's, or that sits at chance on most tasks, is
marked "probably misconfigured" in the summary table and in results.json."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cl_graft.errors import UserError
from cl_graft.strategies.comparison.metrics import at_chance_tasks, chance_band, equals_matrix, sanity_flags, summarize
from cl_graft.strategies.comparison.report import result_flags, summary_table, write_results
from cl_graft.strategies.comparison.runner import StrategyResult

from helpers import results_json

NAN = float("nan")
NAIVE = [[0.9, NAN, NAN], [0.5, 0.95, NAN], [0.4, 0.6, 0.97]]
TEN_CLASSES = [chance_band(10)] * 3


def _result(name: str, matrix) -> StrategyResult:
    return StrategyResult(name, ["a", "b", "c"], [list(r) for r in matrix], seconds=1.0, bytes=8)


def test_equal_means_same_shape_same_unseen_cells_and_every_cell_within_the_tolerance():
    assert equals_matrix(NAIVE, [[v + 0.0009 for v in row] for row in NAIVE])
    assert not equals_matrix(NAIVE, [[v + 0.002 for v in row] for row in NAIVE])    # one test row in 500
    assert not equals_matrix(NAIVE, [[0.9, 0.0, NAN], NAIVE[1], NAIVE[2]])         # a cell seen in one only
    assert not equals_matrix(NAIVE, [NAIVE[2]])                                     # one-row result (joint)


def test_chance_band_and_most_tasks_is_more_than_half_of_the_final_row():
    assert chance_band(10) == pytest.approx((0.08, 0.12))
    assert chance_band(2, 0.68) == pytest.approx((0.48, 0.70))        # answering the majority class always
    with pytest.raises(UserError, match="at least one class"):
        chance_band(0)
    assert at_chance_tasks([0.1, 0.5, 0.0, 0.119], TEN_CLASSES + [chance_band(10)]) == [0, 3]  # 0.0 is not chance
    half = np.array([[0.1, 0.1, 0.9, 0.9]])
    assert sanity_flags(half, bands=[chance_band(10)] * 4) == []                           # 2 of 4: not most
    flag, = sanity_flags(np.array([[0.1, 0.11, 0.09, 0.9]]), bands=[chance_band(10)] * 4)
    assert flag["flag"] == "at_chance" and flag["tasks"] == [0, 1, 2] and flag["of"] == 4


def test_a_model_answering_one_class_is_at_chance_on_a_real_digits_stream():
    pytest.importorskip("avalanche")
    from cl_graft.benchmarks.digits import permuted_digits
    from cl_graft.strategies.comparison.report import chance_bands

    test_stream = permuted_digits(3, seed=0).test_stream
    bands = chance_bands(test_stream)
    constant = [float(np.mean(np.asarray(list(exp.dataset.targets)) == 0)) for exp in test_stream]
    assert [b[0] for b in bands] == pytest.approx([0.08] * 3)
    assert sanity_flags(np.array([constant]), bands=bands)[0]["tasks"] == [0, 1, 2]


def test_the_table_and_results_json_mark_a_strategy_equal_to_naive_or_at_chance(tmp_path):
    results = {"naive": _result("naive", NAIVE), "noop": _result("noop", NAIVE),
               "ewc": _result("ewc", [[0.9, NAN, NAN], [0.7, 0.95, NAN], [0.6, 0.7, 0.97]]),
               "broken": _result("broken", [[0.9, NAN, NAN], [0.1, 0.1, NAN], [0.1, 0.1, 0.1]])}
    flags = result_flags(results, TEN_CLASSES)
    assert set(flags) == {"noop", "broken"} and flags["noop"][0]["flag"] == "equals_naive"
    table = summary_table(results, bands=TEN_CLASSES)
    assert [line.split()[0] for line in table.splitlines()[1:5]] == ["naive", "noop!", "ewc", "broken!"]
    assert "! noop probably misconfigured: accuracy matrix equals naive's" in table
    assert "! broken probably misconfigured: at chance on 3 of 3 tasks" in table
    assert "(results.json: info.kept by part; MB = 10^6 bytes)" in " ".join(table.split())       # the unit, said
    write_results(tmp_path, results, record={}, bands=TEN_CLASSES)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["sanity"] == json.loads(json.dumps(flags)) and saved["chance"][0] == pytest.approx([0.08, 0.12])


def test_cl_graft_run_flags_ewc_without_its_penalty_as_equal_to_naive(tmp_path):
    pytest.importorskip("avalanche")
    from cl_graft.cli import main

    out = tmp_path / "run"          # class scenario: the single-head model itself (no heads made at eval time)
    result = CliRunner().invoke(main, ["run", "--model", "mlp", "--preset", "smoke", "--stream", "permuted-digits:2",
                                       "--scenario", "class", "--strategies", "naive,ewc", "--ewc-lambda", "0",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(Path(out, "results.json").read_text())
    assert saved["sanity"] == {"ewc": [{"flag": "equals_naive", "tolerance": 0.001}]}
    assert "ewc!" in result.output and "! ewc probably misconfigured" in result.output


def test_the_digits_page_flags_si_equal_to_naive_and_ewc_at_chance(tmp_path):
    from cl_graft.benchmarks.experiments.digits_report import render
    from cl_graft.benchmarks.experiments.seeds_report import benchmark_summary

    learned = [[0.9, 0.1], [0.5, 0.95]]                          # task 1 before it is learned: at chance
    folders = []
    for seed in (0, 1):
        matrices = {"graft": [[0.9, 0.1], [0.9, 0.9]], "naive": learned, "si": learned,
                    "ewc": [[0.9, 0.1], [0.1, 0.1]], "lwf": [[0.9, 0.1], [0.1 if seed else 0.6, 0.9]]}
        strategies = {n: {"matrix": m, "bytes": 8, "seconds": 1.0, "info": {},          # lwf at chance on 1 of 2
                          "summary": summarize(m)}
                      for n, m in matrices.items()}
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(results_json(
            {"seed": seed, "command_line": "cl-graft run", "git_revision": "abc", "device_name": "cpu",
             "stream": "permuted-digits:2", "model": "mlp"}, ["t0", "t1"], strategies, scenario="task",
            chance=[chance_band(10)] * 2)))
        folders.append(folder)
    summary = benchmark_summary({"main": folders}, root=tmp_path)
    assert {n: list(r["sanity"]) for n, r in summary["rows"].items()} == {
        "graft": [], "naive": [], "si": ["accuracy matrix equals naive's (every cell within 0.1 points)"],
        "ewc": [("at chance on 2 of 2 tasks after the last experience (1/classes ± 2 points, up to the majority "
                 "class share)")], "lwf": []}
    text = render([summary])
    assert "| si! | task label given |" in text and "| lwf | task label given |" in text
    assert "! si probably misconfigured on seeds 0, 1: accuracy matrix equals naive's" in text
    assert "! ewc probably misconfigured on seeds 0, 1: at chance on 2 of 2 tasks" in text


def test_a_perfect_score_is_never_at_chance():
    """A one-class task's band reaches 100% (its one answer is right by construction: its stream says so); a
    strategy scoring 100% there is not flagged."""
    one_class = [chance_band(1)] * 3
    assert at_chance_tasks([1.0, 1.0, 0.99], one_class) == [2]
    assert sanity_flags(np.array([[1.0, 1.0, 1.0]]), bands=one_class) == []
