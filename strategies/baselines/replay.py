"""``replay``: Avalanche's replay of earlier rows (``ReplayPlugin``). By default a memory of ``replay_mem`` rows
balanced over experiences (Avalanche's ``Replay``: ``ExperienceBalancedBuffer``, each experience's share drawn at
random from its rows), whose size it tunes, as it always has. With ``replay_per_class`` = k it keeps k rows of every
class seen (``ClassBalancedBuffer`` with a fixed share per class, :func:`~.common.per_class_buffer`: k × the
stream's classes at the end, drawn at random within each class) and tunes nothing: the memory is the setting."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..interface.entry import BuildContext, StrategyEntry
from .common import MODEL, PerClassMemory, per_class_buffer, per_class_check, replay_kept


@dataclass(frozen=True)
class ReplaySettings(PerClassMemory):
    """``replay``'s."""

    @classmethod
    def grid_fixed_by(cls, values: Mapping[str, Any]) -> str | None:
        """``replay_per_class`` when it is set: the memory the grid varies is then fixed."""
        return "replay_per_class" if values.get("replay_per_class") else None


GRID = ({"replay_mem": 64}, {"replay_mem": 256}, {"replay_mem": 1024}, {"replay_mem": 16},
        {"replay_mem": 4096})


def build(ctx: BuildContext):
    """Avalanche's ``Replay`` with ``replay_mem`` rows, or its plugin with ``replay_per_class`` rows of every class."""
    from avalanche.training import Replay
    from avalanche.training.plugins import ReplayPlugin
    from avalanche.training.storage_policy import ClassBalancedBuffer
    from avalanche.training.templates import SupervisedTemplate

    if not ctx.settings.replay_per_class:
        return Replay(**ctx.template, plugins=ctx.plugins, mem_size=ctx.settings.replay_mem)
    policy = ClassBalancedBuffer(**per_class_buffer(ctx.settings, ctx.stream))
    return SupervisedTemplate(**ctx.template, plugins=[*ctx.plugins, ReplayPlugin(policy.max_size,
                                                                                  storage_policy=policy)])


ENTRY = StrategyEntry(name="replay", help="Avalanche Replay (memory of earlier rows; --replay-per-class: k of each "
                                          "class)",
                      stores=MODEL + " and the replay memory's rows (token ids or inputs)",
                      build=build, check=per_class_check("replay"), kept_bytes=replay_kept, settings=ReplaySettings,
                      grid=GRID, default=4)
