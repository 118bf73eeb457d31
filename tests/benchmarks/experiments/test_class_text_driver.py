"""The multi-seed driver on split text streams (benchmarks/experiments/class_text.py, the split-text preset of
seeds.py): the commands it issues (tuned on the first seed, its choices reused after, the text stream's data
folder and default model), finished invocations skipped and unfinished ones resumed, and its page
(class_text_report.py): average incremental accuracy, task identification, rows kept, Holm verdicts and the plain
statement when a strategy that keeps no training rows beats graft."""
from __future__ import annotations

import json
import shutil

import pytest
from cl_graft.benchmarks.experiments import seeds
from cl_graft.benchmarks.experiments.class_text import main
from cl_graft.benchmarks.experiments.class_text_report import render, summary
from cl_graft.benchmarks.experiments.seeds import PEERS, Benchmark, data_options, seeds_of
from cl_graft.benchmarks.experiments.verdicts import holm_intervals
from cl_graft.strategies.comparison.metrics import summarize
from click.testing import CliRunner

from helpers import InProcessCli, intents_env, results_json

pytest.importorskip("avalanche")


def test_a_benchmark_without_a_model_runs_on_cl_graft_runs_default_and_every_default_peer_serves_its_scenario(
        tmp_path):
    from cl_graft.strategies.comparison.registry import STRATEGIES

    bench = Benchmark.parse("split-clinc150:15//class")
    assert (bench.model, bench.folder, bench.family()) == ("", "split-clinc150-15-class", "split text")
    args = seeds.invocation(bench, 3, tmp_path / "f", strategies="graft", extra=[])
    assert "--model" not in args and args[:5] == ["run", "--stream", "split-clinc150:15", "--scenario", "class"]
    assert Benchmark.parse("permuted-digits:20/mlp/task").folder == "permuted-digits-20-mlp-task"
    for bad in ("split-clinc150:15/class", "split-clinc150:15//both", "//class"):
        with pytest.raises(seeds.ScriptError, match="STREAM/MODEL/SCENARIO"):
            Benchmark.parse(bad)
    with pytest.raises(seeds.ScriptError, match="sst2//class: --stream sst2 is a task-list stream: it runs with "
                                                 "--scenario task"):
        Benchmark.parse("sst2//class").family()                   # the family's own one-line refusal
    for by in PEERS.values():
        for scenario, peers in by.items():
            for name in peers.split(","):
                STRATEGIES[name].check_scenario(scenario)       # raises for a peer that cannot run there
    other = Benchmark.parse("split-banking77:7//class")
    assert seeds_of([bench, other], [0, 1, 2, 3, 4], ("split-banking77:7//class=0,1,2",)) == {
        bench: [0, 1, 2, 3, 4], other: [0, 1, 2]}
    with pytest.raises(seeds.ScriptError, match="--seeds-of"):
        seeds_of([bench], [0, 1], ("split-banking77:7//class=0,1",))
    (tmp_path / "data").mkdir()
    assert data_options(tmp_path / "data", tmp_path / "x") == ["--data-dir", (tmp_path / "data").as_posix()]


def test_default_peers_are_the_families_and_a_stream_without_them_is_refused(tmp_path, monkeypatch):
    class Refused:                                  # records the command and fails it: nothing trains
        def __init__(self):
            self.commands = []

        def run(self, cmd, **_):
            self.commands.append(cmd[3:])
            return type("Done", (), {"returncode": 2})()

    started = Refused()
    monkeypatch.setattr(seeds, "subprocess", started)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["--out", "a", "--benchmarks", "split-intents:2//task", "--seeds", "0,1"])
    assert res.exit_code == 2 and "exited with 2" in res.output
    args = started.commands[0]
    assert args[args.index("--strategies") + 1] == PEERS["split text"]["task"] and "--data-dir" not in args
    res = CliRunner().invoke(main, ["--out", "b", "--benchmarks", "sst2//task", "--seeds", "0,1"])
    assert res.exit_code == 2 and "task-list streams have no default peers; give --task-peers" in res.output
    res = CliRunner().invoke(main, ["--out", "c", "--benchmarks", "split-intents:2//class", "--seeds", "0"])
    assert res.exit_code == 2 and "--seeds needs at least two seeds" in res.output
    assert len(started.commands) == 1


def test_the_driver_tunes_the_first_seed_reuses_its_choices_skips_finished_runs_and_resumes(tmp_path, monkeypatch):
    """Every default peer of the class scenario runs on a tiny split text stream, tuned on seed 0 (a grid point
    each), with seed 0's choices on seed 1; the page tells the strategies that keep training rows from the
    others by what each kept."""
    intents_env(tmp_path / "env")
    monkeypatch.chdir(tmp_path)
    started = InProcessCli()                                     # `python -m cl_graft.cli`, in this process
    monkeypatch.setattr(seeds, "subprocess", started)
    args = ["--out", "page", "--benchmarks", "split-intents:2//class", "--seeds", "0,1", "--tune-budget", "1",
            "--data-dir", "env/data", "--run-option=--model=../env/model", "--run-option=--preset=smoke",
            "--run-option=--steps=2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    first, second = started.commands
    assert first[first.index("--seed") + 1] == "0" and second[second.index("--seed") + 1] == "1"
    assert first[first.index("--strategies") + 1] == PEERS["split text"]["class"]
    assert "--tune" in first and "--settings-from" not in first
    for command in started.commands:                   # replay's and der's memory: 10 rows of every class
        assert "--replay-per-class=10" in command
    assert second[second.index("--settings-from") + 1] == "work/split-intents-2-class/seed0" and "--tune" not in second
    for command in started.commands:                   # the data folder as the invocations (inside page/) read it
        assert command[command.index("--data-dir") + 1] == "../env/data"
        assert [a for a in command if a.startswith("--model")] == ["--model=../env/model"]     # the run option's
    page = (tmp_path / "page" / "class_text.md").read_text()
    assert "## split-intents:2, model ../env/model, class-incremental" in page
    assert "reuse them (`--settings-from`)" in page
    assert "runs/split-intents-2-class/seed1/results.json" in page and str(tmp_path) not in page
    rows = json.loads((tmp_path / "page" / "class_text.json").read_text())["benchmarks"][0]["rows"]
    assert {n for n, row in rows.items() if row["keeps_rows"]} == {"replay", "replay-matched", "der"}
    assert {n for n, row in rows.items() if row["task_id"]["mean"] is not None} == {"graft"}
    assert rows["replay"]["memory_rows"] == rows["der"]["memory_rows"] == 6 * 10       # 6 intents
    assert rows["replay"]["chosen"] is None and rows["der"]["chosen"] is not None     # replay's memory: not tuned
    assert all(row["cpu"]["mean"] is not None for row in rows.values())
    assert 0 <= rows["graft"]["task_id"]["mean"] <= 1 and rows["graft"]["incremental"]["mean"] is not None
    assert "| ncm | no |" in page and "| replay | yes |" in page and "Not run yet" not in page
    assert "| joint (ceiling, not a continual method) | every row, at once |" in page
    assert "replay and der keep 10 rows of every class seen (`--replay-per-class 10`)" in page
    assert "Every planned run finished." in page and "the digits pages (`benchmarks/results/digits/`) have them" in page

    run1 = tmp_path / "page" / "work" / "split-intents-2-class" / "seed1"
    (run1 / "results.json").unlink()                   # seed 1 unfinished: resumed; seed 0 finished: skipped
    started.commands.clear()
    result = CliRunner().invoke(main, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert len(started.commands) == 1 and started.commands[0][-1] == "--resume"
    assert started.commands[0][started.commands[0].index("--seed") + 1] == "1" and (run1 / "results.json").exists()
    assert (tmp_path / "page" / "class_text.md").read_text() == page
    again = tmp_path / "again"
    shutil.rmtree(tmp_path / "page" / "work")                  # the page from the kept artifacts alone
    assert CliRunner().invoke(main, ["--out", str(again), "--benchmarks", "split-intents:2//class",
                                     "--seeds", "0,1", "--report-from", "page"]).exit_code == 0
    assert (again / "class_text.md").read_text() == page
    assert CliRunner().invoke(main, ["--out", str(tmp_path / "planned3"), "--benchmarks", "split-intents:2//class",
                                     "--report-from", "page"]).exit_code == 0                # seeds 0, 1, 2 planned
    assert "Not run yet (– in the table): seed 2 (every strategy)." in (tmp_path / "planned3" / "class_text.md"
                                                                         ).read_text()


def _entry(matrix: list[list[float]], *, kept: dict | None = None, task_id: list[float] | None = None,
           cpu: float | None = None, phases: tuple[float, float] | None = None) -> dict:
    info = {**({"kept": kept} if kept is not None else {}), **({"task_id": task_id} if task_id else {}),
            **({"cpu_seconds": cpu} if cpu is not None else {}),
            **({"train_cpu_seconds": phases[0], "eval_cpu_seconds": phases[1]} if phases else {})}
    return {"matrix": matrix, "bytes": 2000, "seconds": 5.0, "info": info,
            "summary": {**summarize(matrix), "bytes": 2000, "seconds": 5.0}}


def _seed_folder(tmp_path, seed: int, strategies: dict, **record) -> object:
    """``tmp_path/runs/b/seed<seed>`` holding a class-scenario ``results.json`` of ``strategies`` on split-x:2 (the
    run record's fields ``record`` added)."""
    folder = tmp_path / "runs" / "b" / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results_json(
        {"seed": seed, "command_line": "cl-graft run --stream split-x:2", "git_revision": "abc",
         "device_name": "cpu", "stream": "split-x:2", "model": "minilm", "preset": "quick", "tune": seed == 0,
         **record}, ["x-0", "x-1"], strategies, scenario="class", chance=[[0.4, 0.6], [0.4, 0.6]])))
    return folder


def _benchmark(tmp_path, ncm_gain: list[float]) -> dict:
    """Three seeds of a two-experience class-scenario text run: graft (routing, 90% identified), ncm (graft's last
    row plus ``ncm_gain[seed]``, keeps no rows), naive (forgets), replay and cumulative (keep rows)."""
    folders = []
    for seed in range(3):
        g = 0.80 + 0.01 * seed
        strategies = {"graft": _entry([[0.9, 0.0], [g, g]], task_id=[0.9, 0.9]),
                      "ncm": _entry([[0.95, 0.0], [g + ncm_gain[seed], g + ncm_gain[seed]]], kept={"heads": 64}),
                      "naive": _entry([[0.9, 0.0], [0.0, 0.9 + 0.01 * seed]], kept={}),
                      "replay": _entry([[0.9, 0.0], [0.6, 0.8 + 0.02 * seed]], kept={"memory": 640}),
                      "cumulative": _entry([[0.9, 0.0], [0.9, 0.9 + 0.01 * seed]], kept={"rows": 9000})}
        folders.append(_seed_folder(tmp_path, seed, strategies))
    return summary({"main": folders}, root=tmp_path)


def test_the_page_says_plainly_when_a_strategy_keeping_no_rows_beats_graft(tmp_path):
    s = _benchmark(tmp_path / "beaten", [0.05, 0.06, 0.05])
    rows = s["rows"]
    assert {n: r["keeps_rows"] for n, r in rows.items()} == {
        "graft": False, "ncm": False, "naive": False, "replay": True, "cumulative": True}
    assert rows["graft"]["task_id"]["mean"] == pytest.approx(0.9) and rows["ncm"]["task_id"]["mean"] is None
    # after experience 0: task 0 alone; after 1: both: (0.9 + (g + g) / 2) / 2, over the seeds g = 0.80, 0.81, 0.82
    assert rows["graft"]["incremental"]["mean"] == pytest.approx((0.9 + 0.81) / 2)
    assert s["graft_minus"] == holm_intervals({n: [rows["graft"]["average"][i] - rows[n]["average"][i]
                                                   for i in range(3)] for n in rows if n != "graft"})
    assert s["graft_minus"]["ncm"]["ahead"] == -1 and s["graft_minus"]["naive"]["ahead"] == 1
    page = render([s])
    # ncm's last row: g + gain = 0.85, 0.87, 0.87; its average incremental accuracy (0.95 + that) / 2
    assert "| ncm | no | – | 86.3 ± 1.2 | 90.7 ± 0.6 | 8.7 ± 1.2 | – |" in page and "| replay | yes |" in page
    assert "| graft | no | – | 81.0 ± 1.0 | 85.5 ± 0.5 | 9.0 ± 1.0 | 90.0 ± 0.0 | 2.0 KB |" in page
    assert "**Beaten by a strategy that keeps no training rows:** ncm is ahead of graft by 5.3 points" in page
    assert "Seed 0 chose every strategy's settings on dev rows" in page

    close = render([_benchmark(tmp_path / "close", [0.02, -0.01, 0.02])])
    assert "Beaten" not in close
    assert ("No strategy that keeps no training rows (ncm, naive) beats graft by its Holm interval; ncm scores "
            "higher than graft on average, not separable.") in close


def test_the_page_gives_grafts_cpu_seconds_over_naives_per_phase(tmp_path):
    folders = []
    for seed in range(2):
        strategies = {"graft": _entry([[0.9, 0.0], [0.8, 0.8]], task_id=[0.9, 0.9], cpu=260.0 + 20 * seed,
                                      phases=(200.0 + 20 * seed, 50.0)),
                      "naive": _entry([[0.9, 0.0], [0.0, 0.9]], kept={}, cpu=200.0, phases=(160.0, 30.0))}
        strategies["graft"]["info"].update(train_seconds=300.0, localize_seconds=[40.0, 20.0 + seed],
                                           feature_seconds=[5.0, 5.0])
        folders.append(_seed_folder(tmp_path, seed, strategies))
    page = render([summary({"main": folders}, root=tmp_path)])
    assert ("Cost: graft's CPU seconds are 1.35× naive's (above the 1.3× target); training 1.31× (210 s against "
            "160 s); evaluation 1.67× (50 s against 30 s); of graft's 300 wall seconds of training, region search "
            "60 s and feature passes 10 s") in page
    older = json.loads((folders[0] / "results.json").read_text())
    older["strategies"]["naive"]["info"].pop("eval_cpu_seconds")                # a run without the phase's time
    (folders[0] / "results.json").write_text(json.dumps(older))
    older = render([summary({"main": folders}, root=tmp_path)])
    assert "1.35× naive's (above the 1.3× target); training 1.31× (210 s against 160 s); of graft's 300" in older


def _partial(tmp_path) -> list[dict]:
    """A page planned for seeds 0, 1, 2 of graft, ncm, der and joint: seeds 0 and 1 ran (der only on seed 0, joint
    on neither), seed 2 did not; a second benchmark has no run at all."""
    from cl_graft.benchmarks.experiments.seeds import Benchmark, plan_of

    folders = []
    for seed in (0, 1):
        strategies = {"graft": _entry([[0.9, 0.0], [0.8, 0.8 + 0.01 * seed]], task_id=[0.9, 0.8], cpu=100.0 + seed),
                      "ncm": _entry([[0.9, 0.0], [0.7, 0.7 + 0.02 * seed]], kept={"heads": 64}, cpu=10.0)}
        if seed == 0:
            strategies["der"] = _entry([[0.9, 0.0], [0.6, 0.8]], kept={"memory": 640, "logits": 80}, cpu=50.0)
        folders.append(_seed_folder(tmp_path, seed, strategies, cpu_seconds=3600.0 if seed == 0 else 180.0,
                                    wall_seconds=4000.0))
    peers = "graft,ncm,der,joint"
    done = summary({"main": folders}, root=tmp_path,
                   plan=plan_of(Benchmark.parse("split-x:2//class"), [0, 1, 2], peers))
    empty = summary({}, root=tmp_path, plan=plan_of(Benchmark.parse("split-y:3//class"), [0, 1, 2], peers))
    return [done, empty]


def test_a_partial_page_marks_what_has_not_run_and_estimates_its_cpu_hours(tmp_path):
    done, empty = _partial(tmp_path)
    assert done["missing"]["seeds"] == [2] and done["missing"]["strategies"] == {
        "graft": [2], "ncm": [2], "der": [1, 2], "joint": [0, 1, 2]}
    # seed 2 of graft (mean 100.5 s) and ncm (10 s), seeds 1 and 2 of der (50 s); joint never timed
    assert done["missing"]["cpu_seconds_left"] == pytest.approx(100.5 + 10 + 2 * 50)
    assert done["missing"]["unmeasured"] == ["joint"]
    assert list(done["rows"]) == ["graft", "ncm", "der", "joint"] and done["rows"]["joint"]["missing"]
    assert empty["not_run"] and empty["missing"]["seeds"] == [0, 1, 2]
    page = render([done, empty])
    assert "| joint (ceiling, not a continual method) | – | – | – | – | – | – | – | – | – |" in page
    assert "| der | yes | – | 70.0 | 80.0 | 30.0 | – | 2.0 KB | 5 | 50 |  |  |  |  |" in page   # one seed: no sd
    assert "| graft | no | – | 80.2 ± 0.4 | 85.1 ± 0.2 | 10.0 ± 0.0 | 85.0 ± 0.0 | 2.0 KB | 5 ± 0 | 100 ± 1 |" in page
    assert ("Not run yet (– in the table): seed 2 (every strategy); der on seed 1; joint on seeds 0, 1. The 2 "
            "finished invocations' strategies took 0.1 CPU-hours (each strategy's CPU seconds summed; tuning runs "
            "and runs lost when an invocation stopped are not in it, nor in a resumed invocation's run record, which "
            "times its last process). Estimate from the "
            "finished runs (not a measurement): 0.1 CPU-hours left") in page
    assert "joint not timed yet (no finished seed), not in it." in page
    assert "## split-y:3, model cl-graft run's default, class-incremental: not run yet" in page
    assert ("CPU-hour estimate of what has not run, from the finished runs (not a measurement): 0.1 CPU-hours; not "
            "timed yet: split-x:2: joint; no run yet of split-y:3, not in it.") in page
    assert "Graft ahead of 1 of the 1 peers" in page                  # ncm's interval (2 seeds); der's 1 seed: none


def test_report_from_a_runs_folder_holding_one_of_the_benchmarks_makes_the_partial_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for seed in (0, 1):
        folder = tmp_path / "kept" / "runs" / "split-intents-2-class" / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(results_json(
            {"seed": seed, "command_line": "cl-graft run", "git_revision": "abc", "device_name": "cpu",
             "stream": "split-intents:2", "model": "m", "preset": "quick", "tune": seed == 0},
            ["i-0", "i-1"], {"graft": _entry([[0.9, 0.0], [0.8, 0.8]], cpu=5.0)}, scenario="class")))
    res = CliRunner().invoke(main, ["--out", "page", "--report-from", "kept", "--benchmarks",
                                    "split-intents:2//class,split-intents:3//class"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "page" / "class_text.md").read_text()
    assert "## split-intents:3, model cl-graft run's default, class-incremental: not run yet" in page
    assert "seed 2 (every strategy); slda on seeds 0, 1;" in page               # the family's peers, planned
    res = CliRunner().invoke(main, ["--out", "none", "--report-from", "kept", "--benchmarks",
                                    "split-intents:3//class"])
    assert res.exit_code == 2 and "holds no run of benchmark split-intents:3//class" in res.output


def test_the_page_gives_grafts_router_and_answer_chosen_on_dev_rows_per_seed(tmp_path):
    tally = {"lda": {"task": 90, "head": 85, "routed": 86, "rows": 100},
             "ranpac:0.1": {"task": 95, "head": 93, "routed": 91, "rows": 100}}
    folders = []
    for seed in range(2):
        graft = _entry([[0.9, 0.0], [0.8, 0.8]], task_id=[0.9, 0.9])
        if seed:                                                             # seed 0: a run without a router
            graft["info"]["router"] = {"router": "ranpac:0.1", "answer": "head", "tally": tally,
                                       "setting": {"router": "auto", "answer": "auto"}}
        folders.append(_seed_folder(tmp_path, seed, {"graft": graft, "naive": _entry([[0.9, 0.0], [0.0, 0.9]])}))
    page = render([summary({"main": folders}, root=tmp_path)])
    assert ("Graft's router and answer, chosen on dev rows (`--router auto --answer auto`): seed 1: router "
            "ranpac:0.1, answer head (dev rows sent to their experience: lda 90.0%, ranpac:0.1 95.0%; answered right "
            "by its head 93.0%, by the routed grafted models 91.0%).") in page
    assert "router and answer" not in render([_benchmark(tmp_path / "none", [0.0, 0.0, 0.0])])
