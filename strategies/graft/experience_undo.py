"""Undo a failed experience: the model, the optimizer and the owner map as they were before it started.

A continual-learning experience that fails half-way (a diverged loss, NaN inputs, a region search that stops)
would leave the free elements trained, the optimizer's state and hyper-parameters changed (element freezing sets
weight decay to 0 for the experience) and, if the failure comes after the region was recorded, a task in the owner
map. :class:`ExperienceUndo` takes a snapshot at the start of the experience and :meth:`ExperienceUndo.restore_`
puts all of it back, so the strategy can go on with the next experience, be evaluated or be saved.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from .owner_map import OwnerMap


class ExperienceUndo:
    """A snapshot of ``model`` (parameters and buffers), ``optimizer`` (state and param groups) and the number of
    tasks in ``owners``. Costs one copy of the model's tensors (on their device) and of the optimizer state."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, owners: OwnerMap | None) -> None:
        self.model, self.optimizer = model, optimizer
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.optimizer_state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
        self.tasks = len(owners.tasks) if owners is not None else 0

    @torch.no_grad()
    def restore_(self, owners: OwnerMap | None) -> None:
        """Puts the snapshot back IN PLACE and drops the tasks ``owners`` recorded since it was taken."""
        self.model.load_state_dict(self.state)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self.optimizer_state)
        while owners is not None and len(owners.tasks) > self.tasks:
            code, task = len(owners.tasks), owners.tasks.pop()
            owners.patches.pop()
            owners.features.pop(task, None)
            for o in owners.owner.values():
                o[o == code] = 0

