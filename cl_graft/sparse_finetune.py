"""Fine-tuning only a region: graft re-training and BitFit, the training baselines of Panigrahi et al. 2023.

- Graft re-training (paper Table 1): start from θ_pre and train only the region's elements.
- BitFit (Ben Zaken et al. 2022, https://arxiv.org/abs/2106.10199): train only the biases (and the head).

Both reuse :func:`cl_graft.finetune.finetune_` unchanged (optimizer, schedule, best-on-dev, seeds). Every
tensor that fine-tuning would move, except the task heads, is reparametrised for the run as
``W = W₀ + scatter(idx_γ, v)`` (``torch.nn.utils.parametrize``) with a trainable vector ``v`` of the region's
size, initialised to 0. The original tensors then receive no gradient, so neither weight decay, momentum nor
Adam moments can move them: outside the region the result is W₀ bit for bit. Weight decay (where the
fine-tuning config applies it) acts on ``v``, i.e. pulls region elements towards W₀ rather than towards 0.
Linear task heads are new per task and are trained as in ordinary fine-tuning; prompt heads stay frozen.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from .finetune import FinetuneConfig, FinetuneResult, finetune_, trainable_names
from .graft import check_region, clone_model
from .models import TextClassifier
from .region import Region, graftable_names


class SparseDelta(nn.Module):
    """Parametrization ``W = W₀ + scatter(idx, v)``: W₀ a frozen copy, ``v`` (k,) trainable, starts at 0."""

    def __init__(self, start: Tensor, idx: Tensor) -> None:
        super().__init__()
        self.register_buffer("start", start.detach().clone())                    # W₀: (*)
        self.register_buffer("idx", idx.to(start.device))                           # (k,) flat indices
        self.values = nn.Parameter(torch.zeros(idx.numel(), dtype=start.dtype, device=start.device))

    def forward(self, original: Tensor) -> Tensor:                                  # original: unused
        if self.idx.numel() == 0:
            return self.start
        return self.start.reshape(-1).index_add(0, self.idx, self.values).view_as(self.start)


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return model.get_submodule(path), attr


def finetune_region(model: TextClassifier, region: Region, train_rows: list[dict], dev_rows: list[dict],
                    cfg: FinetuneConfig, *, task: str | None = None,
                    progress: bool = True) -> tuple[TextClassifier, FinetuneResult]:
    """A copy of ``model`` fine-tuned on the region's elements (and the linear task heads) only.

    Args:
        model: the starting point W₀ with ``task`` registered (e.g. θ_pre with a new head); not modified.
        region: the elements that may change (over any of the model's tensors).
        train_rows, dev_rows, cfg, task, progress: as for :func:`~cl_graft.finetune.finetune_`.

    Returns:
        The trained copy and the fine-tuning result.
    """
    check_region(region, model)
    out = clone_model(model)
    heads = set(out.head_parameter_names()) if out.head_kind == "linear" else set()
    params = dict(out.named_parameters())
    frozen = [n for n in trainable_names(out, freeze_embeddings=cfg.freeze_embeddings) if n not in heads]
    for n in frozen:
        mask = region.masks.get(n)
        idx = torch.nonzero(mask.reshape(-1)).squeeze(1) if mask is not None else torch.zeros(0, dtype=torch.long)
        module, attr = _owner(out, n)
        parametrize.register_parametrization(module, attr, SparseDelta(params[n], idx))
    try:
        result = finetune_(out, train_rows, dev_rows, cfg, task=task, progress=progress)
    finally:
        for n in frozen:
            module, attr = _owner(out, n)
            parametrize.remove_parametrizations(module, attr, leave_parametrized=True)
    return out.eval(), result


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
