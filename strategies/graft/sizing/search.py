"""The size search's entry point (:class:`SizeSearch`): what :class:`~..plugin.GraftPlugin` calls, experience by
experience, to give each task its region, and what happens when a task cannot keep its target.

The plugin's region finder comes from its ``finder`` and ``region_size`` arguments (:func:`plugin_finder`); before
an experience trains, :meth:`SizeSearch.check` refuses a fixed ``region_size`` the free elements cannot hold; after
it trained, an automatic size gets this task's allowance of every tensor's free elements
(:func:`experience_finder`) and the chosen size is recorded, logged, and warned about or refused
(:func:`record_size_`, ``RegionSize.on_full``). The steps are drawn in the package docstring.
"""
from __future__ import annotations

import logging
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import replace

import torch

from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.problem import resolve_elements
from cl_graft.regions.region import Region

from ..finders import LocalizeFinder, RegionFinder
from ..owner_map import OwnerMap
from ..region_search import finder_data, localize_
from ..targets import GraftTarget
from .finder import SizedFinder
from .records import chance_message, full_message, size_line
from .retrain import RegionRetrain, planned_steps
from .rules import CapacityWarning, RegionSize

log = logging.getLogger(__name__)


def plugin_finder(finder: RegionFinder | None, region_size: RegionSize | float | None) -> RegionFinder:
    """The plugin's finder from its ``finder`` and ``region_size`` arguments (see :class:`~..plugin.GraftPlugin`)."""
    if isinstance(region_size, RegionSize):
        return SizedFinder(finder or LocalizeFinder(), region_size)
    if region_size is None:
        return finder if finder is not None else SizedFinder()
    if finder is not None:
        raise UserError("give a fixed region size either as region_size= or in the finder's LocalizeConfig, not both")
    if isinstance(region_size, bool) or not isinstance(region_size, numbers.Real) or not 0 < region_size <= 1:
        raise UserError(f"region_size must be a RegionSize, a share in (0, 1] or None, got {region_size!r}")
    return LocalizeFinder(config=LocalizeConfig(region_size=float(region_size)))


def experience_finder(finder: RegionFinder, experience, *, done: int) -> RegionFinder:
    """The finder of this experience: an automatic size gets its allowance, the share of each tensor's free
    elements this task may take (:meth:`~.rules.RegionSize.allowance`, planning for ``expected_tasks``, else the
    length of the stream the experience comes from, Avalanche's ``origin_stream``, else open-ended); ``done``
    tasks were learned before it."""
    if not isinstance(finder, SizedFinder):
        return finder
    stream = getattr(experience, "origin_stream", None)
    length = len(stream) if stream is not None else None
    return replace(finder, allowance=finder.region_size.allowance(done, length))


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
        message = full_message(task, record)
        advice = ("--expected-tasks or a larger --tolerance (RegionSize expected_tasks=, tolerance=, or a larger "
                  "ladder)")
    elif not record.get("above_chance", True):
        message = chance_message(task, record)
        advice = "more free elements (--expected-tasks, RegionSize expected_tasks=) or more training"
    else:
        return
    if isinstance(finder, SizedFinder) and finder.region_size.on_full == "error":
        params = dict(root.named_parameters())
        for n, m in region.masks.items():
            params[n].copy_(torch.where(m.to(params[n].device), owners.pre[n].to(params[n].device), params[n]))
        raise UserError(f"{message}; give {advice}")
    warnings.warn(message, CapacityWarning, stacklevel=4)


class SizeSearch:
    """Each task's region in stream mode, sized per task or fixed: one per plugin, called at five points of an
    experience (see the package docstring).

    Args:
        finder: the region finder (None: the learned region); region_size: a :class:`RegionSize` (searched per
            task), a fixed share of the graftable elements, or None (searched, unless ``finder`` is given: its own
            fixed size).

    Attributes:
        finder: the finder every experience starts from (a :class:`SizedFinder` when sizes are searched).
    """

    def __init__(self, *, finder: RegionFinder | None, region_size: RegionSize | float | None) -> None:
        self.finder: RegionFinder = plugin_finder(finder, region_size)
        self._split: tuple | None = None                  # (training rows, held-out rows) of this experience
        self._retrain: RegionRetrain | None = None        # this experience's retraining (retrain > 0)

    @property
    def searched(self) -> bool:
        """Whether each task's size is searched (else fixed by the finder's config)."""
        return isinstance(self.finder, SizedFinder)

    def check(self, owners: OwnerMap) -> None:
        """Before an experience: refuses a fixed ``region_size`` larger than the free elements, or (searched size)
        no free element at all."""
        free = owners.free()
        if self.searched:
            if free.size == 0:
                raise UserError(f"no free graftable element is left for another task ({len(owners.tasks)} "
                                f"tasks own them all); plan with --expected-tasks (RegionSize expected_tasks=)")
            return
        cfg = getattr(self.finder, "config", None)
        if cfg is None:
            return
        numel = sum(o.numel() for o in owners.owner.values())
        elements = resolve_elements(cfg, numel)
        if elements > free.size:
            raise UserError(f"a region of {elements} elements is larger than the {free.size} free graftable "
                            f"elements; lower --region-size")

    def hold_out_(self, strategy, label: int, valid: Mapping[int, object]) -> None:
        """After the experience's dataset adaptation: with a searched size and no ``valid`` experience for task
        ``label``, holds out :meth:`~.rules.RegionSize.split` of its training examples (``strategy.adapted_dataset``
        becomes the rest, IN PLACE); the size is chosen on the held-out rows."""
        self._split = None
        if not self.searched:
            return
        dataset = strategy.experience.dataset
        if label in valid:
            self._split = (dataset, valid[label])
            return
        train, held = self.finder.region_size.split(len(dataset), seed=self.finder.config.seed, label=label)
        strategy.adapted_dataset = strategy.adapted_dataset.subset(train)
        self._split = (dataset.subset(train), dataset.subset(held))

    def rows(self) -> tuple | None:
        """This experience's ``(training rows, held-out rows)`` datasets while the size is searched (from
        :meth:`hold_out_` until :meth:`region_`), else None."""
        return self._split

    def begin(self, strategy, *, done: int) -> None:
        """Before the experience trains (``done`` tasks learned): plans its retraining, if any."""
        self._retrain = None
        if self.searched and self.finder.region_size.retrain > 0:
            self._retrain = RegionRetrain(experience_finder(self.finder, strategy.experience, done=done),
                                          planned_steps(strategy))

    def tick(self) -> bool:
        """After each optimizer step: counts it; True when the retraining switch is due (then :meth:`switch_`)."""
        return self._retrain is not None and self._retrain.tick()

    def switch_(self, strategy, target: GraftTarget, owners: OwnerMap, label: int, task: str,
                valid: Mapping[int, object]) -> Region:
        """At the retraining switch: grafts the model (IN PLACE) and returns the region that alone trains from now
        on (with the task's head)."""
        data = finder_data(strategy, target, label, task, self._split, valid)
        return self._retrain.switch_(target, owners, owners.free(), data, label, task)

    def region_(self, strategy, target: GraftTarget, owners: OwnerMap, label: int, task: str,
                valid: Mapping[int, object]) -> tuple[Region, float]:
        """After the experience trained: task ``task``'s region among the free elements (the model's other free
        elements back to θ_pre, IN PLACE), recorded and checked; returns it and the search's wall seconds."""
        free = owners.free()
        if self._retrain is not None and self._retrain.switched:          # its region and values are chosen
            region = self._retrain.finish_(target).restrict(owners.names) & free
            seconds = round(self._retrain.seconds, 3)
        else:
            finder = experience_finder(self.finder, strategy.experience, done=len(owners.tasks))
            data = finder_data(strategy, target, label, task, self._split, valid)
            region, seconds = localize_(target, owners, free, data, finder)
        self.end()
        record_size_(self.finder, target.root, owners, task, free, region)
        return region, seconds

    def end(self) -> None:
        """Forgets the experience's held-out split and retraining (done, or failed and undone)."""
        self._split, self._retrain = None, None
