"""``cl-graft run`` on digits streams: the registry's strategies on a from-scratch model, in the task- and the
class-incremental scenario, with the same result files as a text stream, replay-matched sized by graft's bytes,
``--tune`` and ``--resume``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

avalanche = pytest.importorskip("avalanche")

from cl_graft.cli import main

RUN = ["run", "--model", "mlp", "--preset", "smoke", "--quiet"]


def _run(*args: str) -> dict:
    out = args[args.index("--out") + 1]
    result = CliRunner().invoke(main, [*RUN, *args])
    assert result.exit_code == 0, result.output
    return json.loads(Path(out, "results.json").read_text())


def test_task_scenario_runs_every_kind_of_strategy_and_resumes(tmp_path):
    out = str(tmp_path / "task")
    args = ["--stream", "permuted-digits:2", "--strategies", "graft,packnet,naive,replay-matched", "--out", out]
    saved = _run(*args)
    assert saved["scenario"] == "task" and saved["tasks"] == ["perm0", "perm1"]
    assert saved["run"]["stream"] == "permuted-digits:2" and saved["run"]["model"] == "mlp"
    runs = saved["strategies"]
    assert runs["graft"]["summary"]["forgetting"] == 0 == runs["packnet"]["summary"]["forgetting"]
    assert runs["naive"]["bytes"] == (64 * 256 + 256 + 2 * (256 * 10 + 10)) * 4      # its multi-head copy
    for name, res in runs.items():            # the same multi-head copy for every strategy: the same model
        assert res["info"]["task_aware"].startswith("multi-head copy"), name
    memory = runs["replay-matched"]["info"]["memory_rows"]
    assert memory == int(runs["graft"]["bytes"] / (64 * 4)) > 0                      # graft's bytes, in rows
    assert runs["replay-matched"]["info"]["memory_bytes"] == memory * 64 * 4
    for name in ("results.csv", "matrices.csv", "figures/final.png", "figures/matrix_graft.png"):
        assert Path(out, name).is_file()
    again = _run(*args, "--resume")                                                # finished: read back
    assert again["strategies"]["graft"]["matrix"] == runs["graft"]["matrix"]


def test_class_scenario_gives_no_task_label_at_test(tmp_path):
    out = str(tmp_path / "class")
    saved = _run("--stream", "split-digits", "--scenario", "class", "--strategies", "graft,naive", "--steps", "40",
                 "--out", out)
    assert saved["scenario"] == "class" and saved["run"]["scenario"] == "class"
    assert saved["tasks"] == ["digits14", "digits57", "digits39", "digits08", "digits26"]
    assert {r["info"]["task_aware"] for r in saved["strategies"].values()} == {"none (single head)"}
    graft, naive = (saved["strategies"][n]["summary"] for n in ("graft", "naive"))
    assert naive["final"][:4] == [0.0] * 4                  # a single head forgets every earlier pair of digits
    assert graft["average"] > naive["average"] + 0.1 and graft["final"][0] > 0.5   # routed to the right task


def test_tune_chooses_on_train_rows(tmp_path):
    saved = _run("--stream", "permuted-digits:2", "--strategies", "ewc", "--tune", "--out", str(tmp_path / "t"))
    tuning = saved["strategies"]["ewc"]["info"]["tuning"]
    assert len(tuning["dev_average"]) == 3 and tuning["chosen"] in tuning["grid"]


@pytest.mark.parametrize("args,message", [
    (["--stream", "split-digits", "--scenario", "class", "--model", "mtmlp"], "use --model mlp"),
    (["--stream", "split-digits", "--scenario", "class", "--task-inference", "entropy"], "drop --task-inference"),
    (["--stream", "split-digits", "--model", "minilm"], "mlp, mtmlp, cnn"),
    (["--stream", "split-digits", "--k", "8"], "--k does not apply to digits streams"),
    (["--stream", "permuted-digits:2", "--strategies", "replay-matched"], "put graft before it"),
    (["--stream", "permuted-digits:x"], "permuted-digits:N"),
])
def test_refused(args, message, tmp_path):
    result = CliRunner().invoke(main, [*RUN, *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("model", ["mtmlp", "cnn"])
def test_multi_head_models_get_a_head_per_task(model, tmp_path):
    saved = _run("--stream", "split-digits", "--model", model, "--strategies", "graft,naive", "--steps", "20",
                 "--out", str(tmp_path / model))
    graft, naive = saved["strategies"]["graft"], saved["strategies"]["naive"]
    assert saved["run"]["model"] == model and graft["summary"]["forgetting"] == 0.0
    assert len(graft["info"]["task_bytes"]) == 5 and naive["summary"]["average"] > 0.6   # 2-unit heads learn
