"""PackNet's entries in ``cl-graft run`` (:class:`~..interface.entry.StrategyEntry`; declared by the folder's
``__init__.py``): :class:`~.plugin.PackNetPlugin` on any model (Mallya & Lazebnik 2018), its released weights
back to θ_pre (``packnet``) or zeroed as published (``packnet-zero``). It keeps an owner map as graft does, so
it stores, routes and reports as graft does (:mod:`cl_graft.strategies.graft.entry`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cl_graft.errors import UserError

from ..graft.entry import region_field, region_kept_bytes, region_lines
from ..routing.rules import RegionRouting, class_scenario_rule
from ..graft.settings import RegionServing
from ..interface.entry import BuildContext, StrategyEntry

STORES = "each task's kept weights (a value and a gap-coded index per weight) and its head (no feature statistics)"

KEEP_GRID = ({"packnet_keep": 0.1}, {"packnet_keep": 0.3}, {"packnet_keep": None}, {"packnet_keep": 0.05},
             {"packnet_keep": 0.5})
"""Kept shares ``--tune`` tries, in order (None: an even split); the run's budget takes the first ones."""


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


def _packnet(release: str) -> Callable[[BuildContext], Any]:
    """A builder of :class:`~.plugin.PackNetPlugin` whose released elements become ``release``."""
    def build(ctx: BuildContext):
        from avalanche.training.templates import SupervisedTemplate

        from .plugin import PackNetPlugin

        settings: PackNetSettings = ctx.settings
        packnet = PackNetPlugin(steps=ctx.template["train_epochs"], prune_at=settings.packnet_prune_at,
                                keep=settings.packnet_keep, release=release, n_tasks=len(ctx.stream.tasks),
                                reconstruct=settings.reconstruct)
        packnet.task_inference = class_scenario_rule(ctx.scenario)
        return SupervisedTemplate(**ctx.template, plugins=[packnet, *ctx.plugins])

    return build


def _pruned(strategy) -> str:
    return "prune"


ENTRIES = (
    StrategyEntry(name="packnet", help="PackNet on any model: keep the largest free weights per task, release the "
                  "rest to θ_pre", stores=STORES, build=_packnet("pre"), kept_bytes=region_kept_bytes,
                  settings=PackNetSettings, grid=KEEP_GRID, routes=RegionRouting(),
                  phase_after_training=_pruned, report_lines=region_lines, progress_fields=region_field),
    StrategyEntry(name="packnet-zero", help="PackNet as published: released weights set to zero", stores=STORES,
                  build=_packnet("zero"), kept_bytes=region_kept_bytes, settings=PackNetSettings, grid=KEEP_GRID,
                  routes=RegionRouting(), phase_after_training=_pruned, report_lines=region_lines,
                  progress_fields=region_field),
)
