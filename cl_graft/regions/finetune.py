"""Fine-tuning only a region: graft re-training and BitFit, the training baselines of Panigrahi et al. 2023.

- Graft re-training (paper Table 1): start from θ_pre and train only the region's elements.
- BitFit (Ben Zaken et al. 2022, https://arxiv.org/abs/2106.10199): train only the biases (and the head).

Both are :func:`cl_graft.training.finetune.finetune_` with a ``region`` (same optimizer, schedule,
best-on-dev, seeds): :class:`~cl_graft.training.freeze.ElementFreeze` keeps every element outside the region
bit-exact (no gradient, weight decay, momentum or Adam moment moves it); weight decay acts on the region's
elements as in ordinary fine-tuning. Linear task heads are new per task and train whole; prompt heads stay frozen.
"""
from __future__ import annotations

import torch

from ..training.finetune import FinetuneConfig, FinetuneResult, finetune_
from ..training.models import TextClassifier, clone_model
from .region import Region, check_region, graftable_names


def finetune_region(model: TextClassifier, region: Region, train_rows: list[dict], dev_rows: list[dict],
                    cfg: FinetuneConfig, *, task: str | None = None,
                    progress: bool = True) -> tuple[TextClassifier, FinetuneResult]:
    """A copy of ``model`` fine-tuned on the region's elements (and the task's linear head) only.

    Args:
        model: the starting point W₀ with ``task`` registered (e.g. θ_pre with a new head); not modified.
        region: the elements that may change (over any of the model's tensors).
        train_rows, dev_rows, cfg, task, progress: as for :func:`~cl_graft.training.finetune.finetune_`.

    Returns:
        The trained copy and the fine-tuning result.
    """
    check_region(region, model)
    out = clone_model(model)
    result = finetune_(out, train_rows, dev_rows, cfg, task=task, region=region, progress=progress)
    return out, result


def bias_region(model: TextClassifier, names: list[str] | None = None) -> Region:
    """Every element of the bias tensors among ``names`` (default: the graftable tensors); others empty."""
    params = dict(model.named_parameters())
    names = graftable_names(params.items()) if names is None else names
    return Region({n: torch.full(params[n].shape, n.endswith(".bias"), dtype=torch.bool) for n in names},
                  {"method": "bitfit"})


def bitfit(model: TextClassifier, train_rows: list[dict], dev_rows: list[dict], cfg: FinetuneConfig, *,
           task: str | None = None, progress: bool = True) -> tuple[TextClassifier, FinetuneResult]:
    """BitFit: a copy of ``model`` with only the transformer layers' biases (and linear heads) trained."""
    return finetune_region(model, bias_region(model), train_rows, dev_rows, cfg, task=task, progress=progress)
