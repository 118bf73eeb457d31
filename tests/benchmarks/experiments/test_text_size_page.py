"""The text stream's size page (benchmarks/experiments/text_size_page.py) on synthetic results."""
from __future__ import annotations

import json

from cl_graft.benchmarks.experiments.text_size_page import main, page_text, promise_text
from cl_graft.benchmarks.experiments.timing import SEARCH_SHARE_MEANS
from click.testing import CliRunner

from helpers import results_json, strategy_json

TASKS = ["qnli", "sst2"]


def _run(seed: int, graft: list[float], single: list[float], *, naive: bool = False) -> dict:
    sizing = [{"share": 0.01 * (i + 1), "cap_share": 0.2, "below_cap": True, "loss": 0.01, "bound": 0.019,
               "temperature": 1.5, "free": 0.9, "search_seconds": 3.0} for i in range(len(TASKS))]
    record = {"seed": seed, "command_line": f"cl-graft run --seed {seed}", "git_revision": "abc",
              "device_name": "cpu", "torch": "2"}
    strategies = {"graft": strategy_json(graft, info={"sizing": sizing, "task_bytes": [{"total": 2 * 10 ** 6}] * 2},
                                         bytes=4 * 10 ** 6, seconds=120.0),
                  "single": strategy_json(single, forgetting=float("nan"))}
    if naive:
        strategies["naive"] = strategy_json([0.5, 0.5], seconds=100.0)
    return results_json(record, TASKS, strategies)


def test_page_reports_sizes_bytes_and_graft_against_single():
    runs = [_run(0, [0.8, 0.9], [0.8, 0.8], naive=True), _run(1, [0.7, 0.9], [0.8, 0.8])]
    text = page_text(runs, [r["strategies"]["single"] for r in runs])
    assert "| qnli | 1.00 | – | 20.0 | yes | +1.0 (1.9) | 1.50 | 90.0 | 3 | 2.00 | 80.0 | 80.0 |" in text
    assert "graft / naive wall time 1.20" in text and "cl-graft run --seed 1" in text
    assert "keeps 103.1% of single-task fine-tuning on average (106.2%, 100.0%)" in text
    assert "median size chosen 1.50%" in text and "largest 2.00%" in text
    assert "paired by seed: +2.5 points" in text
    assert "Where the time went" not in text                                   # older records: no split
    assert "loses at most 2 points" in text                                    # no tolerance recorded: the default
    for run in runs:
        for record in run["strategies"]["graft"]["info"]["sizing"]:
            record["tolerance"] = 0.04
    assert "loses at most 4 points" in page_text(runs, [r["strategies"]["single"] for r in runs])
    assert text.count("conditions not recorded") == 2                          # beside each run's times
    runs[1]["run"]["conditions"] = {"torch_threads": 1, "omp_num_threads": "1", "load_average_start": [1.5, 1, 1],
                                    "load_average_end": [2.25, 1, 1], "bfloat16_native": True}
    text = page_text(runs, [r["strategies"]["single"] for r in runs])
    assert ("torch 2; 1 torch threads, OMP_NUM_THREADS 1, load average 1.50 at start and 2.25 at end, bfloat16 "
            "native)") in text and text.count("conditions not recorded") == 1


def test_the_promise_is_read_on_test_rows_and_unmet_acceptances_are_flagged():
    run = _run(0, [0.8, 0.9], [0.83, 0.8])                       # qnli ends 3 points below single: beyond 2
    sizing = run["strategies"]["graft"]["info"]["sizing"]
    sizing[0].update(met=False, loss=0.023)
    text = page_text([run], [run["strategies"]["single"]])
    assert "| qnli | 1.00 | – | 20.0 | yes | +2.3 (1.9) met False |" in text
    assert ("within 2 points (the size search's tolerance) of single-task fine-tuning on 1 of 2 task runs (more "
            "than 2 below on seed 0 qnli -3.0)") in text
    assert "is not in these runs' records" in text
    assert "Kept with `met` False (dev loss above the tolerance" in text
    assert "seed 0 qnli (dev loss +2.3, below its cap: vouched by the label-free bound alone)" in text
    sizing[0]["trained_test"], sizing[1]["trained_test"] = 0.83, 0.95       # sst2: 5 points below its trained model
    cases = [("qnli", sizing[0], 0.8, 0.83), ("sst2", sizing[1], 0.9, 0.8)]
    assert "of the task's own trained model (`sizing.trained_test`, what the search vouches for) on 0 of 2" in \
        promise_text(cases)
    sizing[0]["trained_test"] = 0.81
    assert "on 1 of 2" in promise_text(cases) and "No task was kept" not in promise_text(cases)


def test_page_says_where_grafts_time_went():
    run = _run(0, [0.8, 0.9], [0.8, 0.8], naive=True)
    graft, naive = run["strategies"]["graft"], run["strategies"]["naive"]
    for i, s in enumerate(graft["info"]["sizing"]):
        s["seconds"] = 3.0 + 2 * (i + 1)                                         # finder: 2 and 4 s
    graft["info"].update(train_seconds=100.0, eval_seconds=15.0, feature_seconds=[5.0, 5.0],
                         region_elements=[2 ** 18] * 2, graftable=2 ** 24,
                         bytes={"regions": 3 * 10 ** 6, "total": 4 * 10 ** 6})
    naive["info"] = {"train_seconds": 80.0, "eval_seconds": 15.0}
    text = page_text([run], [run["strategies"]["single"]])
    assert "stored 4.0 MB (5.2 MB with int32 indices)" in text        # 2^19 elements: 4,194,304 bytes of index + value
    graft["info"]["region_sizes"] = graft["info"].pop("region_elements")      # results written before the rename
    assert page_text([run], [run["strategies"]["single"]]) == text
    assert ("Where the time went (s, graft vs naive): training 78 vs 80; size search 6 (7.7% of graft's "
            "training); finder at the chosen size 6; feature statistics 10; evaluation 15 vs 15; the rest (building, "
            "saving) 5 vs 5.") in text                                 # 6 / 78: the speed page's definition
    assert f"The size search's share is {SEARCH_SHARE_MEANS}; bytes in MB = 10^6 bytes." in text
    graft["info"]["sizing"][1]["retrain"] = {"rung_share": 0.05, "kept": False}    # a run that retrained
    text = page_text([run], [run["strategies"]["single"]])
    assert "| sst2 | 2.00 | 5.00 (not kept) |" in text and "; the choice after retraining 6;" in text


def test_cli_writes_the_page_and_refuses_a_broken_results_file(tmp_path):
    (tmp_path / "s0").mkdir()
    (tmp_path / "s0" / "results.json").write_text(json.dumps(_run(0, [0.8, 0.9], [0.8, 0.8], naive=True)))
    ok = CliRunner().invoke(main, ["--runs", str(tmp_path / "s0"), "--out", str(tmp_path / "o")])
    assert ok.exit_code == 0, ok.output
    assert "| qnli | 1.00 |" in (tmp_path / "o" / "text.md").read_text()
    (tmp_path / "cut.json").write_text('{"run": ')
    bad = CliRunner().invoke(main, ["--runs", str(tmp_path / "cut.json"), "--out", str(tmp_path / "p")])
    assert bad.exit_code == 2 and "cut.json:1: invalid JSON" in bad.output and not (tmp_path / "p").exists()
