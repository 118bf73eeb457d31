"""The trained model's test accuracy per task, recorded beside its region size (``sizing["trained_test"]``).

The size search vouches, on held-out rows, that a task's region loses at most ``tolerance`` of the accuracy of the model
the task trained (:mod:`.sizing`). Whether that promise held on test rows can only be read afterwards, and only if the
trained model's test accuracy was kept: the grafted model replaces it when the task ends. So ``cl-graft run
--trained-test true`` adds :class:`TrainedTestScore` to graft's template (off by default: one pass over each task's test
rows, about 6 s per task of the README's text stream, which no choice reads): when a task's training ends, before the
region is chosen, it scores the model as trained on the task's test experience, and once the task's region exists it
writes ``trained_test`` (accuracy, a share) and ``trained_test_seconds`` into the region's size record (saved with the
skills, so a resumed run keeps them). Nothing reads them while the run goes on: no choice sees test rows.
A task whose region was retrained (:mod:`.sizing.retrain`) ends training already inside its region: its record gets
``trained_test`` None.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from avalanche.core import SupervisedPlugin

from .region_search import finder_data
from .run_state import region_plugin


class TrainedTestScore(SupervisedPlugin, supports_distributed=True):
    """Scores each task's trained model on its test experience (see the module docstring).

    Args:
        test_stream: the benchmark's test experiences, in the order of the training experiences
            (``benchmark.test_stream``; experience ``i`` is scored on ``test_stream[i]``).

    Under torchrun every rank scores the same rows with the same weights (no collective call), so the records
    agree. Put it first among the template's plugins (:meth:`attach`): its ``after_training_exp`` must run before the
    graft plugin's, which grafts the model.
    """

    def __init__(self, *, test_stream: Sequence) -> None:
        super().__init__()
        self.test_stream = test_stream
        self._pending: dict[str, tuple[float | None, float]] = {}     # task → (accuracy, seconds), region not kept yet

    @classmethod
    def attach(cls, strategy, test_stream: Sequence) -> TrainedTestScore:
        """A scorer put before every other plugin of ``strategy`` (a graft template)."""
        scorer = cls(test_stream=test_stream)
        strategy.plugins.insert(0, scorer)
        return scorer

    def after_training_exp(self, strategy, **kwargs) -> None:
        plugin = region_plugin(strategy)
        target = plugin.target(strategy)
        label, task = plugin._task(target, strategy.experience)
        retrain = getattr(plugin, "_retrain", None)
        if plugin.mode != "stream" or (retrain is not None and retrain.switched):
            self._pending[task] = (None, 0.0)
            return
        t0 = time.perf_counter()
        test = self.test_stream[strategy.experience.current_experience].dataset
        data = finder_data(strategy, target, label, task, (strategy.experience.dataset, test), {})
        was_training = target.model.training
        target.model.eval()
        accuracy = data.score(target.root, "dev", limit=len(test), seed=0)
        target.model.train(was_training)
        self._pending[task] = (accuracy, round(time.perf_counter() - t0, 3))

    def after_training(self, strategy, **kwargs) -> None:
        """Writes the pending scores into the size records of the tasks' regions (learned by now)."""
        owners = region_plugin(strategy).owners
        for task, patch in zip(owners.tasks if owners is not None else [], owners.patches if owners else []):
            record = patch.region.meta.get("sizing")
            if task in self._pending and record is not None:
                record["trained_test"], record["trained_test_seconds"] = self._pending.pop(task)
