"""The closed-form baselines (``slda``, ``ranpac``) on the tiny intents task: θ_pre's features into a head of
``cl_graft.heads``, in both scenarios, on split and task-list streams, with ``--tune`` recording its choice, the
bytes each keeps by part, ``--resume`` from the head's sums, and one-line refusals."""
from __future__ import annotations

import json
import random

import pytest
import torch
from click.testing import CliRunner

from cl_graft.files import write_safetensors

from helpers import INTENT_WORDS, cli, intents_env, write_task

avalanche = pytest.importorskip("avalanche")

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.cli import main
from cl_graft.strategies.comparison import runner
from cl_graft.strategies.comparison.registry import STRATEGIES, strategy_settings
from cl_graft.strategies.interface.config import continual_setup

HIDDEN, WIDTH = 32, 256                                                # the tiny BERT's features; a small projection


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The intents task and a two-class task ``pairs`` of its own labels (a task-list stream's second head)."""
    root = intents_env(tmp_path_factory.mktemp("closed_form"))
    rng = random.Random(1)
    rows = [{"text": " ".join([INTENT_WORDS[i % 2], *rng.sample(INTENT_WORDS[2:], 2)]), "label": i % 2}
            for i in range(80)]
    write_task(root / "data" / "pairs", ["a", "b"], {"train": rows[:60], "test": rows[60:]})
    return root


def _results(env, tmp_path, *args) -> dict:
    res = cli(env, *args, "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    return json.loads((tmp_path / "out" / "results.json").read_text())["strategies"]


@pytest.mark.parametrize("scenario,stream,classes", [("class", "split-intents:3", 6), ("task", "split-intents:3", 6),
                                                     ("task", "intents,pairs", 8)])
def test_both_heads_learn_every_class_and_keep_their_sums(env, tmp_path, scenario, stream, classes):
    runs = _results(env, tmp_path, "--stream", stream, "--scenario", scenario, "--strategies", "slda,ranpac",
                    "--ranpac-width", str(WIDTH))
    for name, run in runs.items():
        final = run["matrix"][-1]
        assert sum(final) / len(final) > 0.8, (name, run["matrix"])
        assert run["bytes"] == sum(run["info"]["kept"].values()), name
    assert runs["slda"]["info"]["kept"] == {"class_means": classes * (HIDDEN + 1) * 4, "covariance": HIDDEN ** 2 * 4,
                                            "solved": classes * (HIDDEN + 1) * 4}
    assert runs["ranpac"]["info"]["kept"] == {"projection": HIDDEN * WIDTH * 4, "gram": WIDTH ** 2 * 4,
                                              "targets": WIDTH * classes * 4, "solved": WIDTH * classes * 4}


def test_tune_chooses_on_dev_rows_and_records_the_choice(env, tmp_path):
    runs = _results(env, tmp_path, "--stream", "split-intents:2", "--scenario", "class", "--strategies",
                    "slda,ranpac", "--tune", "--tune-budget", "2")
    for name, run in runs.items():
        tuning = run["info"]["tuning"]
        assert tuning["grid"] == [dict(p) for p in STRATEGIES[name].grid[:2]] and len(tuning["dev_average"]) == 2
        assert tuning["chosen"] in tuning["grid"] and run["info"]["settings"] == tuning["chosen"], name


def _setup(env):
    data, cfg = continual_setup("smoke", seed=0)
    setup = find_family("split-intents:3").setup(StreamRequest(
        spec="split-intents:3", scenario="class", data=data, seed=0, model=str(env / "model"),
        data_dir=str(env / "data")))
    return data, cfg, setup.base, setup.make()[0]


@pytest.mark.parametrize("name", ["slda", "ranpac"])
def test_resume_continues_from_the_heads_sums(env, tmp_path, monkeypatch, name):
    data, cfg, base, stream = _setup(env)
    settings = strategy_settings(name, data, seed=0, given={"ranpac_width": WIDTH})
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    full = runner.run_strategy(name, base, stream, cfg, settings, state_dir=tmp_path / "full")
    train = runner._train

    def killed(strategy, experience, seed):
        if experience.current_experience == 2:
            raise KeyboardInterrupt
        train(strategy, experience, seed)

    with monkeypatch.context() as m:
        m.setattr(runner, "_train", killed)
        with pytest.raises(KeyboardInterrupt):
            runner.run_strategy(name, base, stream, cfg, settings, state_dir=tmp_path / "cut")
    trained = []

    def counted(strategy, experience, seed):
        trained.append(experience.current_experience)
        train(strategy, experience, seed)

    monkeypatch.setattr(runner, "_train", counted)
    resumed = runner.run_strategy(name, base, stream, cfg, settings, state_dir=tmp_path / "cut")
    assert trained == [2]
    assert resumed.matrix == full.matrix and resumed.bytes == full.bytes
    assert all(p.detach().equal(before[n]) for n, p in base.named_parameters())   # the encoder is θ_pre's


def test_a_saved_head_of_another_shape_is_refused_with_one_line(env, tmp_path, monkeypatch):
    from cl_graft.errors import UserError

    data, cfg, base, stream = _setup(env)
    settings = strategy_settings("slda", data, seed=0)
    runner.run_strategy("slda", base, stream, cfg, settings, state_dir=tmp_path / "state")
    write_safetensors(tmp_path / "state" / "head.safetensors", {"sigma": torch.zeros(3, 3),
                                                                "columns": torch.zeros(0, 2, dtype=torch.int64),
                                                                "experiences": torch.tensor(3)})
    with pytest.raises(UserError, match="slda's saved head: no tensor 'means'"):
        runner.run_strategy("slda", base, stream, cfg, settings, state_dir=tmp_path / "state")


def test_digits_streams_are_refused_before_any_strategy_trains(tmp_path):
    out = tmp_path / "x"
    res = CliRunner().invoke(main, ["run", "--model", "mlp", "--preset", "smoke", "--stream", "split-digits",
                                    "--scenario", "class", "--strategies", "naive,ranpac", "--out", str(out)])
    assert res.exit_code == 2 and "ranpac works on a pre-trained text encoder" in res.output, res.output
    assert not (out / "naive").exists()


@pytest.mark.parametrize("args,message", [
    (["--stream", "split-intents:2", "--strategies", "slda", "--slda-shrinkage", "2"],
     "--slda-shrinkage must be in (0, 1], got 2.0"),
    (["--stream", "split-intents:2", "--strategies", "ranpac", "--ranpac-width", "0"],
     "--ranpac-width must be >= 1, got 0")])
def test_bad_input_is_one_line(env, tmp_path, args, message):
    res = cli(env, *args, "--out", str(tmp_path / "x"))
    assert res.exit_code == 2 and message in res.output, res.output
