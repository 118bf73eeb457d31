"""cl_graft.regions.fisher: the per-element Fisher (fish) and the batched per-tensor sums (FIM layer scores)
are one estimator: summed over each tensor, the first gives the second."""
from __future__ import annotations

import pytest
import torch

from cl_graft.regions.data import TextRegionData
from cl_graft.regions.fisher import diagonal_fisher, fisher_sums, with_pre_body
from cl_graft.regions.region import graftable_names


def test_element_fisher_sums_to_the_batched_tensor_sums(tiny_model, toy_rows):
    params = dict(tiny_model.named_parameters())
    names = graftable_names(params.items())
    data = TextRegionData(toy_rows, [], task=tiny_model.resolve_task(None))
    tiny_model.eval()
    per_element = diagonal_fisher(tiny_model, [params[n] for n in names], data, len(toy_rows), seed=0)
    sums = fisher_sums(tiny_model, toy_rows, batch_size=3)
    assert list(sums) == names
    scale = max(sums.values())
    for n, f in zip(names, per_element, strict=True):
        assert f.shape == params[n].shape and bool((f >= 0).all())
        assert float(f.sum()) == pytest.approx(sums[n], rel=1e-4, abs=1e-6 * scale), n


def test_pre_body_keeps_the_heads_of_the_fine_tuned_model(tiny_model):
    shifted = with_pre_body(tiny_model, tiny_model)
    with torch.no_grad():
        for p in shifted.parameters():
            p.add_(1.0)
    mixed = with_pre_body(tiny_model, shifted)                 # body of tiny_model, the rest of `shifted`
    body = set(graftable_names(tiny_model.named_parameters()))
    for (n, a), b, s in zip(tiny_model.named_parameters(), mixed.parameters(), shifted.parameters(), strict=True):
        assert torch.equal(b, a if n in body else s), n
    assert body and len(body) < len(list(tiny_model.parameters()))
