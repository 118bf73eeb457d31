"""Surgical fine-tuning: train only some transformer layers (and the task head), the rest stays at θ_pre.

Lodha et al., "On Surgical Fine-tuning for Language Encoders", Findings of EMNLP 2023
(https://aclanthology.org/2023.findings-emnlp.204): the layers are chosen by their FIM score
(:mod:`cl_graft.fisher_layers`); a random choice of as many layers is the control.

The recipe is :func:`cl_graft.finetune.finetune_` unchanged (optimizer, weight decay, clipping, schedule,
best-on-dev, seeds). Every tensor that fine-tuning would move outside the chosen layers (linear task heads
excepted) is reparametrised for the run as a frozen copy of itself (``torch.nn.utils.parametrize``), so its
original receives no gradient and neither weight decay nor optimizer state can move it: bit-exact θ_pre.
The chosen layers' tensors are ordinary parameters, trained exactly as in full fine-tuning.
"""
from __future__ import annotations

import random

from torch import Tensor, nn
from torch.nn.utils import parametrize

from .errors import UserError
from .finetune import FinetuneConfig, FinetuneResult, finetune_, trainable_names
from .graft import clone_model
from .models import TextClassifier
from .region import graftable_names, layer_index


class Frozen(nn.Module):
    """Parametrization that ignores the original and returns a frozen copy of its starting value."""

    def __init__(self, start: Tensor) -> None:
        super().__init__()
        self.register_buffer("start", start.detach().clone())

    def forward(self, original: Tensor) -> Tensor:                             # original: unused
        return self.start


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
        train_rows, dev_rows, cfg, task, progress: as for :func:`~cl_graft.finetune.finetune_`.

    Returns:
        The trained copy (every other tensor bit-exact as in ``model``) and the fine-tuning result.
    """
    check_layers(model, layers)
    out = clone_model(model)
    chosen = {n for i in layers for n in layer_names(out)[i]}
    heads = set(out.head_parameter_names()) if out.head_kind == "linear" else set()
    params = dict(out.named_parameters())
    frozen = [n for n in trainable_names(out, freeze_embeddings=cfg.freeze_embeddings) if n not in chosen | heads]
    owners = {n: (out.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]) for n in frozen}
    for n, (module, attr) in owners.items():
        parametrize.register_parametrization(module, attr, Frozen(params[n]))
    try:
        result = finetune_(out, train_rows, dev_rows, cfg, task=task, progress=progress)
    finally:
        for module, attr in owners.values():
            parametrize.remove_parametrizations(module, attr, leave_parametrized=True)
    return out.eval(), result
