"""``replay``: Avalanche's ``Replay``, a class-balanced reservoir memory of earlier rows; it tunes its memory
size, as it always has."""
from __future__ import annotations

from dataclasses import dataclass

from ..interface.entry import StrategyEntry
from .common import MODEL, ReplayFamily, replay_kept, stock


@dataclass(frozen=True)
class ReplaySettings(ReplayFamily):
    """``replay``'s."""


GRID = ({"replay_mem": 64}, {"replay_mem": 256}, {"replay_mem": 1024}, {"replay_mem": 16},
        {"replay_mem": 4096})

ENTRY = StrategyEntry(name="replay", help="Avalanche Replay (reservoir memory of earlier rows)",
                      stores=MODEL + " and the replay memory's rows (token ids or inputs)",
                      build=stock("Replay", mem_size="replay_mem"), kept_bytes=replay_kept,
                      settings=ReplaySettings, grid=GRID, default=4)
