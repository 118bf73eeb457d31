"""``er-ace``: Avalanche's ER_ACE (Caccia et al. 2022): replay with an asymmetric cross-entropy; a
class-incremental method (one output layer shared by every class), on tensor rows (digits)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..interface.entry import StrategyEntry
from .common import CLASS, MODEL, OWN_LOADER, ReplayFamily, positive, replay_kept, stock, tensor_rows


@dataclass(frozen=True)
class ERACESettings(ReplayFamily):
    """``er-ace``'s."""

    er_ace_batch: int = field(default=10, metadata={"help": "ER-ACE: memory rows per training step."})

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("er_ace_batch", self.er_ace_batch)


GRID = ({"er_ace_batch": 10}, {"er_ace_batch": 32}, {"er_ace_batch": 64}, {"er_ace_batch": 16},
        {"er_ace_batch": 128})

ENTRY = StrategyEntry(
    name="er-ace", help="Avalanche ER_ACE (replay, asymmetric cross-entropy; --scenario class)",
    stores=MODEL + " and replay_mem rows",
    build=stock("ER_ACE", mem_size="replay_mem", batch_size_mem="er_ace_batch"),
    check=tensor_rows("er-ace", OWN_LOADER), kept_bytes=replay_kept, settings=ERACESettings, grid=GRID,
    scenarios=CLASS)
