"""The closed-form baselines (``slda``, ``ranpac``) on the tiny intents task: θ_pre's features into a head of
``cl_graft.heads``, in both scenarios, on split and task-list streams, with ``--tune`` recording its choice, the
bytes each keeps by part, ``--resume`` from the head's sums, and one-line refusals; with ``ncm``, rows without task
labels answered over every task's columns (``--task-inference features``, ``all_columns.py``)."""
from __future__ import annotations

import json
import random

import pytest
import torch
from click.testing import CliRunner

from cl_graft.files import write_safetensors

from helpers import INTENT_WORDS, cli, intents_env, training_calls, write_task

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


def _results(env, tmp_path, *args, out: str = "out") -> dict:
    res = cli(env, *args, "--out", str(tmp_path / out))
    assert res.exit_code == 0, res.output
    return json.loads((tmp_path / out / "results.json").read_text())["strategies"]


@pytest.mark.parametrize("scenario,stream,classes", [("class", "split-intents:3", 6), ("task", "split-intents:3", 6),
                                                     ("task", "intents,pairs", 8)])
def test_both_heads_learn_every_class_and_keep_their_sums(env, tmp_path, scenario, stream, classes):
    runs = _results(env, tmp_path, "--stream", stream, "--scenario", scenario, "--strategies", "slda,ranpac",
                    "--ranpac-width", str(WIDTH))
    for name, run in runs.items():
        final = run["matrix"][-1]
        assert sum(final) / len(final) > 0.8, (name, run["matrix"])
        assert run["bytes"] == sum(run["info"]["kept"].values()), name
        assert "task_id" not in run["info"] and "task_inference" not in run["info"], name     # nothing routed
        rows = run["info"]["feature_rows"]     # evaluated after each of 2-3 experiences: rows read back, one batch
        assert rows["reused"] > 0 and rows["checks"] >= 1 and rows["forgotten"] == 0, name   # checked each time
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
    with monkeypatch.context() as m:
        training_calls(m, experience=2)
        with pytest.raises(KeyboardInterrupt):
            runner.run_strategy(name, base, stream, cfg, settings, state_dir=tmp_path / "cut")
    calls = training_calls(monkeypatch)
    resumed = runner.run_strategy(name, base, stream, cfg, settings, state_dir=tmp_path / "cut")
    assert [exp for exp, _ in calls] == [2]
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


HEADS = "slda,ranpac,ncm"


def test_without_task_labels_the_heads_answer_over_every_tasks_columns(env, tmp_path, monkeypatch):
    """``--task-inference features`` on a task list: each routed row is answered by the scores of every column of
    both tasks (6 + 2), its target is its own task's column, the accuracy and "task identified" in
    ``info["task_inference"]`` are those the routed batches give, and the accuracies with task labels are a plain
    run's."""
    from cl_graft.strategies.baselines.all_columns import AllColumns

    seen = []
    answer_all = AllColumns.answer_all

    def recorded(self):
        scores = answer_all(self)
        seen.append((self.column_keys(), self.row_places(), scores, self.mb_y.clone()))
        return scores

    plain = _results(env, tmp_path, "--stream", "intents,pairs", "--strategies", HEADS, "--ranpac-width", str(WIDTH),
                     out="plain")
    monkeypatch.setattr(AllColumns, "answer_all", recorded)
    runs = _results(env, tmp_path, "--stream", "intents,pairs", "--strategies", HEADS, "--ranpac-width", str(WIDTH),
                    "--task-inference", "features", out="routed")
    assert len(seen) == 3 * 2                                              # one batch per task and head
    for name, run in runs.items():
        agnostic, batches = run["info"]["task_inference"], seen[:2]
        del seen[:2]
        assert run["matrix"] == plain[name]["matrix"], name
        assert agnostic["how"] == "features" and agnostic["count"] == "strict"
        for j, (keys, places, scores, y) in enumerate(batches):
            assert scores.shape == (len(y), 8) and sorted(map(tuple, keys.tolist())) == sorted(
                {tuple(k) for k in keys.tolist()}), name                    # every column, each once
            pick = scores.argmax(1)
            own = keys[pick, 0] == places
            assert bool((keys[y, 0] == places).all())                       # targets: each row's own task's column
            assert agnostic["accuracy"][j] == pytest.approx(float((pick == y).float().mean())), name
            assert agnostic["task_id"][j] == pytest.approx(float(own.float().mean())), name
            assert agnostic["accuracy"][j] <= agnostic["task_id"][j], name     # right only in its own task
    assert max(runs["slda"]["info"]["task_inference"]["task_id"]) > 0.5


class _Batch:
    """The template fields :class:`AllColumns` reads, for one evaluated mini-batch of task label 0 (head ``a``;
    heads ``a`` and ``b``, two classes each)."""

    is_training = False

    def __init__(self, scores: torch.Tensor, labels: list[int]) -> None:
        from types import SimpleNamespace

        self.model = SimpleNamespace(clf=SimpleNamespace(heads={"a": None, "b": None}), task_names=["a", "b"])
        self.experience = SimpleNamespace(current_experience=0)
        self.scores = scores
        n = len(labels)
        self.mbatch = [torch.zeros(n, 2, 3), torch.tensor(labels), torch.zeros(n, dtype=torch.long)]

    mb_x = property(lambda self: self.mbatch[0])
    mb_y = property(lambda self: self.mbatch[1])
    mb_task_id = property(lambda self: self.mbatch[-1])

    def _unpack_minibatch(self) -> None:
        """The template's own: nothing to move."""


def test_a_row_answered_from_another_tasks_column_counts_wrong_even_with_its_class_index():
    from avalanche.evaluation.metrics import Accuracy

    from cl_graft.errors import UserError
    from cl_graft.strategies.baselines.all_columns import AllColumns, ColumnRouting

    class Template(AllColumns, _Batch):
        def column_keys(self):
            return torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])           # (a, 0), (a, 1), (b, 0), (b, 1)

        def column_scores(self, x):
            return self.scores

    scores = torch.tensor([[0.0, 2.0, 0.0, 1.0],                            # (a, 1): its own task and class
                           [0.0, 1.0, 0.0, 2.0],                            # (b, 1): class 1, another task
                           [3.0, 0.0, 0.0, 1.0]])                           # (a, 0): its own task, wrong class
    batch, routing = Template(scores, [1, 1, 1]), ColumnRouting()
    assert routing.identified(batch, 1) is None                              # nothing routed yet
    routing.route(batch, "features")
    batch._unpack_minibatch()
    assert batch.mb_y.tolist() == [1, 1, 1]                                  # (a, 1) is column 1
    accuracy = Accuracy()
    accuracy.update(batch.answer_all(), batch.mb_y)
    routing.route(batch, None)
    assert accuracy.result() == pytest.approx(1 / 3) and routing.identified(batch, 1) == [pytest.approx(2 / 3)]
    with pytest.raises(UserError, match="route by features, not 'entropy'"):
        routing.route(batch, "entropy")


def test_a_rule_no_named_strategy_routes_by_is_refused_in_one_line(env, tmp_path):
    res = cli(env, "--stream", "intents,pairs", "--strategies", "slda", "--task-inference", "entropy",
              "--out", str(tmp_path / "x"))
    assert res.exit_code == 2 and "--task-inference entropy scores strategies" in res.output, res.output
    assert "none of --strategies slda does" in res.output and not (tmp_path / "x").exists()


@pytest.mark.parametrize("args", [("--stream", "intents,pairs"),
                                  ("--stream", "split-intents:3", "--scenario", "class")])
def test_ncm_answers_from_kept_features_what_the_model_itself_answers(env, tmp_path, monkeypatch, args):
    """ncm's evaluated rows' features are computed once: each evaluated batch's output (the heads applied to them)
    is what the model's own forward gives, unseen classes masked included."""
    from avalanche.models.utils import avalanche_forward

    from cl_graft.strategies.plugins.recipe import FiniteGuard

    checked = []

    def compared(self, strategy, **kwargs):
        with torch.no_grad():
            own = avalanche_forward(strategy.model, strategy.mb_x, strategy.mb_task_id)
        assert torch.allclose(strategy.mb_output[:, :own.shape[1]], own, atol=1e-5)
        checked.append(len(own))

    monkeypatch.setattr(FiniteGuard, "after_eval_forward", compared, raising=False)
    rows = _results(env, tmp_path, *args, "--strategies", "ncm")["ncm"]["info"]["feature_rows"]
    assert checked and rows["reused"] > 0 and rows["checks"] >= 1 and rows["forgotten"] == 0
