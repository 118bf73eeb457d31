"""Where task regions come from in continual grafting (Panigrahi et al. 2023, §5.2).

- :class:`LocalizeFinder` — the default region finder of the stream mode: any method of
  :data:`cl_graft.regions.methods.REGION_METHODS` (``graft`` = the learned region of Eq. 3) run on the model
  before and after an experience, restricted to the still-free elements.
- :func:`independent_regions` — the paper's mode: each task's region found up front by fine-tuning a copy of
  the pre-trained model on that task alone and localizing its skill (text rows);
  :func:`experience_regions` — the same for any model and Avalanche experiences (the copy is trained by a
  callable, e.g. Avalanche's ``Naive``, and the region found on :class:`~.experience_data.ExperienceData`).

A finder is any callable ``finder(pre, ft, data, *, names, candidates) -> Region`` (see :class:`RegionFinder`)
with ``data`` a :class:`~cl_graft.regions.data.RegionData` (text rows, or an Avalanche experience with the
strategy's criterion and forward: :class:`~.experience_data.ExperienceData`); it must return a region over
``names`` inside ``candidates``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from torch import nn

from cl_graft.errors import UserError
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.data import RegionData, TextRegionData
from cl_graft.regions.methods import REGION_METHODS, find_region
from cl_graft.regions.region import Region, graftable_names
from cl_graft.training.finetune import FinetuneConfig, finetune_
from cl_graft.training.models import TextClassifier, clone_model

from .experience_data import ExperienceData
from .targets import Graftable, HeadNames, graft_target


class RegionFinder(Protocol):
    """Finds a task's region given θ_pre (``pre``), the trained model (``ft``; any modules) and the task's data."""

    def __call__(self, pre: nn.Module, ft: nn.Module, data: RegionData, *, names: list[str],
                 candidates: Region | None) -> Region: ...


@dataclass(frozen=True)
class LocalizeFinder:
    """A :data:`~cl_graft.regions.methods.REGION_METHODS` method with one :class:`LocalizeConfig`.

    Attributes:
        method: ``graft`` (learned, default), ``topk``, ``random``, ``fish``, …
        config: region_size (a share of all graftable elements N) or region_elements, steps, lr, seed, …
        progress: show the finder's progress bar.
    """

    method: str = "graft"
    config: LocalizeConfig = field(default_factory=LocalizeConfig)
    progress: bool = False

    def __post_init__(self) -> None:
        if self.method not in REGION_METHODS:
            raise UserError(f"unknown region method {self.method!r}; choose from {', '.join(REGION_METHODS)}")

    def __call__(self, pre: nn.Module, ft: nn.Module, data: RegionData, *, names: list[str],
                 candidates: Region | None) -> Region:
        return find_region(self.method, pre, ft, data, [], self.config, names=names, candidates=candidates,
                           progress=self.progress).region

    def to_json(self) -> dict:
        return {"method": self.method, "config": self.config.to_json()}


def independent_regions(model: TextClassifier, data: Mapping[str, tuple[list[dict], list[dict]]],
                        recipe: FinetuneConfig, finder: RegionFinder, *, names: Sequence[str] | None = None,
                        progress: bool = True) -> dict[str, Region]:
    """The paper's continual mode, step 1: for each task, fine-tune a copy of ``model`` on it alone and find
    its region against ``model`` (θ_pre). ``model`` is not modified.

    Args:
        model: the pre-trained classifier with every task of ``data`` registered (heads at their init).
        data: task → (train rows, dev rows).
        recipe: the fine-tuning recipe of each independent run.
        finder: the region finder.
        names: graftable tensors (default: those inside the transformer layers).
        progress: show progress bars.

    Returns:
        task → region over ``names`` (regions of different tasks may overlap; the stream resolves that).
    """
    names = list(names) if names is not None else graftable_names(model.named_parameters())
    out = {}
    for task, (train, dev) in data.items():
        ft = clone_model(model)
        finetune_(ft, train, dev, recipe, task=task, progress=progress)
        out[task] = finder(model, ft, TextRegionData(train, dev, task=task), names=names, candidates=None)
    return out


def experience_regions(model: nn.Module, experiences: Sequence, train: Callable[[nn.Module, object], None],
                       finder: RegionFinder, *, criterion: Callable | None = None, graftable: Graftable = None,
                       heads: HeadNames | None = None, valid_stream: Sequence | None = None) -> dict[str, Region]:
    """The paper's mode, step 1, for any model: for each experience, train a copy of ``model`` on it alone with
    ``train(copy, experience)`` (e.g. ``lambda m, e: Naive(model=m, optimizer=SGD(m.parameters(), 0.05)).train(e)``)
    and find its region against ``model`` (θ_pre) with the copy's loss on the experience. ``model`` is not
    modified.

    Returns:
        task name (``str(task_label)``, or the adapter's task name) → region over the graftable tensors.
    """
    target = graft_target(model, graftable=graftable, heads=heads)
    if target.task_names is not None:
        raise UserError("experience_regions: use independent_regions for a TaskAdapter (text rows)")
    names = target.names()
    held_out = {int(e.task_labels[0]): e.dataset for e in (valid_stream or [])}
    out = {}
    for exp in experiences:
        labels = list(exp.task_labels)
        if len(labels) != 1:
            raise UserError(f"grafting trains one task per experience, this one has task labels {labels}")
        ft = clone_model(model)
        train(ft, exp)
        data = ExperienceData(exp.dataset, criterion=criterion or nn.CrossEntropyLoss(),
                              held_out=held_out.get(int(labels[0])), task=target.task(int(labels[0])))
        ft_root = graft_target(ft, graftable=graftable, heads=heads).root
        out[data.task] = finder(target.root, ft_root, data, names=names, candidates=None)
    return out
