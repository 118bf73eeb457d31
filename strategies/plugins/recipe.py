"""The single-task fine-tuning recipe (:mod:`cl_graft.training.finetune`) for Avalanche strategies.

Every strategy of a comparison gets the same optimizer (SGD, weight decay 1e-4 except biases and LayerNorms,
as Panigrahi et al. 2023 fine-tune), the same frozen input embeddings, gradient clipping and the same number
of optimizer steps per experience: Avalanche counts epochs, so :class:`StepLimit` stops an experience after
``steps`` mini-batches (give the strategy ``train_epochs=steps``: every epoch has at least one batch).

Every plugin here declares ``supports_distributed`` (Avalanche's flag): under torchrun the gradients they read
are the ranks' average (``DistributedDataParallel``) and every rank counts the same steps; :class:`WholeEval`
keeps evaluation on whole experiences.
"""
from __future__ import annotations

import torch
from avalanche.benchmarks.utils.data_loader import SingleDatasetDataLoader
from avalanche.core import SupervisedPlugin
from avalanche.models.utils import avalanche_forward

from cl_graft import distributed
from cl_graft.errors import UserError
from cl_graft.training.finetune import FinetuneConfig, check_finite, make_optimizer, trainable_names

from ..adapter import TaskAdapter


def recipe_optimizer(model: torch.nn.Module, cfg: FinetuneConfig) -> torch.optim.Optimizer:
    """The recipe's optimizer. For a :class:`TaskAdapter`, tensors the recipe does not train get
    ``requires_grad=False`` (input embeddings when ``cfg.freeze_embeddings``, the unused pooler, prompt heads' LM
    head), so they never get a gradient; any other model (a from-scratch digits model) trains every tensor in one
    param group (the recipe's weight decay on all), where Avalanche places the heads a ``MultiHeadClassifier``
    adds per task (it cannot choose between two groups).

    Every tensor is in a param group (Avalanche re-adds missing ones and fails to place BERT's embeddings).
    Modifies ``model`` IN PLACE (``requires_grad`` flags only).
    """
    if not isinstance(model, TaskAdapter):
        kind = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.AdamW
        return kind(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    names = set(trainable_names(model.clf, freeze_embeddings=cfg.freeze_embeddings))
    every = []
    for n, p in model.clf.named_parameters():
        p.requires_grad_(n in names)
        every.append(n)
    return make_optimizer(model.clf, every, cfg)


class StepLimit(SupervisedPlugin, supports_distributed=True):
    """Stops each training experience after ``steps`` optimizer steps (Avalanche's early-stop flag)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        if steps < 1:
            raise UserError(f"steps must be >= 1, got {steps}")
        self.steps = steps
        self.done = 0

    @property
    def step_limit(self) -> int:
        """The steps each experience stops after (what plugins that plan by steps read, e.g. graft's
        retraining switch)."""
        return self.steps

    def before_training_exp(self, strategy, **kwargs) -> None:
        self.done = 0

    def after_training_iteration(self, strategy, **kwargs) -> None:
        self.done += 1
        if self.done >= self.steps:
            strategy.stop_training()

    def after_training_exp(self, strategy, **kwargs) -> None:
        strategy._stop_training = False              # a stop on the last batch must not leak into the next one


class ClipGrad(SupervisedPlugin, supports_distributed=True):
    """Clips the global gradient norm in ``before_update`` (after any gradient masking placed before it)."""

    def __init__(self, max_norm: float) -> None:
        super().__init__()
        self.max_norm = max_norm

    def before_update(self, strategy, **kwargs) -> None:
        grads = [p for p in strategy.model.parameters() if p.grad is not None]
        if self.max_norm and grads:
            torch.nn.utils.clip_grad_norm_(grads, self.max_norm)


class FiniteGuard(SupervisedPlugin, supports_distributed=True):
    """Stops training with a one-line error when the loss (every iteration), a weight or the outputs on the last
    mini-batch (after each experience) are NaN or infinite: :func:`cl_graft.training.finetune.check_finite` on the
    Avalanche path."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0

    def before_training_exp(self, strategy, **kwargs) -> None:
        self.step = 0

    def before_backward(self, strategy, **kwargs) -> None:
        self.step += 1
        check_finite(f"{_where(strategy)} step {self.step}", loss=strategy.loss)

    def after_training_exp(self, strategy, **kwargs) -> None:
        model, was_training = strategy.model, strategy.model.training
        model.eval()
        with torch.no_grad():
            outputs = avalanche_forward(model, strategy.mb_x, strategy.mb_task_id)
        model.train(was_training)
        check_finite(_where(strategy), tensors=dict(model.named_parameters()), outputs=outputs)


class WholeEval(SupervisedPlugin, supports_distributed=True):
    """Every rank evaluates every row of an eval experience (Avalanche's distributed mode gives each rank a
    shard, and its metrics would then count that shard alone); a no-op in a single process."""

    def before_eval_exp(self, strategy, **kwargs) -> None:
        if distributed.world_size() > 1:
            strategy.dataloader = SingleDatasetDataLoader(strategy.adapted_dataset, batch_size=strategy.eval_mb_size,
                                                          distributed_sampling=False)


def _where(strategy) -> str:
    return f"experience {getattr(strategy.experience, 'current_experience', 'all')}"
