"""Skill-map analyses as plain numpy functions: region overlap, transfer, compositionality, anatomy.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models",
ICML 2023 (https://arxiv.org/abs/2302.06600), §5.1. For tasks 1..T with regions γ_i learned on one
multi-task model θ_mt, and accuracies of θ_pre, θ_mt and grafted models θ_pre + γ ⊙ (θ_mt − θ_pre):

- overlap[i, j] = |γ_i ∩ γ_j| / |γ_j| (asymmetric, the paper's Fig. 8a) and IoU = |γ_i ∩ γ_j| / |γ_i ∪ γ_j|;
- relative gain of a model on task j = (acc_j − acc_pre,j) / (acc_mt,j − acc_pre,j);
- transfer[i, j] = relative gain of the model grafted with γ_i, evaluated on task j;
- compositionality: relative gain of the union of a group's regions, averaged over tasks in / out of it;
- anatomy: each region's share per layer or parameter type.

Undefined entries (an empty denominator; a task on which θ_mt does not beat θ_pre) are NaN, never 0.
Only the first function touches :class:`~cl_graft.regions.region.Region`; everything else works on arrays, so
the figures can be redrawn from saved JSON.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..errors import UserError
from ..regions.region import Region

ANATOMY_AXES = ("layer", "type")


def intersection_counts(regions: Sequence[Region]) -> np.ndarray:
    """|γ_i ∩ γ_j| for every pair; the diagonal holds |γ_i|.

    Args:
        regions: T regions over the same tensors (names and shapes).

    Returns:
        (T, T) int64 array, symmetric.
    """
    if not regions:
        return np.zeros((0, 0), dtype=np.int64)
    names = regions[0].names
    for r in regions[1:]:
        r.paired(regions[0], "intersection_counts")                 # same names and shapes, or UserError
    flat = [torch.cat([r.masks[n].reshape(-1).cpu() for n in names]) for r in regions]   # T × (N,)
    index = [torch.nonzero(f).squeeze(1).numpy() for f in flat]       # T × (|γ_i|,) sorted flat indices
    t = len(regions)
    out = np.zeros((t, t), dtype=np.int64)
    for i in range(t):
        for j in range(i, t):
            out[i, j] = out[j, i] = np.intersect1d(index[i], index[j], assume_unique=True).size
    return out


def _divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.broadcast_arrays(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def overlap_matrix(inter: np.ndarray) -> np.ndarray:
    """Asymmetric overlap |γ_i ∩ γ_j| / |γ_j| (T, T) from :func:`intersection_counts`; NaN if γ_j is empty."""
    inter = np.asarray(inter)
    return _divide(inter, np.diag(inter)[None, :])


def iou_matrix(inter: np.ndarray) -> np.ndarray:
    """Jaccard index |γ_i ∩ γ_j| / |γ_i ∪ γ_j| (T, T) from :func:`intersection_counts`; NaN if both empty."""
    inter = np.asarray(inter)
    size = np.diag(inter)
    return _divide(inter, size[:, None] + size[None, :] - inter)


def chance_overlap(sizes: Sequence[int], numel: int) -> np.ndarray:
    """Expected overlap[i, j] if γ_i were a uniformly random set of |γ_i| of N elements: |γ_i| / N, (T, T)."""
    if numel <= 0:
        raise UserError(f"chance_overlap needs a positive number of elements, got {numel}")
    sizes = np.asarray(sizes, dtype=float)
    return np.repeat((sizes / numel)[:, None], len(sizes), axis=1)


def relative_gain(acc: np.ndarray, acc_pre: np.ndarray, acc_full: np.ndarray, *,
                  min_gap: float = 0.0) -> np.ndarray:
    """(acc − acc_pre) / (acc_full − acc_pre), broadcasting over the last axis (tasks).

    Args:
        acc: (..., T) accuracies of the models being scored, task j in the last axis.
        acc_pre: (T,) accuracy of θ_pre (with the task heads of θ_full).
        acc_full: (T,) accuracy of the full fine-tuned model.
        min_gap: tasks with acc_full − acc_pre ≤ min_gap get NaN (no gain to recover).

    Returns:
        Array of ``acc``'s shape: 1 = all of the fine-tuning gain, 0 = none, negative = worse than θ_pre.
    """
    acc, pre, full = (np.asarray(a, dtype=float) for a in (acc, acc_pre, acc_full))
    gap = full - pre
    return _divide(acc - pre, np.where(gap > min_gap, gap, 0.0))


def transfer_matrix(acc_graft: np.ndarray, acc_pre: np.ndarray, acc_mt: np.ndarray, *,
                    min_gap: float = 0.0) -> np.ndarray:
    """transfer[i, j]: relative gain on task j of θ_pre grafted with γ_i.

    Args:
        acc_graft: (T, T) accuracy of the model grafted with γ_i (row) on task j (column).
        acc_pre: (T,) accuracy of θ_pre with the multi-task heads.
        acc_mt: (T,) accuracy of the multi-task model.
        min_gap: see :func:`relative_gain`.

    Returns:
        (T, T) float array.
    """
    acc_graft = np.asarray(acc_graft, dtype=float)
    if acc_graft.ndim != 2 or acc_graft.shape[0] != acc_graft.shape[1] or acc_graft.shape[1] != len(acc_pre):
        raise UserError(f"transfer needs a square (T, T) accuracy table for T={len(acc_pre)} tasks, "
                        f"got shape {acc_graft.shape}")
    return relative_gain(acc_graft, acc_pre, acc_mt, min_gap=min_gap)


def membership(groups: Mapping[str, Sequence[str]], tasks: Sequence[str]) -> np.ndarray:
    """(G, T) bool: task j belongs to group g (groups in mapping order)."""
    unknown = sorted({t for members in groups.values() for t in members} - set(tasks))
    if unknown:
        raise UserError(f"group task {unknown[0]!r} is not one of the run's tasks {list(tasks)}")
    return np.array([[t in members for t in tasks] for members in groups.values()], dtype=bool).reshape(
        len(groups), len(tasks))


def group_gains(gain: np.ndarray, member: np.ndarray) -> dict[str, np.ndarray]:
    """Mean relative gain of each group's model on tasks inside and outside the group (NaNs skipped).

    Args:
        gain: (G, T) relative gain of the model built for group g (e.g. its union region) on task j.
        member: (G, T) bool from :func:`membership`.

    Returns:
        ``{"in": (G,), "out": (G,)}``; NaN where a group has no (defined) task on that side.
    """
    gain, member = np.asarray(gain, dtype=float), np.asarray(member, dtype=bool)
    if gain.shape != member.shape:
        raise UserError(f"gain {gain.shape} and membership {member.shape} shapes differ")

    def side(sel: np.ndarray) -> np.ndarray:
        vals = np.where(sel & np.isfinite(gain), gain, 0.0)
        count = (sel & np.isfinite(gain)).sum(axis=1)
        return _divide(vals.sum(axis=1), count)

    return {"in": side(member), "out": side(~member)}


def anatomy(breakdowns: Sequence[Mapping], *, by: str = "layer") -> tuple[list[str], np.ndarray, np.ndarray]:
    """Each region's share per layer (or parameter type), side by side.

    Args:
        breakdowns: T outputs of :meth:`Region.breakdown` (one per task).
        by: ``"layer"`` or ``"type"``.

    Returns:
        ``(labels, share, density)``: K bucket labels (layers as ``"L0"``…, ``"other"`` for names outside the
        layers; parameter types in :data:`~cl_graft.regions.region.PARAM_TYPES` order), ``share`` (T, K) = fraction of
        region i in bucket k (rows sum to 1, NaN rows for empty regions) and ``density`` (T, K) = selected /
        covered elements of bucket k.
    """
    if by not in ANATOMY_AXES:
        raise UserError(f"anatomy by must be one of {ANATOMY_AXES}, got {by!r}")
    key = "by_layer" if by == "layer" else "by_type"
    buckets: list = []
    for b in breakdowns:
        buckets += [k for k in b[key] if k not in buckets]
    if by == "layer":
        buckets.sort(key=lambda k: (k is None, k or 0))
    labels = [("other" if k is None else f"L{k}") if by == "layer" else str(k) for k in buckets]
    size = np.array([[b[key].get(k, {}).get("size", 0) for k in buckets] for b in breakdowns], dtype=float)
    numel = np.array([[b[key].get(k, {}).get("numel", 0) for k in buckets] for b in breakdowns], dtype=float)
    size, numel = size.reshape(len(breakdowns), len(buckets)), numel.reshape(len(breakdowns), len(buckets))
    return labels, _divide(size, size.sum(axis=1, keepdims=True)), _divide(size, numel)


def top_pairs(matrix: np.ndarray, tasks: Sequence[str], k: int = 3, *,
              symmetric: bool = False) -> list[tuple]:
    """The ``k`` largest off-diagonal entries as ``(task_i, task_j, value)``, largest first (NaNs skipped).

    With ``symmetric`` each unordered pair is listed once (i < j).
    """
    m = np.asarray(matrix, dtype=float)
    cells = [(tasks[i], tasks[j], float(m[i, j])) for i in range(len(tasks)) for j in range(len(tasks))
             if i != j and (not symmetric or i < j) and np.isfinite(m[i, j])]
    return sorted(cells, key=lambda c: -c[2])[:k]
