"""The speed page (benchmarks/experiments/speed_page.py): synthetic runs, bad input, and the committed page."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from cl_graft.benchmarks.experiments.speed_page import breakdown, main, page_text
from click.testing import CliRunner

from helpers import results_json, strategy_json

TASKS = ["qnli", "sst2"]
RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def _run(seed: int, graft_seconds: float, *, search: float, average: float, naive: bool = True) -> dict:
    sizing = [{"share": 0.01, "search_seconds": search / 2, "seconds": search / 2 + 1.0, "trained_test_seconds": 2.0}
              for _ in TASKS]
    record = {"seed": seed, "command_line": f"cl-graft run --seed {seed}", "git_revision": "abc", "device_name": "cpu"}
    info = {"sizing": sizing, "feature_seconds": [3.0, 3.0], "train_seconds": graft_seconds - 20.0,
            "eval_seconds": 15.0, "peak_rss_mb": 900, "cpu_seconds": graft_seconds - 1.0}
    strategies = {"graft": strategy_json([average, average], info=info, bytes=2 ** 20, seconds=graft_seconds)}
    if naive:
        strategies["naive"] = strategy_json([0.5, 0.5], seconds=100.0, info={
            "train_seconds": 80.0, "eval_seconds": 15.0, "peak_rss_mb": 700, "cpu_seconds": 99.0})
    return results_json(record, TASKS, strategies)


def test_breakdown_adds_up_to_the_wall_time():
    parts = breakdown(_run(0, 150.0, search=20.0, average=0.8))
    assert parts["graft"] == {"training": 130.0 - 20.0 - 2.0 - 6.0 - 4.0, "size search": 20.0,
                              "finder at the chosen size": 2.0, "feature statistics": 6.0,
                              "trained model's test score": 4.0, "evaluation": 15.0,
                              "the rest (building, saving)": 5.0}
    assert sum(parts["graft"].values()) == pytest.approx(150.0) and sum(parts["naive"].values()) == 100.0


def test_page_states_each_target_and_whether_it_was_met():
    before = [_f(_run(s, 150.0, search=30.0, average=0.80)) for s in (0, 1)]
    after = [_f(_run(0, 112.0, search=9.0, average=0.80)), _f(_run(1, 118.0, search=9.0, average=0.796))]
    text, data = page_text([("before", before), ("after", after)], [("before", before), ("same", before)])
    assert "- The README's main job, after: graft / naive 1.12, 1.18 (target ≤ 1.15: **not met**)" in text
    assert "graft's average accuracy -0.20 points against before, mean over the seeds (target ≥ -0.3: met)" in text
    assert "| 0 | after | 112 | 100 | **1.12** | 1.12 | 9 (12.7) | 80.0 (+0.0) |" in text   # 9 / (92 - 21)
    assert "| 1 | after | 118 | 100 | **1.18** | 1.18 | 9 (11.7) | 79.6 (-0.4) |" in text
    assert "| size search | 30 | 9 | 0 |" in text
    assert data["verdicts"]["digits"]["same"]["ratio_met"] is False
    assert data["verdicts"]["text"]["after"]["accuracy_met"] is True


def test_each_run_names_its_size_search_settings_which_its_command_may_not():
    """A run made when other defaults held names its settings (precision: float32 before the setting existed)."""
    old, new = _run(0, 150.0, search=30.0, average=0.8), _run(0, 120.0, search=9.0, average=0.8)
    old["run"]["strategy_settings"] = {"graft": {"region_size": {"rows": 256, "refine": False}}}
    new["run"]["strategy_settings"] = {"graft": {"region_size": {"rows": 512, "refine": True,
                                                                 "precision": "auto"}}}
    new["strategies"]["graft"]["info"]["sizing"][1]["precision"] = "bfloat16"
    for record, (same, gain) in zip(new["strategies"]["graft"]["info"]["sizing"], [(False, 0.03), (False, 0.0)]):
        record.update(refined_same=same, refined_gain=gain)                    # a tie keeps the rung's region
    text, _ = page_text([("before", [_f(old)]), ("after", [_f(new)])], [("before", [_f(old)]), ("b", [_f(old)])])
    assert "(git abc, cpu; size search: rows 256, refine false, precision float32 (bfloat16 in 0 of 2 tasks);" in text
    assert ("(git abc, cpu; size search: rows 512, refine true, precision auto (bfloat16 in 1 of 2 tasks); the "
            "finder's region scored higher than the rung's in 1 of 2 tasks;") in text


def test_each_run_names_its_order_and_conditions_or_that_they_were_not_recorded():
    old, new = _run(0, 150.0, search=30.0, average=0.8), _run(0, 120.0, search=9.0, average=0.8)
    old["run"]["strategies"] = ["graft", "naive"]
    new["run"].update(strategies=["naive", "graft"], byte_unit="MB = 10^6 bytes", conditions={
        "torch_threads": 1, "omp_num_threads": "1", "load_average_start": [0.5, 0.4, 0.3],
        "load_average_end": [2.1, 1.0, 0.5], "bfloat16_native": True})
    text, _ = page_text([("before", [_f(old)]), ("after", [_f(new)])], [("before", [_f(old)]), ("b", [_f(old)])])
    assert "(git abc, cpu; graft, then naive; conditions not recorded; CPU s / wall s graft 0.99, naive 0.99)" in text
    assert ("(git abc, cpu; naive, then graft; 1 torch threads, OMP_NUM_THREADS 1, load average 0.50 at start and 2.10 at "
            "end, bfloat16 native; CPU s / wall s graft 0.99, naive 0.99)") in text
    assert "| 0 | before | 150 | 100 | **1.50** | 1.51 | 30 (34.1) | 80.0 (+0.0) | 1, 1 | 1.0 | 944 / 734 |" in text
    assert "| 0 | after | 120 | 100 | **1.20** | 1.20 | 9 (11.4) | 80.0 (+0.0) | 1, 1 | 1.0 | 900 / 700 |" in text


def test_the_next_runs_alternate_which_strategy_runs_first():
    runs = [_run(s, 150.0, search=30.0, average=0.8) for s in (0, 1, 2)]
    for run in runs:
        run["run"]["command_line"] = (f"cl-graft run --stream a,b --strategies graft,naive --seed {run['run']['seed']} "
                                      f"--out benchmarks/results/text_size/x/seed{run['run']['seed']}")
    for run in runs:
        run["run"]["started"] = "2026-11-28T10:00:00+00:00"
    earlier = [_f(_run(s, 150.0, search=30.0, average=0.8)) for s in (0, 1, 2)]       # no start: older
    figs = [_f(r) for r in runs]
    text, _ = page_text([("before", figs), ("older", earlier)], [("before", figs)])
    assert text.endswith("\n".join(f"- `cl-graft run --stream a,b --strategies {order} --seed {s} --out "
                                   f"runs/speed/x/seed{s}`" for s, order in
                                   ((0, "graft,naive"), (1, "naive,graft"), (2, "graft,naive"))))


def _f(run: dict) -> dict:
    from cl_graft.benchmarks.experiments.speed_page import figures

    return figures(run)


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    paths = {}
    for name, run in {"b": _run(0, 150.0, search=1.0, average=0.8), "a": _run(0, 120.0, search=1.0, average=0.8),
                      "lone": _run(0, 120.0, search=1.0, average=0.8, naive=False),
                      "other": _run(1, 120.0, search=1.0, average=0.8)}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(run))
    for runs, message in ((f"after={paths['lone']}", "no naive"), (f"after={paths['other']}", "before has seeds [0], "
                                                                                               "after [1]"),
                          (str(paths["a"]), "--runs takes NAME=RUN,RUN,...")):
        done = CliRunner().invoke(main, ["--runs", f"before={paths['b']}", "--runs", runs, "--digits",
                                         f"before={paths['b']}", "--digits", f"after={paths['a']}",
                                         "--out", str(tmp_path / "out")])
        assert done.exit_code == 2 and message in done.output and not (tmp_path / "out").exists(), done.output


def test_the_committed_page_is_made_from_the_committed_runs():
    data = json.loads((RESULTS / "speed" / "speed.json").read_text())
    record = json.loads((RESULTS / "speed" / "config.json").read_text())
    repo = RESULTS.parent.parent

    def configs(specs: list[str]) -> list[tuple[str, list[dict]]]:
        out = []
        for spec in specs:
            name, _, paths = spec.partition("=")
            runs = [_f(json.loads((repo / p / "results.json").read_text())) for p in paths.split(",")]
            out.append((name, sorted(runs, key=lambda f: f["seed"])))
        return out

    text, again = page_text(configs(record["runs"]), configs(record["digits"]))
    assert (RESULTS / "speed" / "speed.md").read_text() == text
    assert json.loads(json.dumps(again)) == data
