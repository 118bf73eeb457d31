"""The stream-mode region search at the end of an experience: the experience as the finder's data, and γ_t found
among the free elements with every other free element reset to θ_pre (:class:`~.plugin.GraftPlugin` calls both).

θ_pre(t) is the model at the start of experience t: owned elements hold their tasks' values, free elements hold
θ_pre; θ_ft is the trained model. The finder (:class:`~.finders.RegionFinder`) sees both and the data; the
trained values are kept inside the region it returns (restricted to the free graftable elements).
"""
from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from cl_graft.regions.data import RegionData, TextRegionData
from cl_graft.regions.region import Region
from cl_graft.training.models import clone_model

from .experience_data import ExperienceData
from .finders import RegionFinder
from .owner_map import OwnerMap
from .targets import GraftTarget


def finder_data(strategy, target: GraftTarget, label: int, task: str, split: tuple | None,
                valid: Mapping[int, object]) -> RegionData:
    """The experience as the finder's data: text rows for a text classifier (answered by the task's head, or the
    one shared head), else Avalanche batches (with the
    strategy's criterion). ``split`` (training rows, held-out rows) when the plugin held rows out for the size
    search, else the experience's dataset and its ``valid`` experience's (by task label), if any."""
    dataset, held_out = split or (strategy.experience.dataset, valid.get(label))
    if target.task_names is not None:
        dev = [held_out[i] for i in range(len(held_out))] if held_out is not None else []
        return TextRegionData([dataset[i] for i in range(len(dataset))], dev, task=target.shared_head or task)
    return ExperienceData(dataset, criterion=strategy._criterion, held_out=held_out, task=task)


@torch.no_grad()
def start_model(root: torch.nn.Module, owners: OwnerMap, free: Region) -> torch.nn.Module:
    """θ_pre(t): a copy of ``root`` with its ``free`` elements at θ_pre (earlier tasks' elements as they are)."""
    pre = clone_model(root)
    params, pre_params = dict(root.named_parameters()), dict(pre.named_parameters())
    for n, m in free.masks.items():
        device = params[n].device
        pre_params[n].copy_(torch.where(m.to(device), owners.pre[n].to(device), params[n]))
    return pre


@torch.no_grad()
def localize_(target: GraftTarget, owners: OwnerMap, free: Region, data: RegionData,
              finder: RegionFinder) -> tuple[Region, float]:
    """Finds γ_t among the ``free`` elements of ``target``'s model (θ_ft, changed in place: every free element
    outside γ_t goes back to θ_pre); returns γ_t and the search's wall seconds. The model's train/eval mode is
    kept."""
    root = target.root
    was_training = target.model.training
    pre = start_model(root, owners, free)
    params, pre_params = dict(root.named_parameters()), dict(pre.named_parameters())
    t0 = time.perf_counter()
    with torch.enable_grad():
        region = finder(pre, root, data, names=owners.names, candidates=free)
    seconds = round(time.perf_counter() - t0, 3)
    region = region.restrict(owners.names) & free
    for n, m in (free - region).masks.items():
        params[n].copy_(torch.where(m.to(params[n].device), pre_params[n], params[n]))
    target.model.train(was_training)
    return region, seconds
