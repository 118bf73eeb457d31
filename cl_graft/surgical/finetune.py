"""Surgical fine-tuning: train only some transformer layers (and the task head), the rest stays at θ_pre.

Lodha et al., "On Surgical Fine-tuning for Language Encoders", Findings of EMNLP 2023
(https://aclanthology.org/2023.findings-emnlp.204): the layers are chosen by their FIM score
(:mod:`cl_graft.regions.fisher`); a random choice of as many layers is the control.

The recipe is :func:`cl_graft.training.finetune.finetune_` unchanged (optimizer, weight decay, clipping, schedule,
best-on-dev, seeds), trained inside the region of the chosen layers' tensors like graft re-training
(:func:`cl_graft.regions.finetune.finetune_region`): everything else stays bit-exact at θ_pre.
"""
from __future__ import annotations

import random

import torch

from ..errors import UserError
from ..regions.finetune import finetune_region
from ..regions.region import Region, graftable_names, layer_index
from ..training.finetune import FinetuneConfig, FinetuneResult
from ..training.models import TextClassifier


def layer_names(model: TextClassifier) -> dict[int, list[str]]:
    """Transformer layer index → the names of its (graftable) parameters, layers ascending."""
    out: dict[int, list[str]] = {}
    for n in graftable_names(model.named_parameters()):
        out.setdefault(layer_index(n), []).append(n)
    return dict(sorted(out.items()))


def check_layers(model: TextClassifier, layers: list[int]) -> None:
    """Refuses an empty choice, repeated layers, or layers the model does not have."""
    have = list(layer_names(model))
    bad = [i for i in layers if i not in have]
    if not layers or bad or len(set(layers)) != len(layers):
        raise UserError(f"layers {layers} are not distinct layers of the model's {len(have)} (0..{len(have) - 1})")


def random_layers(model: TextClassifier, k: int, seed: int) -> list[int]:
    """``k`` distinct layers drawn uniformly (seeded), ascending: the control for FIM-chosen layers."""
    have = list(layer_names(model))
    if not 1 <= k <= len(have):
        raise UserError(f"{k} layers asked for; the model has {len(have)} (use 1..{len(have)})")
    return sorted(random.Random(seed).sample(have, k))


def trained_count(model: TextClassifier, layers: list[int]) -> int:
    """Parameters that surgical fine-tuning of ``layers`` trains, linear task heads excluded."""
    params = dict(model.named_parameters())
    return sum(params[n].numel() for i in layers for n in layer_names(model)[i])


def surgical_finetune(model: TextClassifier, layers: list[int], train_rows: list[dict], dev_rows: list[dict],
                      cfg: FinetuneConfig, *, task: str | None = None,
                      progress: bool = True) -> tuple[TextClassifier, FinetuneResult]:
    """A copy of ``model`` fine-tuned on the chosen layers (and the linear task heads) only.

    Args:
        model: the start, θ_pre with ``task`` registered; not modified.
        layers: transformer layer indices to train.
        train_rows, dev_rows, cfg, task, progress: as for :func:`~cl_graft.training.finetune.finetune_`.

    Returns:
        The trained copy (every other tensor bit-exact as in ``model``) and the fine-tuning result.
    """
    check_layers(model, layers)
    params = dict(model.named_parameters())
    chosen = {n for i in layers for n in layer_names(model)[i]}
    region = Region({n: torch.full(params[n].shape, n in chosen, dtype=torch.bool)
                     for n in graftable_names(params.items())}, {"method": "surgical", "layers": sorted(layers)})
    return finetune_region(model, region, train_rows, dev_rows, cfg, task=task, progress=progress)
