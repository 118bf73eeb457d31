"""Continual-learning metrics from an accuracy matrix, as plain numpy functions.

``R[i, j]`` is the accuracy on task ``j`` after training on experience ``i`` (T × T; row ``i`` is the eval
after experience ``i``). Definitions follow the usual ones (Avalanche ``evaluation/functional.py``):

- average accuracy: mean of the last row, ``mean_j R[T-1, j]``;
- average incremental accuracy (Rebuffi et al. 2017, iCaRL, https://arxiv.org/abs/1611.07725): after each
  experience ``i`` the mean accuracy over the tasks seen so far, averaged over the experiences,
  ``mean_i mean_{j ≤ i} R[i, j]``;
- forgetting of task ``j < T-1`` (Chaudhry et al. 2018, https://arxiv.org/abs/1801.10112): the best
  accuracy it ever had after being learned minus its final one, ``max_{j ≤ i < T-1} R[i, j] − R[T-1, j]``;
- backward transfer BWT (Lopez-Paz & Ranzato 2017, https://arxiv.org/abs/1706.08840):
  ``mean_{j < T-1} (R[T-1, j] − R[j, j])``; negative = forgetting.

With a single task (or a one-row result, e.g. joint training) forgetting and BWT are undefined: NaN.

Sanity checks (:func:`sanity_flags`): a strategy is *probably misconfigured* when its accuracy matrix equals
Naive's (same seed; every cell within :data:`EQUAL_TOLERANCE`, i.e. no task won or lost a test row that Naive
did not — a plugin that does nothing) or when it sits *at chance* on most tasks: more than half of its final row
inside the chance band of the task, ``[1/classes − CHANCE_MARGIN, max(1/classes, majority share) +
CHANCE_MARGIN]`` (a model answering one class for every row, or one whose weights went NaN).
"""
from __future__ import annotations

import numpy as np

from cl_graft.errors import UserError


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


def average_incremental_accuracy(matrix: np.ndarray) -> float:
    """Mean over experiences of the mean accuracy on the tasks seen so far (NaN for a one-row result of more than
    one task: there is no accuracy after each experience)."""
    r = np.asarray(matrix, dtype=float)
    if r.ndim == 2 and r.shape[0] == 1 and r.shape[1] > 1:
        return float("nan")
    r = _square(r)
    return float(np.mean([r[i, :i + 1].mean() for i in range(r.shape[0])]))


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


T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Two-sided 95% quantiles of Student's t for 1 … 30 degrees of freedom (1.96, the normal one, beyond)."""


def paired_interval(a, b) -> dict:
    """Mean of the paired differences ``a − b`` (e.g. one strategy vs another, seed by seed) with its 95%
    t-interval: ``{"n", "mean", "std", "low", "high", "ahead"}``; ``ahead`` is +1 / −1 when the interval
    excludes 0 on that side, else 0. Needs at least two pairs. Where every pair differs by the same amount
    (``std`` = 0, e.g. one test row on every seed) the t-interval is a point and proves nothing: the exact
    two-sided sign test decides instead (p = 2 · 0.5ⁿ ≤ 0.05 from 6 pairs), and the interval reaches 0 where it
    does not reject.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise UserError(f"paired_interval needs two equal-length series of >= 2 values, got {a.shape} and {b.shape}")
    d = a - b
    n, mean, std = d.size, float(d.mean()), float(d.std(ddof=1))
    half = (T_975[n - 2] if n - 1 <= len(T_975) else 1.96) * std / float(np.sqrt(n))
    low, high = mean - half, mean + half
    if std == 0 and 2 * 0.5 ** n > 0.05:
        low, high = min(low, 0.0), max(high, 0.0)
    return {"n": n, "mean": mean, "std": std, "low": low, "high": high,
            "ahead": 1 if low > 0 else -1 if high < 0 else 0}


EQUAL_TOLERANCE = 0.001
"""Largest |difference| of two accuracies (fractions) still called equal: under one test row of any task with
fewer than 1000 test rows, far above JSON rounding."""
CHANCE_MARGIN = 0.02
"""Half-width, in accuracy (fraction), of the band around a task's chance level that counts as *at chance*."""


def equals_matrix(matrix, reference, *, tolerance: float = EQUAL_TOLERANCE) -> bool:
    """Whether two accuracy matrices (rows × tasks, NaN for tasks not yet seen) have the same shape, NaN in the
    same cells and every other cell within ``tolerance``."""
    a, b = np.asarray(matrix, dtype=float), np.asarray(reference, dtype=float)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    seen = ~np.isnan(a)
    return bool(np.all(np.abs(a[seen] - b[seen]) <= tolerance))


def chance_band(classes: int, majority: float | None = None, *, margin: float = CHANCE_MARGIN) -> tuple[float, float]:
    """``(low, high)``: the accuracies of a task with ``classes`` classes that count as chance — ``1/classes`` ±
    ``margin``, stretched up to the ``majority`` class share (what answering that class always scores) when
    known."""
    if classes < 1:
        raise UserError(f"a task has at least one class, got {classes}")
    level = 1.0 / classes
    return level - margin, max(level, majority if majority is not None else level) + margin


def at_chance_tasks(final, bands) -> list[int]:
    """Indices of the tasks whose final accuracy lies in its chance band (``bands``: one ``(low, high)`` per
    task, :func:`chance_band`) and is below 100%: a perfect score is never called chance, even where the band
    reaches it (a one-class task, which its stream says it is)."""
    final = np.asarray(final, dtype=float)
    if len(bands) != final.size:
        raise UserError(f"one chance band per task: {len(bands)} bands for {final.size} tasks")
    return [j for j, (v, (low, high)) in enumerate(zip(final, bands)) if low <= v <= high and v < 1.0]


def sanity_flags(matrix, *, plain=None, bands=None) -> list[dict]:
    """Why a strategy's result is probably misconfigured, ``[]`` when nothing is wrong: ``{"flag":
    "equals_naive", "tolerance"}`` when ``matrix`` equals ``plain``, the matrix of plain fine-tuning (Naive,
    the "plain" reference of :data:`~..interface.entry.REFERENCES`; :func:`equals_matrix`), and ``{"flag":
    "at_chance", "tasks", "of", "margin"}`` when more than half of the final row is at chance
    (:func:`at_chance_tasks`; ``bands`` per task). Give ``plain=None`` for Naive itself or when it did not
    run, ``bands=None`` when the tasks' classes are unknown."""
    flags = []
    if plain is not None and equals_matrix(matrix, plain):
        flags.append({"flag": "equals_naive", "tolerance": EQUAL_TOLERANCE})
    if bands is not None:
        final = final_accuracy(matrix)
        tasks = at_chance_tasks(final, bands)
        if 2 * len(tasks) > final.size:
            flags.append({"flag": "at_chance", "tasks": tasks, "of": int(final.size), "margin": CHANCE_MARGIN})
    return flags


def flag_text(flag: dict) -> str:
    """One line for a :func:`sanity_flags` entry."""
    if flag["flag"] == "equals_naive":
        return f"accuracy matrix equals naive's (every cell within {100 * flag['tolerance']:.1f} points)"
    return (f"at chance on {len(flag['tasks'])} of {flag['of']} tasks after the last experience (1/classes ± "
            f"{100 * flag['margin']:.0f} points, up to the majority class share)")
