"""Rows of an Avalanche dataset for passes without gradients (evaluation, feature statistics, dev judgements):
batched by length when the dataset's collate can tell a row's length, outputs returned in the rows' order.

When the dataset's collate can tell a row's length (``collate_fn.length(item) -> int``, as the text streams'
collate does: a batch is cut to its longest row), rows of similar length are batched together, as
:func:`cl_graft.training.evaluate.predict_logits` does: on the text streams this cuts the tokens passed by a fifth
(qnli) to two thirds (banking77).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import default_collate

EVAL_BATCH = 64


def eval_view(dataset):
    """The dataset with its evaluation transforms (Avalanche datasets), else itself."""
    return dataset.eval() if hasattr(dataset, "eval") else dataset


def eval_batches(dataset, idx: list[int], size: int = EVAL_BATCH) -> Iterator[tuple[Tensor, Any]]:
    """Batches of the rows ``idx`` of ``dataset`` for a pass without gradients: ``(positions (B,) long into idx,
    collated batch)``, rows of similar length together when ``dataset.collate_fn`` has ``length(item)``, else in
    the order given."""
    fn = getattr(dataset, "collate_fn", None) or default_collate
    length = getattr(fn, "length", None)
    items = [dataset[i] for i in idx]                                     # each row read once
    order = sorted(range(len(items)), key=lambda p: length(items[p])) if length is not None else [*range(len(items))]
    for s in range(0, len(order), size):
        pos = order[s:s + size]
        yield torch.tensor(pos, dtype=torch.long), fn([items[p] for p in pos])


def collate(dataset, idx: list[int]) -> Any:
    fn = getattr(dataset, "collate_fn", None) or default_collate
    return fn([dataset[i] for i in idx])
