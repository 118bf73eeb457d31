"""``er-ace``: Avalanche's ER_ACE (Caccia et al. 2022): replay with an asymmetric cross-entropy; a
class-incremental method (one output layer shared by every class).

Avalanche 0.6.0's ER_ACE draws its memory through a ``DataLoader`` without the memory's collate function
(``avalanche/training/supervised/er_ace.py:155-171``), which cannot batch text rows (dicts of token ids); the
strategy here builds the same loader with it (:func:`er_ace_class`), so ER-ACE runs on text streams too."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..interface.entry import BuildContext, StrategyEntry
from .common import CLASS, MODEL, ReplayFamily, positive, replay_kept


@dataclass(frozen=True)
class ERACESettings(ReplayFamily):
    """``er-ace``'s."""

    er_ace_batch: int = field(default=10, metadata={"help": "ER-ACE: memory rows per training step."})

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("er_ace_batch", self.er_ace_batch)


GRID = ({"er_ace_batch": 10}, {"er_ace_batch": 32}, {"er_ace_batch": 64}, {"er_ace_batch": 16},
        {"er_ace_batch": 128})


def er_ace_class() -> type:
    """Avalanche's ``ER_ACE`` whose memory loader collates with the memory's collate function (a class made on
    first use: Avalanche is imported here)."""
    from itertools import cycle

    from avalanche.training import ER_ACE
    from torch.utils.data import DataLoader

    class CollatingERACE(ER_ACE):
        """``ER_ACE`` drawing its memory batches with the memory's own collate function."""

        def _before_training_exp(self, **kwargs):
            self.storage_policy.update(self, **kwargs)                  # as Avalanche's, the loader collating
            buffer = self.storage_policy.buffer
            if len(buffer) >= self.batch_size_mem and self.experience.current_experience > 0:
                self.replay_loader = cycle(DataLoader(buffer, batch_size=self.batch_size_mem, shuffle=True,
                                                      drop_last=True, collate_fn=buffer.collate_fn))
            super(ER_ACE, self)._before_training_exp(**kwargs)

    return CollatingERACE


def build(ctx: BuildContext):
    """ER-ACE with ``replay_mem`` rows of memory and ``er_ace_batch`` of them per step."""
    return er_ace_class()(**ctx.template, plugins=ctx.plugins, mem_size=ctx.settings.replay_mem,
                          batch_size_mem=ctx.settings.er_ace_batch)


ENTRY = StrategyEntry(
    name="er-ace", help="Avalanche ER_ACE (replay, asymmetric cross-entropy; --scenario class)",
    stores=MODEL + " and replay_mem rows",
    build=build, kept_bytes=replay_kept, settings=ERACESettings, grid=GRID,
    scenarios=CLASS)
