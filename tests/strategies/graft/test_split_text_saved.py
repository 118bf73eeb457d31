"""A split text stream's graft run kept and taken out, in both scenarios: a saved ``GraftStrategy`` loaded into a
fresh model answers with the logits it saved and trains on alike (a ``SharedHead``'s classes seen, a
``TaskAdapter``'s tasks trained, come back with it); one task exported as a transformers folder, from Python with
the strategy's model or its classifier (the class scenario's head over every class seen up to the task, stated)."""
from __future__ import annotations

import json

import pytest
import torch

avalanche = pytest.importorskip("avalanche")

from avalanche.training.plugins import EvaluationPlugin

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.errors import UserError
from cl_graft.strategies import GraftStrategy, LocalizeConfig, LocalizeFinder, load_run_
from cl_graft.strategies.comparison.runner import fresh_model
from cl_graft.strategies.interface.config import continual_setup

from helpers import intents_env
from helpers.toy_streams import EvalOutputs

SPEC = "split-intents:3"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return intents_env(tmp_path_factory.mktemp("split-saved"))


def _setup(env, scenario: str):
    """The split stream's setup (its seeded starting classifier) and stream, class order 5,4,3,2,1,0."""
    data, _ = continual_setup("smoke", seed=0)
    setup = find_family(SPEC).setup(StreamRequest(spec=SPEC, scenario=scenario, data=data, seed=0,
                                                  model=str(env / "model"), data_dir=str(env / "data"),
                                                  class_order="5,4,3,2,1,0"))
    return setup, setup.make()[0]


def _strategy(model, scenario: str, probe, saved=None) -> GraftStrategy:
    """A graft strategy on ``model`` as ``cl-graft run`` makes one (features routing in the class scenario), small;
    with ``saved``: the run loaded from that folder."""
    kw = {"optimizer": torch.optim.SGD(model.parameters(), lr=0.5), "train_mb_size": 16, "train_epochs": 2,
          "evaluator": EvaluationPlugin(loggers=[]), "plugins": [probe]}
    if saved is not None:
        return GraftStrategy.load(saved, model=model, **kw)
    return GraftStrategy(model=model, finder=LocalizeFinder("topk", LocalizeConfig(region_size=0.05)),
                         task_inference="features" if scenario == "class" else None, **kw)


def _logits(strategy, probe, experiences) -> list[torch.Tensor]:
    strategy.eval(experiences)
    return [torch.cat(probe.out[e.current_experience]) for e in experiences]


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_a_loaded_split_run_answers_as_saved_and_trains_on_alike(env, tmp_path, scenario):
    setup, stream = _setup(env, scenario)
    bm = stream.benchmark
    model, _ = fresh_model(setup.base, stream, 0)
    probe = EvalOutputs()
    strategy = _strategy(model, scenario, probe)
    for i in range(2):
        torch.manual_seed(i)
        strategy.train(bm.train_stream[i])
    saved = _logits(strategy, probe, bm.test_stream[:2])
    strategy.save(tmp_path / "run")
    loaded_model, _ = fresh_model(setup.base, stream, 0)
    loaded_probe = EvalOutputs()
    loaded = _strategy(loaded_model, scenario, loaded_probe, saved=tmp_path / "run")
    assert all(torch.equal(a, b) for a, b in zip(_logits(loaded, loaded_probe, bm.test_stream[:2]), saved,
                                                 strict=True))
    with pytest.raises(UserError, match="does not hold the TextClassifier"):           # a wrapper of another one
        load_run_(tmp_path / "run", fresh_model(setup.base, stream, 0)[0].clf, wrapper=loaded_model)
    state, loaded_state = model.state_dict(), loaded_model.state_dict()
    assert all(torch.equal(state[n], loaded_state[n]) for n in state)        # a SharedHead's seen classes too
    if scenario == "task":                                                    # what LwF's forward reads
        assert loaded_model.known_train_tasks_labels == model.known_train_tasks_labels == {0, 1}
    else:
        assert loaded_model.seen.tolist() == [False, False, True, True, True, True]     # groups [5, 4], [3, 2]
    for s in (strategy, loaded):
        torch.manual_seed(2)
        s.train(bm.train_stream[2])
    after = _logits(strategy, probe, bm.test_stream)
    assert all(torch.equal(a, b) for a, b in zip(_logits(loaded, loaded_probe, bm.test_stream), after, strict=True))


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_a_split_task_exports_from_the_strategys_model_or_its_classifier(env, tmp_path, scenario):
    from cl_graft.strategies import export_task, load_task_model
    from cl_graft.strategies.graft.export import task_model

    setup, stream = _setup(env, scenario)
    model, _ = fresh_model(setup.base, stream, 0)
    strategy = _strategy(model, scenario, EvalOutputs())
    for i in range(2):
        torch.manual_seed(i)
        strategy.train(stream.benchmark.train_stream[i])
    owners = strategy.graft.owners
    for name, given in (("model", model), ("classifier", model.clf)):
        export_task(owners, given, "intents-1", tmp_path / name)
    files = sorted(p.name for p in (tmp_path / "model").iterdir())
    assert {"config.json", "model.safetensors", "task_head.safetensors", "cl_graft_task.json"} <= set(files)
    assert all((tmp_path / "model" / f).read_bytes() == (tmp_path / "classifier" / f).read_bytes() for f in files)
    exported = load_task_model(tmp_path / "model")
    spec = exported.tasks["intents-1"]
    stated = json.loads((tmp_path / "model" / "cl_graft_task.json").read_text()).get("head_classes")
    head, classes = ("intents", [2, 3, 4, 5]) if scenario == "class" else ("intents-1", None)
    if scenario == "class":                        # groups [5, 4], [3, 2]: every class seen up to intents-1
        assert spec.labels == ("c2", "c3", "c4", "c5") and stated["head"] == "intents" and stated["ids"] == classes
    else:                                          # its group's own head, labels in class order
        assert spec.labels == ("c3", "c2") and stated is None
    rows = stream.splits[0].test + stream.splits[1].test
    enc = exported.encode(rows)
    with torch.no_grad():
        got = exported(enc["input_ids"], enc["attention_mask"])
        grafted = task_model(owners, model.clf, "intents-1").eval()
        want = grafted(enc["input_ids"], enc["attention_mask"], task=head)
    assert torch.allclose(got, want if classes is None else want[:, classes], atol=1e-6)


def test_the_classes_seen_by_a_task_are_the_training_experiences_up_to_its_first():
    from cl_graft.strategies.graft.adaptations import classes_seen

    records = [{"training": True, "task_labels": [1], "classes": [3, 2]},          # trained out of stream order
               {"training": False, "task_labels": [0, 1, 2], "classes": [0, 1, 2, 3, 4, 5]},       # an evaluation
               {"training": True, "task_labels": [0], "classes": [5, 4]}]
    assert classes_seen(records, 1) == [2, 3] and classes_seen(records, 0) == [2, 3, 4, 5]
    with pytest.raises(UserError, match="no training experience of task label 2"):
        classes_seen(records, 2)
