"""The settings of each strategy ``cl-graft run`` compares: one small frozen dataclass per kind (as peft's
per-method configs), with the ``--tune`` grids of those that have one; :mod:`.registry` pairs them with their
strategies, :mod:`.settings` turns their fields into options, grid points and records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from cl_graft.errors import UserError
from cl_graft.presets import Preset
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.methods import REGION_METHODS

from ..graft.sizing import RegionSize
from .settings import Settings

RECONSTRUCT = ("experience", "minibatch", "all")


@dataclass(frozen=True)
class RegionServing(Settings):
    """How a strategy that keeps one region per task (an owner map) serves its tasks at evaluation."""

    reconstruct: str = field(default="experience", metadata={
        "help": "How evaluation rebuilds a task's model: per experience, per minibatch, or all regions at once."})

    def __post_init__(self) -> None:
        if self.reconstruct not in RECONSTRUCT:
            raise UserError(f"reconstruct must be experience, minibatch or all, got {self.reconstruct!r}")


def parse_size(value) -> RegionSize | float:
    """A region size setting: a :class:`~..graft.sizing.RegionSize` (``"auto"``: its defaults) or a fixed share
    in (0, 1] (a number or its text).

    Raises:
        UserError: anything else.
    """
    if isinstance(value, RegionSize):
        return value
    if isinstance(value, str) and value.strip().lower() == "auto":
        return RegionSize()
    try:
        share = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        share = math.nan
    if not 0 < share <= 1:
        raise UserError(f"region size must be auto or a share in (0, 1], got {value!r}")
    return share


@dataclass(frozen=True)
class GraftSettings(RegionServing):
    """``graft``'s and ``graft-paper``'s (and the region size ``replay-matched`` matches)."""

    method: str = field(default="graft", metadata={
        "help": "Region method of graft (cl_graft.regions.methods; graft = learned, Eq. 3)."})
    size: RegionSize | float = field(default_factory=RegionSize, metadata={
        "name": "region_size", "help": "Each task's region size: auto (the smallest its dev rows vouch for, "
        "cl_graft.strategies.graft.sizing) or a fixed share of the graftable parameters, e.g. 0.01.",
        "options": {"tolerance": "With --region-size auto: accuracy (a share) a task's graft may lose against its "
                                 "trained model on dev rows.",
                    "confidence": "With --region-size auto: the level of that statement.",
                    "expected_tasks": "With --region-size auto: the stream length to plan capacity for (default: "
                                      "the stream's).",
                    "reserve": "With --region-size auto: tasks' shares kept free after the last expected task."}})
    localize: LocalizeConfig = field(default_factory=LocalizeConfig, metadata={
        "help": "region finding after each experience", "preset": True, "options": {}})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method not in REGION_METHODS:
            raise UserError(f"unknown region method {self.method!r}; choose from {', '.join(REGION_METHODS)}")
        object.__setattr__(self, "size", parse_size(self.size))

    @classmethod
    def from_preset(cls, preset: Preset, *, seed: int) -> GraftSettings:
        return cls(localize=replace(preset.continual.localize, seed=seed))


@dataclass(frozen=True)
class PackNetSettings(RegionServing):
    """``packnet``'s and ``packnet-zero``'s."""

    packnet_prune_at: float = field(default=0.75, metadata={"help": "PackNet prunes after this share of steps."})
    packnet_keep: float | None = field(default=None, metadata={
        "help": "PackNet's kept share of the free weights per task (default: an even split)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.packnet_prune_at <= 1 or (self.packnet_keep is not None and not 0 < self.packnet_keep <= 1):
            raise UserError(f"packnet_prune_at and packnet_keep must be in (0, 1], got {self.packnet_prune_at} "
                            f"and {self.packnet_keep}")


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


SIZE_GRID = ({"size": "auto"}, {"size": 0.01}, {"size": 0.1})
KEEP_GRID = ({"packnet_keep": 0.1}, {"packnet_keep": 0.3}, {"packnet_keep": None})
