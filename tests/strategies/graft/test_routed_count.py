"""How graft's task-agnostic accuracy counts a row routed to another task (issue 54, item 4).

Graft routes each row to a task and returns that task's logits (:meth:`TaskRouter.infer`); Avalanche's accuracy
then compares their argmax with the row's label. Where tasks number their classes
from 0 (every task list, a head per task) a row answered by another task counts right whenever that task's
answer has the row's class index. ``benchmarks/results/task_inference.md`` measures both counts ("as Avalanche
counts it" and "strict") offline. Graft now gives such a row one more column, "another task's answer", as its top
score (:meth:`~cl_graft.strategies.routing.states.TaskRouter.foreign_answers`), so the count is the strict one.
"""
from __future__ import annotations

import pytest
import torch

from helpers.toy_streams import BLOB_CLASSES, BLOB_TASKS, blob_strategy, exp_key, points

avalanche = pytest.importorskip("avalanche")


def test_a_row_routed_to_another_task_counts_wrong(monkeypatch):
    from avalanche.benchmarks import nc_benchmark
    from avalanche.models.utils import avalanche_forward

    from cl_graft.strategies.routing.states import TaskRouter

    bm = nc_benchmark(points(96, 1), points(48, 2), n_experiences=BLOB_TASKS, task_labels=True, seed=0,
                      fixed_class_order=list(range(BLOB_CLASSES)), class_ids_from_zero_in_each_exp=True)
    strategy = blob_strategy()
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(i)
        strategy.train(exp)

    def last_task(self, x, how):
        """Every row to the last learned task, with that task's logits."""
        k = len(self.owners.tasks) - 1
        label = self.target.label(self.owners.tasks[k])
        self.switch_(k)
        return avalanche_forward(self.target.model, x, label), torch.full((len(x),), label)

    monkeypatch.setattr(TaskRouter, "infer", last_task)
    strategy.graft.task_inference = "entropy"
    metrics = strategy.eval(bm.test_stream[:1])                        # task 0's rows, each sent to task 2
    assert metrics[exp_key(0, "TaskInference_Acc_Exp")] == 0.0
    assert metrics[exp_key(0)] == 0.0                                  # before the extra column: 75% counted right
