"""How much of the graftable elements each task may take, and what happens when a task cannot keep its target.

The plugin's region finder comes from its ``finder`` and ``size`` arguments (:func:`plugin_finder`); before an
experience trains, :func:`check_budget` refuses a budget the free elements cannot hold; after it trained, an
automatic size gets this task's allowance of every tensor's free elements (:func:`experience_finder`) and the chosen
size is recorded, logged, and warned about or refused (:func:`record_size_`, ``RegionSize.on_full``). The sizing
rules themselves live in :mod:`.sizing`.
"""
from __future__ import annotations

import logging
import numbers
import warnings
from dataclasses import replace

import torch

from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.problem import resolve_budget
from cl_graft.regions.region import Region

from .finders import LocalizeFinder, RegionFinder
from .owner_map import OwnerMap
from .sizing import CapacityWarning, RegionSize, SizedFinder, chance_message, full_message, size_line

log = logging.getLogger(__name__)


def plugin_finder(finder: RegionFinder | None, size: RegionSize | float | None) -> RegionFinder:
    """The plugin's finder from its ``finder`` and ``size`` arguments (see :class:`~.plugin.GraftPlugin`)."""
    if isinstance(size, RegionSize):
        return SizedFinder(finder or LocalizeFinder(), size)
    if size is None:
        return finder if finder is not None else SizedFinder()
    if finder is not None:
        raise UserError("give a fixed size either as size= or in the finder's LocalizeConfig, not both")
    if isinstance(size, bool) or not isinstance(size, numbers.Real) or not 0 < size <= 1:
        raise UserError(f"size must be a RegionSize, a share in (0, 1] or None, got {size!r}")
    return LocalizeFinder(config=LocalizeConfig(sparsity=float(size)))


def check_budget(finder: RegionFinder, owners: OwnerMap, free: Region) -> None:
    """Refuses a finder budget larger than the free elements, or (automatic size) no free element at all,
    before anything trains."""
    if isinstance(finder, SizedFinder):
        if free.size == 0:
            raise UserError(f"no free graftable element is left for another task ({len(owners.tasks)} "
                            f"tasks own them all); plan with RegionSize(expected_tasks=...)")
        return
    cfg = getattr(finder, "config", None)
    if cfg is None:
        return
    numel = sum(o.numel() for o in owners.owner.values())
    budget = resolve_budget(cfg, numel)
    if budget > free.size:
        raise UserError(f"region budget {budget} is larger than the {free.size} free graftable elements; "
                        f"lower --region-size")


def experience_finder(finder: RegionFinder, experience, *, done: int) -> RegionFinder:
    """The finder of this experience: an automatic size gets its allowance, the share of each tensor's free
    elements this task may take (:meth:`~.sizing.RegionSize.allowance`, planning for ``expected_tasks``, else the
    length of the stream the experience comes from, Avalanche's ``origin_stream``, else open-ended); ``done``
    tasks were learned before it."""
    if not isinstance(finder, SizedFinder):
        return finder
    stream = getattr(experience, "origin_stream", None)
    length = len(stream) if stream is not None else None
    return replace(finder, allowance=finder.size.allowance(done, length))


@torch.no_grad()
def record_size_(finder: RegionFinder, root: torch.nn.Module, owners: OwnerMap, task: str, free: Region,
                 region: Region) -> None:
    """Adds the free share left to the region's size record and logs one line; warns (or, with
    ``on_full="error"``, puts the task's region of ``root`` back to θ_pre, in place, and raises) when the size
    missed its target, or when the grafted model keeps its trained model's score but that is not surely above
    chance (a task that trained in too few free elements)."""
    record = region.meta.setdefault("sizing", {"share": region.size / free.numel})
    record["free"] = (free.size - region.size) / free.numel
    log.info(size_line(task, record))
    if not record.get("met", True):
        message, advice = full_message(task, record), "expected_tasks=, a larger ladder or a larger tolerance"
    elif not record.get("above_chance", True):
        message, advice = chance_message(task, record), "more free elements (expected_tasks=) or more training"
    else:
        return
    if isinstance(finder, SizedFinder) and finder.size.on_full == "error":
        params = dict(root.named_parameters())
        for n, m in region.masks.items():
            params[n].copy_(torch.where(m.to(params[n].device), owners.pre[n].to(params[n].device), params[n]))
        raise UserError(f"{message}; give {advice}")
    warnings.warn(message, CapacityWarning, stacklevel=3)
