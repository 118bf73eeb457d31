"""Graft's settings in ``cl-graft run`` (its entry is :mod:`.entry`): the region method, each task's region size
and how evaluation serves the tasks, with the grid ``--tune`` tries. :class:`RegionServing` is shared with the
other strategy that keeps one region per task (PackNet, :mod:`cl_graft.strategies.packnet.entry`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from cl_graft.errors import UserError
from cl_graft.presets import Preset
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.methods import REGION_METHODS

from ..interface.settings import Settings
from ..routing.class_heads import candidates, check_answer
from .sizing import RegionSize

RECONSTRUCT = ("experience", "minibatch", "all")
"""The plugin's evaluation modes (:class:`~.plugin.GraftPlugin`'s ``reconstruct``), checked when settings are
made rather than when the plugin is built after earlier strategies ran."""

SIZE_GRID = ({"region_size": "auto"}, {"region_size": 0.01}, {"region_size": 0.1}, {"region_size": 0.05},
             {"region_size": 0.001})
"""Region sizes ``--tune`` tries, in order: the run's budget takes the first ones."""


@dataclass(frozen=True)
class RegionServing(Settings):
    """How a strategy that keeps one region per task (an owner map) serves its tasks at evaluation."""

    reconstruct: str = field(default="experience", metadata={
        "help": "How evaluation rebuilds a task's model: per experience, per minibatch, or all regions at once."})

    def __post_init__(self) -> None:
        if self.reconstruct not in RECONSTRUCT:
            raise UserError(f"reconstruct must be experience, minibatch or all, got {self.reconstruct!r}")


def parse_region_size(value) -> RegionSize | float:
    """A region size setting: a :class:`~.sizing.RegionSize` (``"auto"``: its defaults) or a fixed share in
    (0, 1] (a number or its text).

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
    """``graft``'s and ``graft-paper``'s."""

    method: str = field(default="graft", metadata={
        "help": "Region method of graft (cl_graft.regions.methods; graft = learned, Eq. 3)."})
    region_size: RegionSize | float = field(default_factory=RegionSize, metadata={
        "name": "region_size", "shown": "auto", "help": "Each task's region size: auto (the smallest its dev rows "
        "vouch for, cl_graft.strategies.graft.sizing) or a fixed share of the graftable parameters, e.g. 0.01.",
        "options": {"tolerance": "With --region-size auto: accuracy (a share) a task's graft may lose against its "
                                 "trained model on dev rows.",
                    "confidence": "With --region-size auto: the level of that statement.",
                    "expected_tasks": "With --region-size auto: the stream length to plan capacity for (default: "
                                      "the stream's).",
                    "plan": "With --region-size auto: stream (plan for the stream's length) or open (as if it were "
                            "unknown: a doubling plan).",
                    "reserve": "With --region-size auto: tasks' shares kept free after the last expected task.",
                    "retrain": "With --region-size auto: share of each experience's steps spent retraining a "
                               "smaller region, kept if it scores as well on dev rows (0: off).",
                    "shrink": "With --region-size auto: rungs below the vouched size that the retrained region "
                              "is.",
                    "rows": "With --region-size auto: held-out rows, and as many training inputs, scored per "
                            "size tried (fewer: a faster search that vouches for less).",
                    "refine": "With --region-size auto: also learn the region (the --method) at the chosen size "
                              "and keep it where it scores higher on dev rows (false: the rung's top-|Δ| "
                              "region, faster).",
                    "precision": "With --region-size auto: number format of the size search's passes and the "
                                 "refinement: auto (bfloat16 products where the device computes them natively "
                                 "and the model has a million graftable elements or more, else float32), float32 "
                                 "or bfloat16."}})
    localize: LocalizeConfig = field(default_factory=LocalizeConfig, metadata={
        "help": "region finding after each experience", "preset": True, "options": {}})
    router: str = field(default="auto", metadata={
        "help": "Class scenario: the closed-form head over θ_pre features that routes rows: auto (the one that "
                "sends the most dev rows to their experience; ranpac only on a model with at least its sums' "
                "floats), lda or ranpac (cl_graft.strategies.routing)."})
    answer: str = field(default="auto", metadata={
        "help": "Class scenario: who answers a routed row: routed (the experience's grafted model), head (the "
                "router's head) or auto (whichever answered more dev rows right)."})
    trained_test: bool = field(default=False, metadata={
        "help": "Also score each task's trained model on its test rows before its region is chosen "
                "(sizing.trained_test: whether the size search's promise held on test rows; one test pass per "
                "task, which no choice reads)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method not in REGION_METHODS:
            raise UserError(f"unknown region method {self.method!r}; choose from {', '.join(REGION_METHODS)}")
        object.__setattr__(self, "region_size", parse_region_size(self.region_size))
        candidates(self.router), check_answer(self.answer)
        if not isinstance(self.trained_test, bool):
            raise UserError(f"trained_test must be true or false, got {self.trained_test!r}")

    @classmethod
    def from_preset(cls, preset: Preset, *, seed: int) -> GraftSettings:
        return cls(localize=replace(preset.continual.localize, seed=seed))

    def batch_sizes(self) -> dict[str, int]:
        return {"localization batch size": self.localize.batch_size}

    def localize_config(self) -> LocalizeConfig:
        """The region search's settings: with a fixed size, its region_size is that size."""
        return self.localize if isinstance(self.region_size, RegionSize) else \
            replace(self.localize, region_size=self.region_size)
