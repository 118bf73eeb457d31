"""GraftStrategy: a ``SupervisedTemplate`` with a :class:`~.graft_plugin.GraftPlugin` in front.

Panigrahi et al. 2023 (§5.2, https://arxiv.org/abs/2302.06600): forget-free continual learning by grafting.
The strategy is a thin composition, like Avalanche's stock wrappers; all behaviour lives in the plugin, so
``SupervisedTemplate(plugins=[GraftPlugin(...), ...])`` gives the same results. The one addition: evaluation
batches the plugin routes (mixed tasks, task inference, test data without task labels) are computed by the
plugin in :meth:`GraftStrategy.forward` instead of after the model's own forward (one forward pass saved, and
models that need task labels are never called without them).

Any model an Avalanche template trains works; swap ``Naive(model=..., ...)`` for ``GraftStrategy(model=..., ...)``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.plugins.evaluation import default_evaluator
from avalanche.training.templates import SupervisedTemplate

from cl_graft.regions.region import Region

from .finders import RegionFinder
from .experience_undo import check_experiences
from .graft_plugin import GraftPlugin
from .owner_map import OwnerMap
from .targets import Graftable, HeadNames


class GraftStrategy(SupervisedTemplate):
    """Continual learning by grafting; every argument is keyword-only.

    Args:
        model: any ``torch.nn.Module`` (an Avalanche ``MultiTaskModule``, a single-head module, a wrapped
            Hugging Face model, a :class:`~cl_graft.strategies.adapter.TaskAdapter`).
        optimizer: any torch optimizer over ``model``'s parameters (weight decay, momentum and Adam state
            are handled so that earlier regions stay bit-exact).
        criterion: the loss (default: cross-entropy).
        train_mb_size, train_epochs, eval_mb_size, device, evaluator, eval_every: as for Avalanche's
            ``SupervisedTemplate``.
        plugins: user plugins; they run after the graft plugin (so they see masked gradients).
        mode, finder, regions, reconstruct, valid_stream, graftable, heads, task_inference, owners, guard: see
            :class:`~cl_graft.strategies.graft_plugin.GraftPlugin`.
        **base_kwargs: passed to ``SupervisedTemplate``.

    Attributes:
        graft: the :class:`GraftPlugin` (its ``owners`` is the owner map of the run).
    """

    def __init__(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 criterion: Callable | None = None, train_mb_size: int = 1, train_epochs: int = 1,
                 eval_mb_size: int | None = None, device: str | torch.device = "cpu",
                 plugins: Sequence[SupervisedPlugin] | None = None,
                 evaluator: EvaluationPlugin | Callable[[], EvaluationPlugin] = default_evaluator,
                 eval_every: int = -1, mode: str = "stream", finder: RegionFinder | None = None,
                 regions: Mapping[str, Region] | None = None, reconstruct: str = "experience",
                 valid_stream: Sequence | None = None, graftable: Graftable = None, heads: HeadNames | None = None,
                 task_inference: str | None = None, owners: OwnerMap | None = None, guard: bool = True,
                 **base_kwargs) -> None:
        self.graft = GraftPlugin(mode=mode, finder=finder, regions=regions, reconstruct=reconstruct,
                                 valid_stream=valid_stream, graftable=graftable, heads=heads,
                                 task_inference=task_inference, owners=owners, guard=guard)
        super().__init__(model=model, optimizer=optimizer, criterion=criterion or torch.nn.CrossEntropyLoss(),
                         train_mb_size=train_mb_size,
                         train_epochs=train_epochs, eval_mb_size=eval_mb_size, device=device,
                         plugins=[self.graft, *(plugins or [])], evaluator=evaluator, eval_every=eval_every,
                         **base_kwargs)

    def train(self, experiences, eval_streams=None, **kwargs):
        """As ``SupervisedTemplate.train``; an experience without examples is refused first, and one that fails is
        undone (model, optimizer and owner map as before it) before the error goes on."""
        check_experiences(experiences)
        try:
            return super().train(experiences, eval_streams, **kwargs)
        except BaseException:
            self.graft.undo_failed_experience_()
            raise

    def forward(self):
        """The model's output; in evaluation, the graft plugin's routed output when it routes the batch."""
        routed = None if self.is_training else self.graft.eval_forward(self)
        return super().forward() if routed is None else routed
