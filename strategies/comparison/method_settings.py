"""The settings of Avalanche's stock strategies in ``cl-graft run`` (EWC, LwF, Replay): one small frozen dataclass
each (as peft's per-method configs), with their ``--tune`` grids; their entries are in :mod:`.registry`. The
strategies of this project keep theirs beside their method (``strategies/graft/settings.py``,
``strategies/plugins/packnet_entry.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError
from cl_graft.presets import Preset

from .settings import Settings


@dataclass(frozen=True)
class EWCSettings(Settings):
    """``ewc``'s."""

    ewc_lambda: float = field(default=1e4, metadata={"help": "EWC penalty weight (tune with --tune)."})


@dataclass(frozen=True)
class LwFSettings(Settings):
    """``lwf``'s (Avalanche's defaults)."""

    lwf_alpha: float = field(default=1.0, metadata={"help": "LwF distillation weight."})
    lwf_temperature: float = field(default=2.0, metadata={"help": "LwF softmax temperature."})


@dataclass(frozen=True)
class ReplaySettings(Settings):
    """``replay``'s."""

    replay_mem: int = field(default=256, metadata={"help": "Replay memory size in rows.", "preset": True})

    def __post_init__(self) -> None:
        if self.replay_mem < 1:
            raise UserError(f"replay_mem must be >= 1, got {self.replay_mem}")

    @classmethod
    def from_preset(cls, preset: Preset, *, seed: int) -> ReplaySettings:
        return cls(replay_mem=preset.continual.replay_mem)


EWC_GRID = ({"ewc_lambda": 1e2}, {"ewc_lambda": 1e3}, {"ewc_lambda": 1e4}, {"ewc_lambda": 1e1}, {"ewc_lambda": 1e5})
LWF_GRID = ({"lwf_alpha": 0.5, "lwf_temperature": 2.0}, {"lwf_alpha": 1.0, "lwf_temperature": 2.0},
            {"lwf_alpha": 1.0, "lwf_temperature": 1.0}, {"lwf_alpha": 2.0, "lwf_temperature": 2.0},
            {"lwf_alpha": 0.5, "lwf_temperature": 1.0})
REPLAY_GRID = ({"replay_mem": 64}, {"replay_mem": 256}, {"replay_mem": 1024}, {"replay_mem": 16},
               {"replay_mem": 4096})
"""Candidate points ``--tune`` tries, in order: the run's budget takes the first ones."""
