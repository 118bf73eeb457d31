"""``replay``: Avalanche's replay of earlier rows (``ReplayPlugin``). By default a memory of ``replay_mem`` rows
balanced over experiences (Avalanche's ``Replay``: ``ExperienceBalancedBuffer``, each experience's share drawn at
random from its rows), whose size it tunes, as it always has. With ``replay_per_class`` = k it keeps k rows of every
class seen (``ClassBalancedBuffer`` with a fixed share per class: k × the stream's classes at the end, drawn at
random within each class) and tunes nothing: the memory is the setting."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, StrategyEntry
from .common import MODEL, ReplayFamily, new_classes, replay_kept

PER_CLASS = "replay_per_class"


@dataclass(frozen=True)
class ReplaySettings(ReplayFamily):
    """``replay``'s."""

    replay_per_class: int = field(default=0, metadata={
        "help": "Replay: rows kept of every class seen (a class-balanced memory growing with the classes, not "
                "tuned); 0: replay_mem rows balanced over experiences."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replay_per_class < 0:
            raise UserError(f"replay_per_class must be >= 0, got {self.replay_per_class}")

    @classmethod
    def grid_fixed_by(cls, values: Mapping[str, Any]) -> str | None:
        """``replay_per_class`` when it is set: the memory the grid varies is then fixed."""
        return PER_CLASS if values.get(PER_CLASS) else None


GRID = ({"replay_mem": 64}, {"replay_mem": 256}, {"replay_mem": 1024}, {"replay_mem": 16},
        {"replay_mem": 4096})


def stream_classes(stream) -> int:
    """How many classes the stream's training experiences bring (the output classes of a class-incremental run)."""
    return len({int(c) for exp in stream.benchmark.train_stream for c in exp.classes_in_this_experience})


def check(settings: ReplaySettings, stream) -> None:
    """With ``replay_per_class``, a one-line refusal of a stream whose experiences share class ids (a task-list
    stream's labels, ``permuted-digits``): one class's rows would stand for several."""
    if settings.replay_per_class:
        new_classes("replay with --replay-per-class")(settings, stream)


def build(ctx: BuildContext):
    """Avalanche's ``Replay`` with ``replay_mem`` rows, or its plugin with ``replay_per_class`` rows of every class."""
    from avalanche.training import Replay
    from avalanche.training.plugins import ReplayPlugin
    from avalanche.training.storage_policy import ClassBalancedBuffer
    from avalanche.training.templates import SupervisedTemplate

    per_class = ctx.settings.replay_per_class
    if not per_class:
        return Replay(**ctx.template, plugins=ctx.plugins, mem_size=ctx.settings.replay_mem)
    classes = stream_classes(ctx.stream)
    policy = ClassBalancedBuffer(per_class * classes, adaptive_size=False, total_num_classes=classes)
    return SupervisedTemplate(**ctx.template, plugins=[*ctx.plugins, ReplayPlugin(policy.max_size,
                                                                                  storage_policy=policy)])


ENTRY = StrategyEntry(name="replay", help="Avalanche Replay (memory of earlier rows; --replay-per-class: k of each "
                                          "class)",
                      stores=MODEL + " and the replay memory's rows (token ids or inputs)",
                      build=build, check=check, kept_bytes=replay_kept, settings=ReplaySettings, grid=GRID, default=4)
