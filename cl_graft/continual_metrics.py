"""Continual-learning metrics from an accuracy matrix, as plain numpy functions.

``R[i, j]`` is the accuracy on task ``j`` after training on experience ``i`` (T × T; row ``i`` is the eval
after experience ``i``). Definitions follow the usual ones (Avalanche ``evaluation/functional.py``):

- average accuracy: mean of the last row, ``mean_j R[T-1, j]``;
- forgetting of task ``j < T-1`` (Chaudhry et al. 2018, https://arxiv.org/abs/1801.10112): the best
  accuracy it ever had after being learned minus its final one, ``max_{j ≤ i < T-1} R[i, j] − R[T-1, j]``;
- backward transfer BWT (Lopez-Paz & Ranzato 2017, https://arxiv.org/abs/1706.08840):
  ``mean_{j < T-1} (R[T-1, j] − R[j, j])``; negative = forgetting.

With a single task (or a one-row result, e.g. joint training) forgetting and BWT are undefined: NaN.
"""
from __future__ import annotations

import numpy as np

from .errors import UserError


def _square(matrix: np.ndarray) -> np.ndarray:
    r = np.asarray(matrix, dtype=float)
    if r.ndim != 2 or r.shape[0] != r.shape[1] or r.shape[0] == 0:
        raise UserError(f"an accuracy matrix must be T × T with T ≥ 1, got shape {r.shape}")
    return r


def final_accuracy(matrix: np.ndarray) -> np.ndarray:
    """Accuracy of every task after the last experience, (T,) — the last row (any number of rows)."""
    r = np.asarray(matrix, dtype=float)
    if r.ndim != 2 or r.shape[0] == 0:
        raise UserError(f"an accuracy matrix must have at least one row, got shape {r.shape}")
    return r[-1].copy()


def average_accuracy(matrix: np.ndarray) -> float:
    """Mean final accuracy over tasks."""
    return float(final_accuracy(matrix).mean())


def forgetting_per_task(matrix: np.ndarray) -> np.ndarray:
    """(T − 1,) best-after-learning minus final accuracy of each task but the last."""
    r = _square(matrix)
    t = r.shape[0]
    return np.array([r[j:t - 1, j].max() - r[t - 1, j] for j in range(t - 1)])


def forgetting(matrix: np.ndarray) -> float:
    """Mean forgetting over tasks but the last (NaN for T = 1)."""
    per = forgetting_per_task(matrix)
    return float(per.mean()) if per.size else float("nan")


def bwt(matrix: np.ndarray) -> float:
    """Backward transfer: mean over tasks but the last of final minus just-learned accuracy (NaN for T = 1)."""
    r = _square(matrix)
    t = r.shape[0]
    return float(np.mean([r[t - 1, j] - r[j, j] for j in range(t - 1)])) if t > 1 else float("nan")


def summarize(matrix: np.ndarray) -> dict:
    """``final`` (list), ``average``, ``forgetting``, ``bwt`` (NaN where undefined, e.g. one-row results)."""
    r = np.asarray(matrix, dtype=float)
    square = r.ndim == 2 and r.shape[0] == r.shape[1]
    return {"final": final_accuracy(r).tolist(), "average": average_accuracy(r),
            "forgetting": forgetting(r) if square else float("nan"), "bwt": bwt(r) if square else float("nan")}
