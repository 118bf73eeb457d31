"""Property tests for cl_graft.ops (tiny tensors)."""
from __future__ import annotations

import pytest
import torch

from cl_graft import ops
from cl_graft.errors import UserError

SHAPES = {"l.0.w": (3, 5), "l.0.b": (7,), "l.1.w": (2, 3, 2)}  # 15 + 7 + 12 = 34 elements
TOTAL = 34


def _state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g) for n, s in SHAPES.items()}


@pytest.fixture
def pre_ft():
    return _state(0), _state(1)


def _clone(d):
    return {n: t.clone() for n, t in d.items()}


def test_empty_mask_gives_pre_and_full_mask_gives_ft_exactly(pre_ft):
    pre, ft = pre_ft
    before = (_clone(pre), _clone(ft))
    empty = {n: torch.zeros(s, dtype=torch.bool) for n, s in SHAPES.items()}
    full = {n: torch.ones(s, dtype=torch.bool) for n, s in SHAPES.items()}
    for n, t in ops.graft(pre, ft, empty).items():
        assert torch.equal(t, pre[n]) and t.data_ptr() != pre[n].data_ptr()
    for n, t in ops.graft(pre, ft, full).items():
        assert torch.equal(t, ft[n])
    assert all(torch.equal(pre[n], before[0][n]) and torch.equal(ft[n], before[1][n]) for n in SHAPES)


def test_graft_equals_pre_plus_mask_times_delta(pre_ft):
    pre, ft = pre_ft
    mask = ops.random_mask(SHAPES, 10, seed=3)
    out = ops.graft(pre, ft, mask)
    for n in SHAPES:
        assert torch.equal(out[n][mask[n]], ft[n][mask[n]])
        assert torch.equal(out[n][~mask[n]], pre[n][~mask[n]])
    subset = {"l.0.b": mask["l.0.b"]}
    assert list(ops.graft(pre, ft, subset)) == ["l.0.b"]


def test_graft_rejects_bad_masks(pre_ft):
    pre, ft = pre_ft
    with pytest.raises(UserError, match="shape"):
        ops.graft(pre, ft, {"l.0.b": torch.ones(1, dtype=torch.bool)})  # would broadcast silently
    with pytest.raises(UserError, match="bool"):
        ops.graft(pre, ft, {"l.0.b": torch.ones(7)})
    with pytest.raises(UserError, match="missing"):
        ops.graft(pre, ft, {"missing": torch.ones(7, dtype=torch.bool)})


def test_graft_zero(pre_ft):
    _, ft = pre_ft
    mask = ops.random_mask(SHAPES, 9, seed=0)
    out = ops.graft_zero(ft, mask)
    for n in SHAPES:
        assert torch.equal(out[n], torch.where(mask[n], ft[n], torch.zeros_like(ft[n])))
    assert ops.mask_size({n: t != 0 for n, t in out.items()}) == 9


def test_topk_exact_count_and_selects_largest_magnitudes():
    scores = _state(5)
    flat = torch.cat([scores[n].reshape(-1) for n in sorted(scores)]).abs()
    for k in (1, 5, 17, 33):
        mask = ops.topk_mask(scores, k)
        assert ops.mask_size(mask) == k
        assert list(mask) == list(scores)
        chosen = torch.cat([scores[n][mask[n]] for n in scores]).abs()
        rest = torch.cat([scores[n][~mask[n]] for n in scores]).abs()
        assert chosen.min() >= rest.max()
        assert torch.equal(chosen.sort().values, flat.sort().values[-k:])


def test_topk_signed():
    scores = {"a": torch.tensor([-5.0, 1.0, 2.0]), "b": torch.tensor([0.5, -3.0])}
    assert torch.equal(ops.topk_mask(scores, 1)["a"], torch.tensor([True, False, False]))
    signed = ops.topk_mask(scores, 2, absolute=False)
    assert torch.equal(signed["a"], torch.tensor([False, True, True])) and not signed["b"].any()


def test_topk_ties_broken_by_sorted_name_then_index():
    scores = {"b": torch.tensor([2.0, 1.0, 1.0]), "a": torch.tensor([[1.0, 3.0], [1.0, 0.0]])}
    mask = ops.topk_mask(scores, 4)  # 3 and 2 win, then two of the four 1s: a[0,0], a[1,0]
    assert list(mask) == ["b", "a"]
    assert torch.equal(mask["a"], torch.tensor([[True, True], [True, False]]))
    assert torch.equal(mask["b"], torch.tensor([True, False, False]))
    all_equal = {"x": torch.ones(5), "y": torch.ones(4)}
    mask = ops.topk_mask(all_equal, 6)
    assert mask["x"].all() and torch.equal(mask["y"], torch.tensor([True, False, False, False]))


def test_topk_edge_cases():
    scores = _state(2)
    assert ops.mask_size(ops.topk_mask(scores, 0)) == 0
    assert ops.mask_size(ops.topk_mask(scores, TOTAL)) == TOTAL
    assert ops.mask_size(ops.topk_mask(scores, TOTAL + 100)) == TOTAL
    assert ops.topk_mask({}, 3) == {}
    with pytest.raises(UserError, match="k >= 0"):
        ops.topk_mask(scores, -1)
    with pytest.raises(UserError, match="NaN"):
        ops.topk_mask({"a": torch.tensor([1.0, float("nan"), 0.0])}, 1)
    half = {n: t.half() for n, t in scores.items()}
    assert ops.mask_size(ops.topk_mask(half, 7)) == 7


def test_random_mask_exact_and_deterministic():
    a = ops.random_mask(SHAPES, 11, seed=7)
    b = ops.random_mask(SHAPES, 11, seed=7)
    c = ops.random_mask(SHAPES, 11, seed=8)
    assert ops.mask_size(a) == 11 and {n: tuple(m.shape) for n, m in a.items()} == SHAPES
    assert all(torch.equal(a[n], b[n]) for n in SHAPES)
    assert not all(torch.equal(a[n], c[n]) for n in SHAPES)
    assert ops.mask_size(ops.random_mask(SHAPES, 0, seed=1)) == 0
    assert ops.mask_size(ops.random_mask(SHAPES, 99, seed=1)) == TOTAL
    with pytest.raises(UserError):
        ops.random_mask(SHAPES, -2, seed=1)


def test_interpolate_endpoints_and_midpoint(pre_ft):
    pre, ft = pre_ft
    zero, one, half = (ops.interpolate(pre, ft, a) for a in (0.0, 1.0, 0.5))
    for n in SHAPES:
        assert torch.equal(zero[n], pre[n]) and torch.equal(one[n], ft[n])
        assert torch.allclose(half[n], (pre[n] + ft[n]) / 2)
    inf = {"x": torch.tensor([float("inf"), 1.0])}
    assert torch.equal(ops.interpolate(inf, {"x": torch.zeros(2)}, 1)["x"], torch.zeros(2))
    with pytest.raises(UserError, match="only one side"):
        ops.interpolate(pre, {"l.0.w": ft["l.0.w"]}, 0.5)


def test_mask_size_and_density():
    mask = {"a": torch.tensor([True, False, True]), "b": torch.zeros(2, 2, dtype=torch.bool)}
    assert ops.mask_size(mask) == 2
    assert ops.density(mask) == 2 / 7
    assert ops.density({}) == 0.0
