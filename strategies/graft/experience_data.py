"""An Avalanche experience as a region finder's data: its dataset and collate, the strategy's criterion and forward.

Region finders (:mod:`cl_graft.regions.methods`: the learned region of Panigrahi et al. 2023 Eq. 3, top-k,
random, FISH, …) read a task through :class:`~cl_graft.regions.data.RegionData`. :class:`ExperienceData` is that
for any model an Avalanche template trains: mini-batches are drawn (seeded) from the experience's dataset and
collated with its ``collate_fn`` into Avalanche's ``[x, y, …, t]``, the loss is ``criterion(forward(model, x, t),
y)`` with ``forward`` = Avalanche's ``avalanche_forward`` (task labels reach only a ``MultiTaskModule``), and a
region is selected on accuracy over a seeded sample of the training examples plus, when given, a held-out
dataset (Avalanche's ``valid_stream`` convention).

Passes without gradients (selection, the size search, feature statistics) go through :mod:`..eval_rows` (rows of
similar length batched together, outputs back in the rows' order).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from avalanche.models.utils import avalanche_forward
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.data import selection
from cl_graft.training.finetune import batches

from ..eval_rows import EVAL_BATCH, collate, eval_batches, eval_view

Forward = Callable[[nn.Module, Tensor, Tensor], Tensor]


class ExperienceData:
    """A :class:`~cl_graft.regions.data.RegionData` over Avalanche datasets.

    Args:
        dataset: the experience's training dataset (items collate to ``[x, y, …, t]``).
        criterion: ``criterion(logits (B, C), y (B,)) -> scalar`` (the strategy's ``_criterion``).
        forward: ``forward(model, x, task_labels (B,)) -> logits (B, C)`` (default: ``avalanche_forward``).
        held_out: a dataset for region selection (e.g. the experience of ``benchmark.valid_stream``), or None.
        task: the task's name (recorded in the region's meta).
    """

    def __init__(self, dataset, *, criterion: Callable[[Tensor, Tensor], Tensor], forward: Forward = avalanche_forward,
                 held_out=None, task: str | None = None) -> None:
        if len(dataset) == 0:
            raise UserError("the experience has no training examples to localize on")
        self.dataset, self.criterion, self.forward, self.task = dataset, criterion, forward, task
        self.splits = {"train": eval_view(dataset), "dev": eval_view(held_out) if held_out is not None else None}

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(self, batch_size: int, steps: int, seed: int) -> Iterator[list[Tensor]]:
        for idx in batches(list(range(len(self.dataset))), batch_size, steps, seed):
            yield collate(self.dataset, idx)

    def _logits(self, model: nn.Module, batch: list[Tensor]) -> tuple[Tensor, Tensor]:
        device = next(model.parameters()).device
        x, y, t = batch[0].to(device), batch[1].to(device), batch[-1].to(device)
        return self.forward(model, x, t), y                                   # (B, C), (B,)

    def loss(self, model: nn.Module, batch: list[Tensor]) -> Tensor:
        return self.criterion(*self._logits(model, batch))

    def log_likelihood(self, model: nn.Module, batch: list[Tensor]) -> Tensor:
        logits, y = self._logits(model, batch)
        return torch.log_softmax(logits, dim=-1).gather(1, y[:, None]).squeeze(1)  # (B,)

    @torch.no_grad()
    def correct(self, model: nn.Module, split: str, *, limit: int, seed: int) -> Tensor:
        """Whether each selection example of the split is classified right, ``(n,)`` bool (empty when none)."""
        dataset, idx = self._selection(split, limit=limit, seed=seed)
        out = torch.zeros(len(idx), dtype=torch.bool)
        for pos, batch in eval_batches(dataset, idx):
            logits, y = self._logits(model, batch)
            out[pos] = (logits.argmax(-1) == y).cpu()
        return out

    @torch.no_grad()
    def probabilities(self, model: nn.Module, split: str, *, limit: int, seed: int) -> Tensor:
        """Class probabilities on the same examples as :meth:`correct`, ``(n, C)`` float64 (``(0, 1)`` when none)."""
        dataset, idx = self._selection(split, limit=limit, seed=seed)
        out = None
        for pos, batch in eval_batches(dataset, idx):
            logits, _ = self._logits(model, batch)
            probs = torch.softmax(logits.double(), dim=-1).cpu()                # (B, C)
            out = probs.new_zeros(len(idx), probs.shape[1]) if out is None else out
            out[pos] = probs
        return out if out is not None else torch.zeros(0, 1, dtype=torch.float64)

    def labels(self, split: str, *, limit: int, seed: int) -> Tensor:
        """The classes of the same examples as :meth:`correct`, ``(n,)`` long."""
        dataset, idx = self._selection(split, limit=limit, seed=seed)
        out = [torch.zeros(0, dtype=torch.long)]
        for s in range(0, len(idx), EVAL_BATCH):
            out.append(torch.as_tensor(collate(dataset, idx[s:s + EVAL_BATCH])[1]).long().cpu())
        return torch.cat(out)

    def _selection(self, split: str, *, limit: int, seed: int) -> tuple[Any, list[int]]:
        dataset = self.splits[split]
        idx = selection(list(range(len(dataset))), split, limit=limit, seed=seed) if dataset is not None else []
        return dataset, idx

    def score(self, model: nn.Module, split: str, *, limit: int, seed: int) -> float:
        """Accuracy on the split's selection examples (0.0 when there are none)."""
        hits = self.correct(model, split, limit=limit, seed=seed)
        return int(hits.sum()) / len(hits) if len(hits) else 0.0
