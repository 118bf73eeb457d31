"""An open-ended stream (cl_graft.strategies.graft.sizing): 30 tasks fed one benchmark at a time, with no stream
length anywhere, into a single-head MLP trained from scratch; the doubling plan leaves every task room."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

avalanche = pytest.importorskip("avalanche")

from avalanche.benchmarks import tensors_benchmark
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin
from cl_graft.strategies import CapacityWarning, GraftStrategy, sizing_records

TASKS, DIM, CLASSES = 30, 16, 4


def _task(t: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Four Gaussian blobs in 16 dims whose centres are task ``t``'s own; ``seed`` draws the rows."""
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(1000 + t)) * 2
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    return centres[y] + torch.randn(len(y), DIM, generator=torch.Generator().manual_seed(seed)), y


def _benchmark(t: int):
    """A benchmark of one experience, task label ``t``: its stream says nothing of the tasks to come."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tensors_benchmark(train_tensors=[_task(t, 320, 2 * t)], test_tensors=[_task(t, 200, 2 * t + 1)],
                                 task_labels=[t], complete_test_set_only=False)


def test_thirty_tasks_one_at_a_time_with_no_length_all_learn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, CLASSES))
    strategy = GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                             train_mb_size=16, train_epochs=3, eval_mb_size=200,
                             evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    benchmarks = [_benchmark(t) for t in range(TASKS)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for bm in benchmarks:
            strategy.train(bm.train_stream[0])
    warned = [str(w.message) for w in caught if issubclass(w.category, CapacityWarning)]
    records = sizing_records(strategy.graft.owners)
    assert len(records) == TASKS
    assert [r["allowance"] for r in records] == [1 / 2] + [1 / (t + 3) for t in range(1, TASKS)]
    missed = [r["task"] for r in records if not r["met"] or not r["above_chance"]]
    assert all(any(f"task {t!r}" in w for w in warned) for t in missed)       # none silently below target
    assert all(r["above_chance"] for r in records)
    assert records[-1]["free_before"] > 0.04                                   # the last still had room
    scores = []
    for bm in benchmarks:
        metrics = strategy.eval(bm.test_stream)
        scores.append(next(v for k, v in metrics.items() if k.startswith("Top1_Acc_Exp/eval_phase")))
    assert min(scores) > 0.6, scores                                           # chance is 0.25
    below_cap = sum(r["below_cap"] for r in records)
    assert below_cap > 0                                                       # the search chose, not the cap
