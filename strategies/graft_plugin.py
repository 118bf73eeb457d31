"""GraftPlugin: forget-free continual learning by grafting, for any Avalanche ``SupervisedTemplate``.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models", ICML 2023
(https://arxiv.org/abs/2302.06600), §5.2. Each task ends up owning a small region γ_t of the graftable
parameters; regions are disjoint; task ``i`` is served by the regions of tasks learned up to ``i`` with every
other graftable element at θ_pre. Earlier regions are frozen bit-exactly, so forgetting is exactly zero.

Two modes:

- ``"stream"`` (default): experience t trains every free element (outside earlier regions) and its task's
  head; afterwards the finder localizes γ_t among the free elements (θ_pre := the model at the start of the
  experience, θ_ft := the trained model); trained values are kept inside γ_t, every other free element is
  reset to θ_pre.
- ``"paper"``: regions are given up front (e.g. by :func:`~cl_graft.strategies.finders.independent_regions`);
  experience t trains only γ_t minus earlier regions, which becomes task t's region.

Evaluation rebuilds the task's model (``reconstruct``): ``"experience"`` swaps θ_pre onto later tasks' regions
in ``before_eval_exp`` and back in ``after_eval_exp`` (O(|γ|)); experiences that mix tasks fall back to
``"minibatch"``, which evaluates each task's part of a batch with substituted tensors (``functional_call``),
leaving the model untouched; ``"all"`` uses every region for every input.

The model must be a :class:`~cl_graft.strategies.adapter.TaskAdapter`. Reads ``strategy.model``,
``strategy.experience`` (task labels and dataset rows), ``strategy.optimizer``; writes only the model's
parameters (freezing, reset) and, during ``"minibatch"`` evaluation, ``model.param_view``. Put this plugin
before plugins that read gradients in ``before_update`` (e.g. gradient clipping) so they see masked
gradients; :class:`~cl_graft.strategies.graft_strategy.GraftStrategy` does.
"""
from __future__ import annotations

import time
from collections.abc import Mapping

import torch
from avalanche.core import SupervisedPlugin

from cl_graft.errors import UserError
from cl_graft.grafting.graft import clone_model, patch_, restore_
from cl_graft.regions.region import DEFAULT_GRAFTABLE, Region, graftable_names
from cl_graft.training.freeze import ElementFreeze

from .adapter import TaskAdapter, classifier_of
from .finders import LocalizeFinder, RegionFinder
from .owner_map import OwnerMap

MODES = ("stream", "paper")
RECONSTRUCT = ("experience", "minibatch", "all")


class GraftPlugin(SupervisedPlugin):
    """Trains each task outside earlier regions, localizes its region, and rebuilds task models at eval.

    Args:
        mode: ``"stream"`` or ``"paper"`` (see the module docstring).
        finder: region finder of the stream mode (default: :class:`LocalizeFinder` with method ``graft``).
        regions: task name → region, required in paper mode.
        reconstruct: ``"experience"``, ``"minibatch"`` or ``"all"``.
        dev_rows: task name → dev rows handed to the finder for region selection (default: none).
        graftable: regex of the graftable tensors (default: everything inside the transformer layers).
        owners: an :class:`OwnerMap` to continue from (resume); default: created at the first experience
            from the model's values then (θ_pre).
        guard: also restore frozen elements from a snapshot after each step (bit-exact belt).

    Attributes:
        owners: the :class:`OwnerMap` (None before the first experience).
        localize_seconds: wall time of each region search (stream mode).
    """

    def __init__(self, *, mode: str = "stream", finder: RegionFinder | None = None,
                 regions: Mapping[str, Region] | None = None, reconstruct: str = "experience",
                 dev_rows: Mapping[str, list[dict]] | None = None, graftable: str = DEFAULT_GRAFTABLE,
                 owners: OwnerMap | None = None, guard: bool = True) -> None:
        super().__init__()
        if mode not in MODES:
            raise UserError(f"mode must be one of {MODES}, got {mode!r}")
        if reconstruct not in RECONSTRUCT:
            raise UserError(f"reconstruct must be one of {RECONSTRUCT}, got {reconstruct!r}")
        if mode == "paper" and not regions:
            raise UserError("paper mode needs the tasks' regions (regions={task: Region})")
        self.mode, self.reconstruct, self.guard, self.graftable = mode, reconstruct, guard, graftable
        self.finder: RegionFinder = finder or LocalizeFinder()
        self.regions = dict(regions or {})
        self.dev_rows = dict(dev_rows or {})
        self.owners = owners
        self._freeze: ElementFreeze | None = None
        self._stash = None
        self._views: dict[int, dict] = {}
        self.localize_seconds: list[float] = []

    # ----- training ------------------------------------------------------------------------------
    def before_training_exp(self, strategy, **kwargs) -> None:
        adapter = classifier_of(strategy.model)
        clf = adapter.clf
        if self.owners is None:
            self.owners = self._new_owners(clf)
        task = self._task(adapter, strategy.experience)
        if task in self.owners.tasks:
            raise UserError(f"task {task!r} was already learned; grafting trains each task once")
        free = self.owners.free()
        if self.mode == "paper":
            free = free & self._paper_region(task)
        trainable: dict = {n: m for n, m in free.masks.items()}
        trainable.update({n: None for n in clf.task_head_names(task)})
        self._freeze = ElementFreeze(dict(clf.named_parameters()), trainable, guard=self.guard)
        self._freeze.begin_(strategy.optimizer)

    def before_update(self, strategy, **kwargs) -> None:
        if self._freeze is not None:
            self._freeze.before_update_()

    def after_update(self, strategy, **kwargs) -> None:
        if self._freeze is not None:
            self._freeze.after_update_()

    def after_training_exp(self, strategy, **kwargs) -> None:
        self._freeze.end_(strategy.optimizer)
        self._freeze = None
        adapter = classifier_of(strategy.model)
        task = self._task(adapter, strategy.experience)
        free = self.owners.free()
        if self.mode == "paper":
            region = free & self._paper_region(task)
        else:
            region = self._localize(adapter, task, free, strategy.experience.dataset)
        self.owners.add_(adapter.clf, task, region, head_names=adapter.clf.task_head_names(task))
        strategy.model.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _localize(self, adapter: TaskAdapter, task: str, free: Region, dataset) -> Region:
        """Finds γ_t among the free elements, then resets the other free elements to θ_pre (in place)."""
        clf, owners = adapter.clf, self.owners
        was_training = adapter.training
        pre = clone_model(clf)                                       # θ_pre(t): free elements at θ_pre
        params, pre_params = dict(clf.named_parameters()), dict(pre.named_parameters())
        for n, m in free.masks.items():
            device = params[n].device
            pre_params[n].copy_(torch.where(m.to(device), owners.pre[n].to(device), params[n]))
        rows = [dataset[i] for i in range(len(dataset))]
        t0 = time.perf_counter()
        with torch.enable_grad():
            region = self.finder(pre, clf, rows, self.dev_rows.get(task, []), task=task, names=owners.names,
                                 candidates=free)
        self.localize_seconds.append(round(time.perf_counter() - t0, 1))
        region = region.restrict(owners.names) & free
        for n, m in (free - region).masks.items():
            params[n].copy_(torch.where(m.to(params[n].device), pre_params[n], params[n]))
        adapter.train(was_training)
        return region

    def _new_owners(self, clf) -> OwnerMap:
        """The owner map of a new stream: θ_pre := the model's graftable values now."""
        return OwnerMap.from_model(clf, graftable_names(clf.named_parameters(), self.graftable))

    def _paper_region(self, task: str) -> Region:
        if task not in self.regions:
            raise UserError(f"paper mode has no region for task {task!r}")
        return self.regions[task].restrict(self.owners.names)

    # ----- evaluation ----------------------------------------------------------------------------
    def before_eval(self, strategy, **kwargs) -> None:
        self._views = {}

    def before_eval_exp(self, strategy, **kwargs) -> None:
        if self.owners is None or self.reconstruct == "all":
            return
        adapter = classifier_of(strategy.model)
        labels = list(strategy.experience.task_labels)
        if self.reconstruct == "minibatch" or len(labels) > 1:
            adapter.param_view = self.task_view(adapter)
            return
        patch = self.owners.rollback_patch(self._order(adapter, labels[0]))
        self._stash = patch_(adapter.clf, patch) if patch is not None else None

    def after_eval_exp(self, strategy, **kwargs) -> None:
        adapter = classifier_of(strategy.model)
        adapter.param_view = None
        if self._stash is not None:
            restore_(adapter.clf, self._stash)
            self._stash = None

    def after_eval(self, strategy, **kwargs) -> None:
        self._views = {}

    def task_view(self, adapter: TaskAdapter):
        """``task_label → {name: tensor}`` giving the task's model (cached until the end of the eval phase)."""
        params = dict(adapter.clf.named_parameters())

        def view(label: int) -> dict:
            k = self._order(adapter, label)
            if k not in self._views:
                self._views[k] = self.owners.view(params, k)
            return self._views[k]

        return view

    # ----- helpers -------------------------------------------------------------------------------
    def _order(self, adapter: TaskAdapter, label: int) -> int:
        """Position of the label's task in the learning order; untrained tasks see every region so far."""
        k = self.owners.index(adapter.task_names[label])
        return len(self.owners.tasks) - 1 if k is None else k

    @staticmethod
    def _task(adapter: TaskAdapter, experience) -> str:
        """The one task an experience trains."""
        labels = list(experience.task_labels)
        if len(labels) != 1:
            raise UserError(f"grafting trains one task per experience, this one has task labels {labels}")
        return adapter.task_names[labels[0]]
