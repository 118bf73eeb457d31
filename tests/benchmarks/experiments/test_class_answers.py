"""The class-answers probe rebuilds a saved class-scenario run and scores its rules; graft's answer with the
discriminant as router and the grafted model answering (``--router lda --answer routed``: the chosen task's state,
every class seen) on the test rows is exactly the run's accuracy after the last experience."""
from __future__ import annotations

import json

import pytest

from helpers import cli, intents_env

avalanche = pytest.importorskip("avalanche")

@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("answers"), seed=1)


def test_graft_rule_is_the_runs_accuracy(env, tmp_path):
    from click.testing import CliRunner

    from cl_graft.benchmarks.experiments.probes.class_answers import RULES, main

    run = tmp_path / "run"
    res = cli(env, "--stream", "split-intents:3", "--scenario", "class", "--strategies", "graft", "--router", "lda",
              "--answer", "routed", "--out", str(run))
    assert res.exit_code == 0, res.output
    out = CliRunner().invoke(main, ["--run", str(run), "--data-dir", str(env / "data"), "--out",
                                    str(tmp_path / "answers")])
    assert out.exit_code == 0, out.output
    rules = json.loads((tmp_path / "answers" / "class_answers.json").read_text())["rules"]
    graft = json.loads((run / "results.json").read_text())["strategies"]["graft"]
    test = rules["test"]
    rows = test["experience_rows"]
    assert test["rows"] == sum(rows) and all(0 <= test[r] <= 1 for r in RULES)
    final = sum(a * n for a, n in zip(graft["matrix"][-1], rows)) / sum(rows)
    assert test["all classes seen"] == pytest.approx(final)
    identified = sum(a * n for a, n in zip(graft["info"]["task_id"], rows)) / sum(rows)
    assert test["task identified"] == pytest.approx(identified)


def test_a_run_without_graft_state_is_one_line(env, tmp_path):
    from click.testing import CliRunner

    from cl_graft.benchmarks.experiments.probes.class_answers import main

    run = tmp_path / "run"
    assert cli(env, "--stream", "split-intents:2", "--scenario", "class", "--strategies", "naive",
               "--out", str(run)).exit_code == 0
    out = CliRunner().invoke(main, ["--run", str(run), "--data-dir", str(env / "data"), "--out",
                                    str(tmp_path / "a")])
    assert out.exit_code == 2 and "not a class-scenario run with graft" in out.output


def _probed(env, tmp_path, probe, out: str):
    """A default graft run on split-intents:3 (class scenario) in ``tmp_path/run``, then ``probe`` on it into
    ``tmp_path/out``; returns the run's folder."""
    from click.testing import CliRunner

    run = tmp_path / "run"
    assert cli(env, "--stream", "split-intents:3", "--scenario", "class", "--strategies", "graft",
               "--out", str(run)).exit_code == 0
    result = CliRunner().invoke(probe, ["--run", str(run), "--data-dir", str(env / "data"),
                                        "--out", str(tmp_path / out)])
    assert result.exit_code == 0, result.output
    return run


def test_first_session_scores_both_encoders_and_chooses_the_ridge_on_dev_rows(env, tmp_path):
    from cl_graft.benchmarks.experiments.probes.first_session import ENCODERS, main
    from cl_graft.strategies.routing.class_heads import RIDGES

    run = _probed(env, tmp_path, main, "f")
    saved = json.loads((tmp_path / "f" / "first_session.json").read_text())
    rows = json.loads((run / "config.json").read_text())
    assert set(saved["encoders"]) == set(ENCODERS) and saved["train_rows"] > 0 and rows["scenario"] == "class"
    for name, scored in saved["encoders"].items():
        dev = scored["dev"]
        best = max(d["routed"] for d in dev.values())
        assert scored["ridge"] in RIDGES and dev[str(scored["ridge"])]["routed"] == best
        test = scored["test"]
        assert all(0 <= test[k] <= 1 for k in ("routed", "head", "routed_later", "head_later")), name
        assert test["rows"] > 0 and test["head"] <= test["routed"], name      # a right class is in its experience


def test_within_experience_answers_every_row_from_its_own_experience(env, tmp_path):
    from click.testing import CliRunner

    from cl_graft.benchmarks.experiments.probes.class_answers import main as answers
    from cl_graft.benchmarks.experiments.probes.within_experience import RULES, main

    run = _probed(env, tmp_path, main, "w")
    assert CliRunner().invoke(answers, ["--run", str(run), "--data-dir", str(env / "data"), "--out",
                                        str(tmp_path / "a")]).exit_code == 0
    saved = json.loads((tmp_path / "w" / "within_experience.json").read_text())
    own = json.loads((tmp_path / "a" / "class_answers.json").read_text())["rules"]
    assert set(saved["rules"]) == set(RULES)
    for which in ("dev", "test"):                          # the grafted models' answer is class_answers' own-task rule
        assert saved["rows"][which] == own[which]["rows"]
        assert saved["rules"]["grafted model"][which] == pytest.approx(own[which]["row's own task"])
        assert all(0 <= saved["rules"][r][which] <= 1 for r in RULES)


def test_combined_rule_asks_the_second_experience_when_the_head_is_unsure():
    import torch

    from cl_graft.benchmarks.experiments.probes.combined_answer import combined

    owner = torch.tensor([0, 0, 1, 1])                                  # classes 0, 1 in experience 0; 2, 3 in 1
    own = torch.tensor([[True, True, False, False], [False, False, True, True]])
    scores = torch.tensor([[0.50, 0.00, 0.45, 0.00]])                   # the head leans to class 0, barely
    logits = torch.tensor([[[0.1, 0.0, 9.0, 9.0]],                      # experience 0's model: unsure of 0 vs 1
                           [[0.0, 0.0, 9.0, 0.0]]])                     # experience 1's model: sure of class 2
    assert int(combined(scores, owner, logits, own, tau=0.1, k=2)) == 2
    assert int(combined(scores, owner, logits, own, tau=0.1, k=1)) == 0   # one experience: the routed answer's
    assert int(combined(scores, owner, logits, own, tau=0.001, k=2)) == 0  # a sharp posterior follows the head


def test_combined_answer_scores_three_rules_chosen_on_dev_rows(env, tmp_path):
    from cl_graft.benchmarks.experiments.probes.combined_answer import TEMPERATURES, TOP, main
    from cl_graft.strategies.routing.class_heads import RIDGES

    _probed(env, tmp_path, main, "c")
    saved = json.loads((tmp_path / "c" / "combined_answer.json").read_text())
    rules = saved["rules"]
    assert set(rules) == {"head", "routed", "combined"} and saved["rows"]["test"] > 0
    assert rules["combined"]["tau"] in TEMPERATURES and rules["combined"]["k"] in TOP
    assert rules["combined"]["passes_per_row"] == 1 + rules["combined"]["k"] and rules["head"]["passes_per_row"] == 1
    for name, rule in rules.items():
        assert rule["ridge"] in RIDGES and rule["ms_per_row"] > 0, name
        for which in ("dev", "test"):                    # a right class lies in its own experience
            assert 0 <= rule[f"{which}_accuracy"] <= rule[f"{which}_own_experience"] <= 1, name


def test_more_steps_scores_each_experience_every_few_steps_beside_the_head(env, tmp_path):
    from click.testing import CliRunner

    from cl_graft.benchmarks.experiments.probes.more_steps import main
    from cl_graft.strategies.routing.class_heads import RIDGES

    run = tmp_path / "run"
    assert cli(env, "--stream", "split-intents:3", "--scenario", "class", "--strategies", "naive",
               "--out", str(run)).exit_code == 0                    # the probe reads only the run's record
    result = CliRunner().invoke(main, ["--run", str(run), "--data-dir", str(env / "data"), "--out",
                                       str(tmp_path / "m"), "--experiences", "0,2", "--steps", "4", "--every", "2"])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "m" / "more_steps.json").read_text())
    assert saved["ridge"] in RIDGES and saved["recipe"]["steps"] == 4 and set(saved["experiences"]) == {"0", "2"}
    for k, e in saved["experiences"].items():
        assert set(e["fine_tuned"]) == {"2", "4"}, k
        for which in ("dev", "test"):
            assert e["rows"][which] > 0 and 0 <= e["head"][which] <= 1, k
            assert all(0 <= got[which] <= 1 for got in e["fine_tuned"].values()), k
