"""``cumulative``: Avalanche's Cumulative, retraining on every experience so far (the ceiling), on streams
with more tasks than rows per batch too.

Avalanche 0.6's ``make_train_dataloader`` serves a task-labelled experience through ``TaskBalancedDataLoader``,
which asserts ``batch_size >= number of tasks`` (it gives every task at least one row of each batch). Cumulative
trains on the union of every experience so far, so on ``permuted-digits:20`` with 16 rows per batch it fails at
experience 17 (``AssertionError`` in ``data_loader.py``). :class:`cumulative_class`'s strategy keeps Avalanche's
loader while the tasks fit in a batch and otherwise draws plain shuffled batches from the union (Avalanche's own
loader for experiences without task labels): rows are sampled uniformly, not balanced per task.
"""
from __future__ import annotations

from typing import Any

from ..interface.entry import BuildContext, StrategyEntry
from .common import MODEL, rows_bytes, with_model


def cumulative_class() -> type:
    """Avalanche's ``Cumulative`` with the loader above (a class made on first use: Avalanche is imported here)."""
    from avalanche.training import Cumulative
    from torch.utils.data import DataLoader

    class ManyTaskCumulative(Cumulative):
        """``Cumulative`` whose training batches are plain shuffled ones when the tasks outnumber the rows."""

        def make_train_dataloader(self, num_workers=0, shuffle=True, pin_memory=None, persistent_workers=False,
                                  drop_last=False, **kwargs):
            if len(self.adapted_dataset.targets_task_labels.uniques) <= self.train_mb_size:
                return super().make_train_dataloader(num_workers, shuffle, pin_memory, persistent_workers,
                                                     drop_last, **kwargs)
            args = self._obtain_common_dataloader_parameters(
                batch_size=self.train_mb_size, num_workers=num_workers, shuffle=shuffle, pin_memory=pin_memory,
                persistent_workers=persistent_workers, drop_last=drop_last)
            self.dataloader = DataLoader(self.adapted_dataset, **args)

    return ManyTaskCumulative


def build(ctx: BuildContext) -> Any:
    """The ``cumulative`` entry's strategy (either scenario)."""
    return cumulative_class()(**ctx.template, plugins=ctx.plugins)


@with_model
def kept(strategy) -> dict[str, int]:
    """Cumulative: every training row seen so far (it retrains on all of them)."""
    return {"rows": rows_bytes(strategy.dataset)}


ENTRY = StrategyEntry(name="cumulative", help="Avalanche Cumulative: retrain on every experience so far (the "
                      "ceiling)", stores=MODEL + " and every training row seen", build=build, kept_bytes=kept)
