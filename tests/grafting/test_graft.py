"""Tests for cl_graft.grafting.graft: graft_model, wise, SkillPatch and the in-place patch_/restore_ pair."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from cl_graft import ops
from cl_graft.errors import UserError
from cl_graft.grafting.graft import SkillPatch, graft_model, patch_, restore_, wise
from cl_graft.grafting.patch_io import PATCH_CONFIG, PATCH_TENSORS, decode_gaps, encode_gaps, gap_bytes
from cl_graft.regions.region import Region, fingerprint, graftable_names
from cl_graft.training.evaluate import predict_logits
from cl_graft.training.models import clone_model

from helpers import SENTIMENT, tiny_bert


def _state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _pair(factory=tiny_bert):
    """θ_pre (with the task's fresh head) and a θ_ft that differs from it in every tensor."""
    pre = factory()
    pre.add_task(SENTIMENT)
    ft = clone_model(pre)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return pre, ft


def _region(model, k: int, seed: int = 0, **meta) -> Region:
    names = graftable_names(model.named_parameters())
    params = dict(model.named_parameters())
    return Region(ops.random_mask({n: params[n].shape for n in names}, k, seed=seed), meta)


def _assert_same(a: dict, b: dict, names) -> None:
    for n in names:
        assert torch.equal(a[n], b[n]), n


@pytest.fixture(scope="module")
def pair():
    return _pair()


def test_empty_region_is_pre_and_full_region_is_ft(tiny_model):
    pre, ft = _pair(lambda: tiny_model)
    names = graftable_names(ft.named_parameters())
    region = _region(ft, 0)
    empty = _state(graft_model(pre, ft, region))
    full = _state(graft_model(pre, ft, ~region))
    pre_s, ft_s = _state(pre), _state(ft)
    _assert_same(empty, pre_s, names)
    _assert_same(full, ft_s, full)                                  # every tensor: the whole model is θ_ft
    others = [n for n in ft_s if n not in names]                    # embeddings, heads: from θ_ft
    assert others
    _assert_same(empty, ft_s, others)


def test_partial_graft_selects_bitwise_and_never_mutates_inputs(pair, toy_rows):
    pre, ft = pair
    before_pre, before_ft = _state(pre), _state(ft)
    ft.train()
    region = _region(ft, 300, seed=2)
    out = graft_model(pre, ft, region)
    assert ft.training and out is not ft and out.tokenizer is ft.tokenizer
    ft.eval()
    got = _state(out)
    for n, m in region.masks.items():
        assert torch.equal(got[n][m], before_ft[n][m]) and torch.equal(got[n][~m], before_pre[n][~m]), n
    _assert_same(_state(pre), before_pre, before_pre)
    _assert_same(_state(ft), before_ft, before_ft)
    # the copy is independent: changing it leaves the inputs alone
    with torch.no_grad():
        next(out.parameters()).add_(1.0)
    _assert_same(_state(ft), before_ft, before_ft)
    assert predict_logits(graft_model(pre, ft, region), toy_rows).shape == (len(toy_rows), 2)


def test_graft_set_algebra(pair):
    """Grafting B onto the model grafted with A keeps θ_ft exactly on A ∩ B."""
    pre, ft = pair
    a, b = _region(ft, 400, seed=3), _region(ft, 400, seed=4)
    twice = _state(graft_model(pre, graft_model(pre, ft, a), b))
    once = _state(graft_model(pre, ft, a & b))
    _assert_same(twice, once, a.names)
    union = _state(graft_model(pre, ft, a | b))
    for n in a.names:
        assert torch.equal(torch.where(a.masks[n], union[n], twice[n]),
                           torch.where(a.masks[n], ft.state_dict()[n], once[n])), n


def test_outside_zero_and_region_meta(pair):
    pre, ft = pair
    region = _region(ft, 200, seed=5, outside="zero")
    lottery = _state(graft_model(pre, ft, region))
    for n, m in region.masks.items():
        assert torch.equal(lottery[n][m], dict(ft.named_parameters())[n][m].detach())
        assert bool((lottery[n][~m] == 0).all()), n
    plain = _state(graft_model(pre, ft, region, outside="pre"))
    n = region.names[0]
    assert torch.equal(plain[n][~region.masks[n]], dict(pre.named_parameters())[n][~region.masks[n]].detach())
    with pytest.raises(UserError, match="outside"):
        graft_model(pre, ft, region, outside="ft")


def test_mismatch_errors(pair):
    pre, ft = pair
    region = _region(ft, 10)
    extra = Region({**region.masks, "backbone.encoder.layer.9.x.weight": torch.zeros(3, dtype=torch.bool)})
    with pytest.raises(UserError, match=r"not in the fine-tuned model, first 'backbone\.encoder\.layer\.9"):
        graft_model(pre, ft, extra)
    n = region.names[0]
    wrong = Region({**region.masks, n: torch.zeros(2, 2, dtype=torch.bool)})
    with pytest.raises(UserError, match="shape"):
        graft_model(pre, ft, wrong)
    names = region.names
    stamped = Region(region.masks, {"fingerprints": {"pre": fingerprint(dict(ft.named_parameters()), names)}})
    with pytest.raises(UserError, match="fingerprint"):
        graft_model(pre, ft, stamped)                           # stamped with the wrong θ_pre
    graft_model(pre, ft, stamped, check_fingerprint=False)
    ok = Region(region.masks, {"fingerprints": {"pre": fingerprint(dict(pre.named_parameters()), names)}})
    graft_model(pre, ft, ok)


def test_wise_endpoints_and_midpoint(pair):
    pre, ft = pair
    names = graftable_names(ft.named_parameters())
    pre_s, ft_s = _state(pre), _state(ft)
    _assert_same(_state(wise(pre, ft, 0.0)), pre_s, names)
    _assert_same(_state(wise(pre, ft, 1.0)), ft_s, ft_s)
    mid = _state(wise(pre, ft, 0.5))
    for n in names:
        torch.testing.assert_close(mid[n], (pre_s[n] + ft_s[n]) / 2)
    heads = [n for n in ft_s if n.startswith("heads.")]
    _assert_same(mid, ft_s, heads)                              # heads come from `other`
    grafted = graft_model(pre, ft, _region(ft, 100))
    _assert_same(_state(wise(pre, grafted, 1.0)), _state(grafted), names)   # WiSE-graft endpoint
    _assert_same(_state(pre), pre_s, pre_s)
    _assert_same(_state(ft), ft_s, ft_s)


def test_patch_equals_graft_and_restore_is_bit_exact(pair, toy_rows):
    pre, ft = pair
    region = _region(ft, 250, seed=6)
    heads = ft.head_parameter_names()
    patch = SkillPatch.from_model(ft, region, extra_names=heads)
    model = graft_model(pre, ft, _region(ft, 0))                # θ_pre in the layers, θ_ft's head
    with torch.no_grad():
        for n in heads:
            dict(model.named_parameters())[n].zero_()         # make the head swap observable
    original = _state(model)
    stash = patch_(model, patch)
    _assert_same(_state(model), _state(graft_model(pre, ft, region)), original)
    restore_(model, stash)
    _assert_same(_state(model), original, original)
    # nested patches restore in reverse order
    other = SkillPatch.from_model(pre, _region(ft, 90, seed=7))
    s1 = patch_(model, patch)
    s2 = patch_(model, other)
    restore_(model, s2)
    restore_(model, s1)
    _assert_same(_state(model), original, original)
    with pytest.raises(UserError, match="another model"):
        restore_(clone_model(model), s1)


def test_patch_touches_only_region_elements(pair):
    pre, ft = pair
    region = _region(ft, 150, seed=8)
    model = clone_model(pre)
    before = _state(model)
    patch_(model, SkillPatch.from_model(ft, region))
    after = _state(model)
    for n in before:
        m = region.masks.get(n, torch.zeros_like(before[n], dtype=torch.bool))
        assert torch.equal(after[n][~m], before[n][~m]), n


def test_patch_mismatch(pair):
    _, ft = pair
    patch = SkillPatch.from_model(ft, _region(ft, 20))
    other = tiny_bert("mlm")
    other.add_task(SENTIMENT)
    with pytest.raises(UserError, match="model does not match patch"):
        patch_(other, patch)
    with pytest.raises(UserError, match="no tensor"):
        SkillPatch.from_model(ft, _region(ft, 20), extra_names=["heads.nope.weight"])


def test_patch_save_load_round_trip_and_size(pair, tmp_path):
    pre, ft = pair
    region = _region(ft, 321, seed=9, method="random", region_size=0.01)
    patch = SkillPatch.from_model(ft, region, extra_names=ft.head_parameter_names())
    patch.save(tmp_path / "p")
    loaded = SkillPatch.load(tmp_path / "p")
    assert loaded.region == region and loaded.region.meta == region.meta
    for n in patch.values:
        assert torch.equal(loaded.values[n], patch.values[n]) and torch.equal(loaded.indices[n], patch.indices[n])
    _assert_same(loaded.extra, patch.extra, patch.extra)
    head_bytes = sum(t.numel() * 4 for t in patch.extra.values())
    code = sum(gap_bytes(i) for i in patch.indices.values())                  # ~1 byte per index at 2.4%
    assert 321 <= code < 2 * 321 and patch.bytes(extra=False) == 321 * 4 + code
    assert patch.bytes() == patch.bytes(extra=False) + head_bytes
    assert code == sum(t.numel() for k, t in load_file(tmp_path / "p" / PATCH_TENSORS).items() if k.startswith("gap/"))
    a, b = clone_model(pre), clone_model(pre)
    patch_(a, patch)
    patch_(b, loaded)
    _assert_same(_state(a), _state(b), _state(a))


def test_patch_truncated_or_tampered(pair, tmp_path):
    _, ft = pair
    patch = SkillPatch.from_model(ft, _region(ft, 50, seed=10))
    patch.save(tmp_path / "p")
    tensors = tmp_path / "p" / PATCH_TENSORS
    good = tensors.read_bytes()
    tensors.write_bytes(good[: len(good) // 2])
    with pytest.raises(UserError, match="unreadable"):
        SkillPatch.load(tmp_path / "p")
    tensors.write_bytes(good)
    data = load_file(tensors)
    name = next(k for k, v in data.items() if k.startswith("val/") and v.numel())
    data[name] = data[name] + 1
    save_file(data, tensors)
    with pytest.raises(UserError, match="checksum"):
        SkillPatch.load(tmp_path / "p")
    cfg = tmp_path / "p" / PATCH_CONFIG
    cfg.write_text(json.dumps({"format_version": 99}))
    with pytest.raises(UserError, match="format"):
        SkillPatch.load(tmp_path / "p")
    with pytest.raises(UserError, match="missing"):
        SkillPatch.load(tmp_path / "nothing")


@pytest.mark.parametrize("idx", [[], [0], [5], [0, 1, 2], [127], [128], [0, 200, 20_000, 3_000_000, 2 ** 31 + 7]])
def test_gap_code_round_trip(idx):
    """Gaps below 128 take one byte, below 16,384 two, and so on; decoding gives the indices back."""
    t = torch.tensor(idx, dtype=torch.long)
    code = encode_gaps(t)
    assert code.dtype == torch.uint8 and code.numel() == gap_bytes(t)
    assert torch.equal(decode_gaps(code, len(idx), 2 ** 32), t)
    if idx == [0, 1, 2]:
        assert code.tolist() == [0, 0, 0]
    if idx == [128]:
        assert code.tolist() == [0x80, 0x01]


def test_gap_code_refuses_what_it_is_not():
    code = encode_gaps(torch.tensor([3, 300, 70_000]))
    assert decode_gaps(code, 2, 10 ** 6) is None                              # count differs
    assert decode_gaps(code[:-1], 3, 10 ** 6) is None                         # cut inside a varint
    assert decode_gaps(code, 3, 70_000) is None                               # last index out of range
    assert decode_gaps(torch.full((6,), 0x80, dtype=torch.uint8).index_fill_(0, torch.tensor([5]), 1), 1,
                       2 ** 62) is None                                       # a varint of 6 bytes
    assert decode_gaps(code.to(torch.int32), 3, 10 ** 6) is None


def test_format_1_patches_are_still_read(pair, tmp_path):
    """A patch saved with int32 indices (format 1) loads into the same patch."""
    _, ft = pair
    patch = SkillPatch.from_model(ft, _region(ft, 40, seed=4))
    patch.save(tmp_path / "p")
    cfg_path, tensor_path = tmp_path / "p" / PATCH_CONFIG, tmp_path / "p" / PATCH_TENSORS
    tensors = {(f"idx/{k[4:]}" if k.startswith("gap/") else k): v for k, v in load_file(tensor_path).items()}
    for n, i in patch.indices.items():
        tensors[f"idx/{n}"] = i.to(torch.int32)
    save_file(tensors, tensor_path)
    config = json.loads(cfg_path.read_text())
    config.update(format_version=1, sha256=fingerprint(tensors))
    cfg_path.write_text(json.dumps(config))
    loaded = SkillPatch.load(tmp_path / "p")
    assert loaded.region == patch.region
    assert all(torch.equal(loaded.indices[n], patch.indices[n]) for n in patch.indices)
    tensors[next(k for k in tensors if k.startswith("idx/") and tensors[k].numel() > 1)][:2] = torch.tensor([5, 5])
    save_file(tensors, tensor_path)
    config.update(sha256=fingerprint(tensors))
    cfg_path.write_text(json.dumps(config))
    with pytest.raises(UserError, match="not .* ascending indices"):
        SkillPatch.load(tmp_path / "p")
