"""cl_graft.skillmaps.analysis: overlap, IoU, transfer, compositionality and anatomy numbers on hand-made regions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cl_graft.errors import UserError
from cl_graft.regions.region import Region
from cl_graft.skillmaps import analysis

SHAPES = {"enc.layer.0.attention.self.query.weight": (2, 5), "enc.layer.1.output.dense.bias": (10,)}  # N = 20


def _region(*flat: int) -> Region:
    """A region selecting the given flat indices over SHAPES (layer 0 query: 0–9, layer 1 ffn bias: 10–19)."""
    bits = torch.zeros(20, dtype=torch.bool)
    bits[list(flat)] = True
    return Region({"enc.layer.0.attention.self.query.weight": bits[:10].reshape(2, 5),
                   "enc.layer.1.output.dense.bias": bits[10:]})


A = _region(0, 1, 2, 3)            # 4 elements, all in layer 0
B = _region(2, 3, 10, 11, 12, 13)  # 6 elements: 2 shared with A, 4 in layer 1
C = _region(19)                    # 1 element, disjoint from A and B
EMPTY = _region()


def test_intersections_overlap_and_iou_by_hand():
    inter = analysis.intersection_counts([A, B, C])
    np.testing.assert_array_equal(inter, [[4, 2, 0], [2, 6, 0], [0, 0, 1]])
    overlap = analysis.overlap_matrix(inter)
    # overlap[i, j] = |γi ∩ γj| / |γj|: A covers 2/6 of B, B covers 2/4 of A
    np.testing.assert_allclose(overlap, [[1, 2 / 6, 0], [2 / 4, 1, 0], [0, 0, 1]])
    np.testing.assert_allclose(analysis.iou_matrix(inter), [[1, 2 / 8, 0], [2 / 8, 1, 0], [0, 0, 1]])
    for i, ri in enumerate([A, B, C]):                      # agrees with Region's own pairwise methods
        for j, rj in enumerate([A, B, C]):
            assert overlap[i, j] == pytest.approx(ri.overlap(rj))
            assert analysis.iou_matrix(inter)[i, j] == pytest.approx(ri.iou(rj))


def test_empty_region_gives_nan_not_zero():
    inter = analysis.intersection_counts([A, EMPTY])
    overlap, iou = analysis.overlap_matrix(inter), analysis.iou_matrix(inter)
    assert np.isnan(overlap[0, 1]) and overlap[1, 0] == 0.0 and np.isnan(overlap[1, 1])
    assert np.isnan(iou[1, 1]) and iou[0, 1] == 0.0


def test_regions_over_other_tensors_are_refused():
    other = Region({"x": torch.ones(3, dtype=torch.bool)})
    with pytest.raises(UserError, match="different tensors"):
        analysis.intersection_counts([A, other])


def test_chance_overlap_is_density_of_the_row_region():
    np.testing.assert_allclose(analysis.chance_overlap([4, 6], 20), [[0.2, 0.2], [0.3, 0.3]])
    with pytest.raises(UserError):
        analysis.chance_overlap([1], 0)


def test_transfer_matrix_by_hand():
    pre, mt = np.array([0.5, 0.6, 0.7]), np.array([0.9, 0.8, 0.7])   # task 2: no gain to recover
    acc = np.array([[0.9, 0.6, 0.7],
                    [0.7, 0.7, 0.8],
                    [0.4, 0.9, 0.6]])
    t = analysis.transfer_matrix(acc, pre, mt)
    np.testing.assert_allclose(t[:, :2], [[1.0, 0.0], [0.5, 0.5], [-0.25, 1.5]])
    assert np.isnan(t[:, 2]).all()
    assert np.isnan(analysis.relative_gain([0.9], [0.5], [0.55], min_gap=0.1)).all()
    with pytest.raises(UserError, match="square"):
        analysis.transfer_matrix(acc[:2], pre, mt)


def test_group_gains_inside_and_outside():
    tasks = ["sst2", "cr", "mnli", "snli"]
    member = analysis.membership({"sentiment": ["sst2", "cr"], "nli": ["mnli", "snli"]}, tasks)
    np.testing.assert_array_equal(member, [[1, 1, 0, 0], [0, 0, 1, 1]])
    gain = np.array([[0.8, 0.6, 0.1, np.nan],
                     [0.0, 0.2, 0.9, 0.5]])
    g = analysis.group_gains(gain, member)
    np.testing.assert_allclose(g["in"], [0.7, 0.7])
    np.testing.assert_allclose(g["out"], [0.1, 0.1])          # the NaN is skipped, not counted as 0
    with pytest.raises(UserError, match="'qqp'"):
        analysis.membership({"para": ["qqp"]}, tasks)


def test_anatomy_shares_by_layer_and_type():
    labels, share, dens = analysis.anatomy([A.breakdown(), B.breakdown(), EMPTY.breakdown()], by="layer")
    assert labels == ["L0", "L1"]
    np.testing.assert_allclose(share[:2], [[1.0, 0.0], [2 / 6, 4 / 6]])
    assert np.isnan(share[2]).all()
    np.testing.assert_allclose(dens, [[0.4, 0.0], [0.2, 0.4], [0.0, 0.0]])
    labels, share, _ = analysis.anatomy([A.breakdown(), B.breakdown()], by="type")
    assert labels == ["attn_q", "ffn_out"]
    np.testing.assert_allclose(share, [[1.0, 0.0], [2 / 6, 4 / 6]])
    np.testing.assert_allclose(share.sum(axis=1), 1.0)
    with pytest.raises(UserError, match="anatomy"):
        analysis.anatomy([A.breakdown()], by="head")


def test_top_pairs():
    m = np.array([[1.0, 0.2, 0.9], [0.3, 1.0, np.nan], [0.1, 0.5, 1.0]])
    assert analysis.top_pairs(m, ["a", "b", "c"], k=2) == [("a", "c", 0.9), ("c", "b", 0.5)]
    assert analysis.top_pairs(m, ["a", "b", "c"], k=5, symmetric=True) == [("a", "c", 0.9), ("a", "b", 0.2)]
