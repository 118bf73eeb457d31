"""What a region finder reads from a task: mini-batches, a loss, per-example log-likelihoods, selection scores.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600) learn γ from the task loss on training batches and pick
the best region on held-out scores. Every finder of :mod:`cl_graft.regions.methods` reads the task only through
a :class:`RegionData`, so it works on any model: :class:`TextRegionData` (rows + a
:class:`~cl_graft.training.models.TextClassifier`, the text path) is one case; ``cl_graft.strategies`` adds one
over an Avalanche experience (its dataset, collate, the strategy's criterion and forward).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..training.evaluate import evaluate, predict_logits, text_length
from ..training.finetune import batches

SPLITS = ("train", "dev")


@runtime_checkable
class RegionData(Protocol):
    """A task as a finder sees it. ``model`` is always a private working copy of θ_ft (or θ_pre)."""

    task: str | None

    def __len__(self) -> int:
        """Training examples."""

    def batches(self, batch_size: int, steps: int, seed: int) -> Iterator[Any]:
        """``steps`` seeded training mini-batches (reshuffled every epoch)."""

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        """Mean loss of ``batch`` (scalar, differentiable)."""

    def log_likelihood(self, model: nn.Module, batch: Any) -> Tensor:
        """log p(y | x) of every example of ``batch``, ``(B,)`` (FISH)."""

    def score(self, model: nn.Module, split: str, *, limit: int, seed: int) -> float:
        """Selection score (higher is better) on ≤ ``limit`` training examples (``"train"``: a sample seeded by
        ``seed``) or held-out ones (``"dev"``: the first ``limit``); 0.0 for a split with no examples."""

    def correct(self, model: nn.Module, split: str, *, limit: int, seed: int) -> Tensor:
        """Whether the model classifies each of the same examples as :meth:`score` right, ``(n,)`` bool
        (empty for a split with no examples)."""

    def labels(self, split: str, *, limit: int, seed: int) -> Tensor:
        """The true classes of the same examples as :meth:`correct`, ``(n,)`` long (the chance level of a
        task is the share of its most frequent class)."""

    def probabilities(self, model: nn.Module, split: str, *, limit: int, seed: int) -> Tensor:
        """The model's class probabilities on the same examples as :meth:`correct`, ``(n, C)`` float."""


class TextRegionData:
    """Text rows of one task for a :class:`~cl_graft.training.models.TextClassifier` (the text path).

    Args:
        train_rows: training rows (gradient batches, FISH rows and a sample of them for selection).
        dev_rows: held-out rows for selection; may be empty.
        task: the task whose head scores the rows.
    """

    def __init__(self, train_rows: list[dict], dev_rows: list[dict], *, task: str) -> None:
        if not train_rows:
            raise UserError("no training rows to localize on")
        self.rows, self.dev, self.task = train_rows, dev_rows, task

    def __len__(self) -> int:
        return len(self.rows)

    def batches(self, batch_size: int, steps: int, seed: int) -> Iterator[list[dict]]:
        return batches(self.rows, batch_size, steps, seed)

    def _logits(self, model, batch: list[dict]) -> tuple[Tensor, Tensor]:
        device = next(model.parameters()).device
        enc = {k: v.to(device) for k, v in model.encode(batch, self.task).items()}
        labels = torch.tensor([r["label"] for r in batch], device=device)
        return model(**enc, task=self.task), labels                          # (B, C), (B,)

    def loss(self, model, batch: list[dict]) -> Tensor:
        return torch.nn.functional.cross_entropy(*self._logits(model, batch))

    def log_likelihood(self, model, batch: list[dict]) -> Tensor:
        logits, labels = self._logits(model, batch)
        return torch.log_softmax(logits, dim=-1).gather(1, labels[:, None]).squeeze(1)

    def score(self, model, split: str, *, limit: int, seed: int) -> float:
        rows = selection(self.rows if split == "train" else self.dev, split, limit=limit, seed=seed)
        return evaluate(model, rows, self.task)[0]["score"] if rows else 0.0

    def correct(self, model, split: str, *, limit: int, seed: int) -> Tensor:
        rows = selection(self.rows if split == "train" else self.dev, split, limit=limit, seed=seed)
        if not rows:
            return torch.zeros(0, dtype=torch.bool)
        predictions = torch.from_numpy(evaluate(model, rows, self.task)[1])
        return predictions == torch.tensor([r["label"] for r in rows])

    def labels(self, split: str, *, limit: int, seed: int) -> Tensor:
        rows = selection(self.rows if split == "train" else self.dev, split, limit=limit, seed=seed)
        return torch.tensor([r["label"] for r in rows], dtype=torch.long)

    def probabilities(self, model, split: str, *, limit: int, seed: int) -> Tensor:
        rows = selection(self.rows if split == "train" else self.dev, split, limit=limit, seed=seed)
        logits = torch.from_numpy(predict_logits(model, rows, self.task)) if rows else torch.zeros(0, 1)
        return torch.softmax(logits.double(), dim=-1)


def by_length(batches: list) -> list:
    """The rows of text ``batches`` (lists of row dicts, all of one size) regrouped by length into as many batches
    of that size: the mean of their mean losses is the same, with less padding (two random batches of 16 rows
    regrouped so padded 6% fewer tokens on agnews, 9% on qnli, 18% on sst2: MiniLM's tokenizer, 64 tokens at most).
    Other batches are returned as they are."""
    sizes = {len(b) if isinstance(b, list) else -1 for b in batches}
    if len(batches) < 2 or len(sizes) != 1 or -1 in sizes or not all(isinstance(r, dict) for b in batches for r in b):
        return batches
    rows = sorted((r for b in batches for r in b), key=text_length)
    size = sizes.pop()
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def selection(items: list, split: str, *, limit: int, seed: int) -> list:
    """The selection examples of a split: a seeded sample of ≤ ``limit`` (``"train"``) or the first ``limit``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return random.Random(seed).sample(items, min(limit, len(items))) if split == "train" else items[:limit]


def region_data(ft, train_rows: list[dict] | RegionData, dev_rows: list[dict], *, task: str | None) -> RegionData:
    """``train_rows`` itself when it is a :class:`RegionData`, else the text rows as :class:`TextRegionData`."""
    if isinstance(train_rows, RegionData):
        return train_rows
    return TextRegionData(train_rows, dev_rows, task=ft.resolve_task(task))
