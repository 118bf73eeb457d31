"""GraftStrategy in the loops and plugins Avalanche users already use: ``eval(test_stream)`` after every experience,
periodic evaluation and early stopping, unlabelled test data on ``MTSimpleMLP``, the newer benchmark API, and
help() that reads alone. Its files (save/load, export, Avalanche's checkpoints): ``test_avalanche_saving.py``."""
from __future__ import annotations

import pydoc
from functools import partial

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

avalanche = pytest.importorskip("avalanche")

from avalanche.core import SupervisedPlugin
from avalanche.models.utils import avalanche_forward
from avalanche.training import Naive
from avalanche.training.plugins import EarlyStoppingPlugin, EvaluationPlugin
from cl_graft.strategies import GraftPlugin, GraftStrategy

from helpers.toy_streams import (
    BLOB_CLASSES,
    BLOB_DIM,
    BLOB_TASKS,
    benchmark,
    blob_strategy,
    exp_key,
    mlp,
    optimizer,
    points,
)


def test_standard_loop_gives_the_sliced_numbers_and_avalanche_metrics(blob_bm, blob_run):
    _, _, full, sliced = blob_run
    for i in range(BLOB_TASKS):
        for j in range(i + 1):
            assert full[i][exp_key(j)] == sliced[i][exp_key(j)]
            assert full[i][exp_key(j)] == full[j][exp_key(j)] >= 0.9                     # nothing forgotten
        for j in range(i + 1, BLOB_TASKS):
            assert exp_key(j) in full[i]                                           # a future task is scored too
    assert full[-1]["StreamForgetting/eval_phase/test_stream"] == 0
    assert "StreamForwardTransfer/eval_phase/test_stream" in full[-1]
    matrix = full[-1]["EvalStream/Acc_Matrix"]
    assert tuple(matrix.shape) == (BLOB_TASKS, BLOB_TASKS)
    assert all(float(matrix[i, j]) == full[i][exp_key(j)] for i in range(BLOB_TASKS) for j in range(BLOB_TASKS))


def test_a_task_not_trained_yet_is_scored_like_naive(blob_bm, eval_outputs):
    """Before any training the logits are Naive's; later an untrained task runs on the model as it is."""
    probe, naive_probe = eval_outputs(), eval_outputs()
    strategy = blob_strategy(probe=probe)
    model = mlp()
    naive = Naive(model=model, optimizer=optimizer(model), eval_mb_size=16, evaluator=EvaluationPlugin(loggers=[]),
                  plugins=[naive_probe])
    strategy.eval(blob_bm.test_stream)
    naive.eval(blob_bm.test_stream)
    for j in range(BLOB_TASKS):
        assert all(torch.equal(a, b) for a, b in zip(probe.out[j], naive_probe.out[j], strict=True))
    torch.manual_seed(100)
    strategy.train(blob_bm.train_stream[0])
    strategy.eval(blob_bm.test_stream)
    x = torch.stack([blob_bm.test_stream[2].dataset[i][0] for i in range(16)])
    strategy.model.eval()
    with torch.no_grad():
        assert torch.equal(probe.out[2][0], avalanche_forward(strategy.model, x, torch.full((16,), 2)))


def test_eval_every_and_early_stopping_score_the_tasks_as_they_are(blob_bm, eval_outputs):
    """Periodic evaluation while task 1 trains: task 0 gives exactly its grafted model's logits (θ_pre back on
    the free elements task 1 is changing), task 1 its current training state; early stopping runs."""
    probe = eval_outputs()
    strategy = blob_strategy(probe=probe, eval_every=1, peval_mode="iteration", train_epochs=4,
                     plugins=[EarlyStoppingPlugin(patience=3, val_stream_name="test_stream", peval_mode="iteration")])
    torch.manual_seed(100)
    strategy.train(blob_bm.train_stream[0], eval_streams=[blob_bm.test_stream[:2]])
    strategy.eval(blob_bm.test_stream[:1])                      # the last periodic eval came before the region search
    after_first = [t.clone() for t in probe.out[0]]
    seen = []

    class Watch(SupervisedPlugin):
        def after_eval_exp(self, s, **kw):
            if s.experience.current_experience == 0:
                seen.append([t.clone() for t in probe.out[0]])

    strategy.plugins.append(Watch())
    torch.manual_seed(101)
    strategy.train(blob_bm.train_stream[1], eval_streams=[blob_bm.test_stream[:2]])
    assert len(seen) >= 4                                     # before training, then every iteration until it stops
    assert strategy.clock.train_exp_iterations < 8                           # early stopping stopped it
    for outs in seen:
        assert all(torch.equal(a, b) for a, b in zip(outs, after_first, strict=True))
    metrics = strategy.eval(blob_bm.test_stream[:2])
    assert metrics[exp_key(1)] >= 0.9 and metrics["StreamForgetting/eval_phase/test_stream"] == 0


def test_unlabelled_test_data_on_a_multi_head_model(blob_bm, blob_run):
    """Test data without task labels (Avalanche's benchmark_from_datasets, no task labels, no classes timeline)
    is routed; the logits equal task inference on the labelled stream (whose rows sent to another task's head carry
    one more column, "another task's answer"); task inference is logged only then."""
    from avalanche.benchmarks.scenarios import benchmark_from_datasets
    from avalanche.benchmarks.utils import as_classification_dataset

    strategy, probe, _, _ = blob_run
    plain = []
    for exp in blob_bm.test_stream:                                 # the same rows, without task labels
        rows = [exp.dataset[i] for i in range(len(exp.dataset))]
        ds = TensorDataset(torch.stack([r[0] for r in rows]), torch.tensor([int(r[1]) for r in rows]))
        ds.targets = ds.tensors[1].tolist()
        plain.append(as_classification_dataset(ds))
    unlabelled = benchmark_from_datasets(test=plain)
    assert not hasattr(unlabelled.test_stream[0], "task_labels")
    metrics = strategy.eval(unlabelled.test_stream)
    routed = {j: [t.clone() for t in probe.out[j]] for j in range(BLOB_TASKS)}
    assert metrics["Top1_Acc_Stream/eval_phase/test_stream"] >= 0.5
    strategy.graft.task_inference = "entropy"
    try:
        inferred = strategy.eval(blob_bm.test_stream)
    finally:
        strategy.graft.task_inference = None
    for j in range(BLOB_TASKS):            # labelled rows sent to another task's head get one more column
        assert all(torch.equal(a, b[:, :a.shape[1]]) for a, b in zip(routed[j], probe.out[j], strict=True))
    stream_key = "TaskInference_Acc_Stream/eval_phase/test_stream"
    assert 0 <= inferred[stream_key] <= 1
    logged = len(strategy.evaluator.get_all_metrics()[stream_key][1])
    strategy.eval(blob_bm.test_stream)                                            # task-aware: nothing inferred
    assert len(strategy.evaluator.get_all_metrics()[stream_key][1]) == logged


def test_newer_benchmark_api_with_a_validation_stream():
    """benchmark_from_datasets-style scenarios: class_incremental_benchmark, split_validation_class_balanced,
    task_incremental_benchmark; regions selected on the validation stream; a single-head model."""
    from avalanche.benchmarks.scenarios import (
        benchmark_with_validation_stream,
        class_incremental_benchmark,
        split_validation_class_balanced,
        task_incremental_benchmark,
    )
    from avalanche.benchmarks.utils import as_classification_dataset

    data = {"train": as_classification_dataset(points(96, 1)), "test": as_classification_dataset(points(48, 2))}
    blob_bm = class_incremental_benchmark(data, num_experiences=BLOB_TASKS, class_order=list(range(BLOB_CLASSES)))
    blob_bm = task_incremental_benchmark(benchmark_with_validation_stream(
        blob_bm, split_strategy=partial(split_validation_class_balanced, 0.25)))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(BLOB_DIM, 32), nn.ReLU(), nn.Linear(32, BLOB_CLASSES))
    strategy = blob_strategy(model, valid_stream=blob_bm.valid_stream)
    assert sorted(strategy.graft.valid) == list(range(BLOB_TASKS))
    results = []
    for i, exp in enumerate(blob_bm.train_stream):
        torch.manual_seed(100 + i)
        strategy.train(exp)
        results.append(strategy.eval(blob_bm.test_stream))
    for j in range(BLOB_TASKS):
        assert results[-1][exp_key(j)] == results[j][exp_key(j)] >= 0.9
    assert strategy.graft.owners.tasks == ["0", "1", "2"]


GRAFT_ARGS = ("mode", "finder", "regions", "reconstruct", "valid_stream", "graftable", "heads", "task_inference",
              "owners", "guard")


@pytest.mark.parametrize("cls", [GraftStrategy, GraftPlugin])
def test_help_lists_every_graft_argument_with_its_default(cls):
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    own = text[:text.index("Method resolution order")]
    for arg in GRAFT_ARGS:
        line = next((ln for ln in own.splitlines() if ln.lstrip(" |").startswith(f"{arg} (")), None)
        assert line is not None and "default" in line, arg
    assert "peval_mode" not in own and "see GraftPlugin" not in own
    init_doc = cls.__dict__["__init__"].__doc__ or ""                     # its own, not the base class's
    assert "class docstring" in init_doc and "peval_mode" not in init_doc


def test_strategies_export_what_a_user_passes():
    import cl_graft.strategies as s

    from cl_graft.regions.config import LocalizeConfig as Config

    assert s.LocalizeConfig is Config
    for name in ("LocalizeFinder", "RegionFinder", "experience_regions", "independent_regions",
                 "TaskInferenceAccuracy"):
        assert name in s.__all__ and getattr(s, name) is not None
