"""Tests for cl_graft.regions.finetune: graft re-training and BitFit keep everything else bit-exact."""
from __future__ import annotations

import pytest
import torch

from cl_graft import ops
from cl_graft.regions.finetune import bias_region, bitfit, finetune_region
from cl_graft.regions.region import Region, graftable_names
from cl_graft.training.evaluate import evaluate
from cl_graft.training.finetune import FinetuneConfig


def _state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_region_finetune_moves_only_the_region(tiny_model, toy_rows, optimizer):
    params = dict(tiny_model.named_parameters())
    names = graftable_names(params.items())
    region = Region(ops.random_mask({n: params[n].shape for n in names}, 400, seed=0))
    before = _state(tiny_model)
    cfg = FinetuneConfig(optimizer=optimizer, lr=0.2 if optimizer == "sgd" else 0.01, batch_size=4, steps=40,
                         eval_every=20, weight_decay=0.1, seed=0)
    out, result = finetune_region(tiny_model, region, toy_rows, toy_rows, cfg, progress=False)
    after = _state(out)
    assert list(after) == list(before)                                 # parametrizations removed
    assert all(torch.equal(before[n], p) for n, p in _state(tiny_model).items())   # input untouched
    moved = 0
    for n in before:
        inside = region.masks[n] if n in region.masks else torch.zeros_like(before[n], dtype=torch.bool)
        if n in tiny_model.head_parameter_names() and tiny_model.head_kind == "linear":
            continue                                                    # linear heads are trained
        assert torch.equal(after[n][~inside], before[n][~inside]), n
        moved += int((after[n][inside] != before[n][inside]).sum())
    assert moved > 0 and result.best_dev is not None


def test_bitfit_trains_biases_and_head(toy_rows):
    from helpers import SENTIMENT, tiny_bert

    model = tiny_bert()
    model.add_task(SENTIMENT)
    before = _state(model)
    cfg = FinetuneConfig(lr=0.3, batch_size=4, steps=60, eval_every=20, seed=0)
    out, _ = bitfit(model, toy_rows, toy_rows, cfg, progress=False)
    after = _state(out)
    biases = bias_region(model)
    assert biases.size == sum(p.numel() for n, p in before.items() if n in biases.masks and n.endswith(".bias"))
    for n in before:
        if n.startswith("heads."):
            assert not torch.equal(after[n], before[n])
        elif n.endswith(".bias") and n in biases.masks:
            continue
        else:
            assert torch.equal(after[n], before[n]), n
    assert evaluate(out, toy_rows)[0]["accuracy"] >= 0.75
