"""A PackNet baseline that works on transformers (Mallya & Lazebnik 2018, https://arxiv.org/abs/1711.05769).

Avalanche's ``PackNetModel`` wraps only Linear/Conv layers and refuses BERT's Embedding and LayerNorm. This
plugin applies PackNet's recipe to the graftable tensors of any model
(:mod:`~cl_graft.strategies.graft.targets`), with the owner-map machinery of grafting (one owner byte per
element):

1. experience t trains the free elements (not owned by an earlier task) and the task's head;
2. after ``prune_at`` of its steps, it keeps the largest-|w| fraction ``keep`` of the free elements for task
   t, **releases** the other free elements for later tasks, and trains only the kept ones for the remaining
   steps (post-prune fine-tuning);
3. the kept elements are frozen (bit-exact) and owned by task t; task i is evaluated with the elements of
   tasks ≤ i and released values elsewhere.

Released elements return to θ_pre (``release="pre"``, the default: the fair variant for a pre-trained encoder,
whose weights are knowledge rather than an init) or to zero (``release="zero"``, PackNet's original recipe for
models trained from scratch, which wipes most of a pre-trained encoder after the first task). It differs from
grafting (:class:`~cl_graft.strategies.graft.plugin.GraftPlugin`) in what a task keeps: its largest weights
rather than a learned/largest-change region. ``keep=None`` splits the capacity evenly: task t keeps
``1 / (T − t)`` of the free elements, T = the adapter's number of tasks (``n_tasks`` for other models), so the last
task takes everything left.
"""
from __future__ import annotations

import torch

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.regions.region import Region
from cl_graft.training.freeze import ElementFreeze

from ..graft.owner_map import OwnerMap
from ..graft.plugin import GraftPlugin
from ..graft.targets import Graftable, HeadNames

RELEASE = ("pre", "zero")


class PackNetPlugin(GraftPlugin, supports_distributed=True):
    """PackNet on the graftable tensors; evaluation and storage as in :class:`GraftPlugin`.

    Args:
        steps: optimizer steps per experience (the pruning step is ``round(prune_at · steps)``).
        prune_at: fraction of the steps trained before pruning (1.0 = prune at the end, no retraining).
        keep: fraction of the free elements each task keeps (None = even split, see the module docstring).
        release: what released elements become: ``"pre"`` (θ_pre) or ``"zero"``.
        n_tasks: the stream's length, for the even split of a model that is not a ``TaskAdapter``.
        reconstruct, graftable, heads, guard: as for :class:`GraftPlugin`.
    """

    def __init__(self, *, steps: int, prune_at: float = 0.75, keep: float | None = None, release: str = "pre",
                 n_tasks: int | None = None, reconstruct: str = "experience", graftable: Graftable = None,
                 heads: HeadNames | None = None, guard: bool = True) -> None:
        super().__init__(reconstruct=reconstruct, graftable=graftable, heads=heads, guard=guard)
        if not 0 < prune_at <= 1 or (keep is not None and not 0 < keep <= 1):
            raise UserError(f"prune_at and keep must be in (0, 1], got {prune_at} and {keep}")
        if release not in RELEASE:
            raise UserError(f"release must be one of {RELEASE}, got {release!r}")
        self.release = release
        self.prune_step, self.keep, self.n_tasks = max(1, round(prune_at * steps)), keep, n_tasks
        self._done = 0
        self._kept: Region | None = None

    def before_train_dataset_adaptation(self, strategy, **kwargs) -> None:
        if self.owners is None and self.release == "zero":   # the map's "pre" values: what released elements become
            target = self.target(strategy)
            params = dict(target.root.named_parameters())
            self.owners = OwnerMap({n: torch.zeros_like(params[n]) for n in target.names()})
        super().before_train_dataset_adaptation(strategy, **kwargs)

    def before_training_exp(self, strategy, **kwargs) -> None:
        super().before_training_exp(strategy, **kwargs)
        self._done, self._kept = 0, None

    def _check_budget(self, free: Region) -> None:
        """PackNet keeps a share of the free elements, not a finder's budget: nothing to check."""

    def after_training_iteration(self, strategy, **kwargs) -> None:
        self._done += 1
        if self._done == self.prune_step:
            self._prune(strategy)

    def after_training_exp(self, strategy, **kwargs) -> None:
        if self._kept is None:
            self._prune(strategy)
        self._freeze.end_(strategy.optimizer)
        self._freeze = None
        target = self.target(strategy)
        label, task = self._task(target, strategy.experience)
        self.owners.add_(target.root, task, self._kept, head_names=target.heads(label))
        self._fit_features(strategy, target, label, task, *self.experience_rows(strategy, label))
        strategy.model.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _prune(self, strategy) -> None:
        """Keeps the largest free weights for this task, releases the other free ones, retrains only the kept."""
        target, owners = self.target(strategy), self.owners
        params = dict(target.root.named_parameters())
        free = owners.free()
        n_tasks = len(target.task_names) if target.task_names is not None else self.n_tasks
        if self.keep is None and n_tasks is None:
            raise UserError("PackNet needs keep= or n_tasks= (the stream's length) for a model that is not a "
                            "TaskAdapter")
        keep = self.keep if self.keep is not None else 1 / max(1, n_tasks - len(owners.tasks))
        scores = {n: torch.where(m.to(params[n].device), params[n].abs(), -1.0) for n, m in free.masks.items()}
        kept = ops.topk_mask(scores, round(keep * free.size), absolute=False)
        self._kept = Region.adopt({n: m.cpu() for n, m in kept.items()}, {"method": "packnet", "keep": keep}) & free
        for n, m in (free - self._kept).masks.items():
            device = params[n].device
            params[n].copy_(torch.where(m.to(device), owners.pre[n].to(device), params[n]))
        label, _ = self._task(target, strategy.experience)
        self._freeze.end_(strategy.optimizer)
        trainable: dict = dict(self._kept.masks)
        trainable.update({n: None for n in target.heads(label)})
        self._freeze = ElementFreeze(params, trainable, guard=self.guard)
        self._freeze.begin_(strategy.optimizer)
