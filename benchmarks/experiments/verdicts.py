"""The verdicts and table cells every page generator shares: graft (or another reference) minus a strategy,
paired by seed, as Holm-corrected intervals (:func:`holm_intervals`) or one Bonferroni-corrected comparison
(:func:`bonferroni_verdict`), worded by :data:`VERDICT`, or one comparison over test rows by its standard error
(:func:`se_verdict`); and the cells the tables print (:func:`pct`, :func:`pm`,
:func:`mean_sd`)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05
"""The family-wise error rate of every corrected interval."""


def verdicts(reference: str) -> dict[int, str]:
    """How a page words a comparison of ``reference`` minus a strategy: 1 ahead, −1 behind, 0 not separable."""
    return {1: f"{reference} ahead", -1: f"{reference} behind", 0: "not separable"}


VERDICT = verdicts("graft")


def se_verdict(diff: float, se: float) -> str:
    """One comparison without seeds (``region_sweep``), by its declared rule: "beats" if ``diff`` > 2·``se``,
    "loses" if ``diff`` < −2·``se``, else "within noise"."""
    if diff > 2 * se:
        return "beats"
    if diff < -2 * se:
        return "loses"
    return "within noise"


def _t_quantile(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def _two_sided_p(mean: float, sd: float, n: int) -> float:
    """The paired t-test's two-sided p-value of ``mean`` ≠ 0 (``sd`` of the differences, ``n`` pairs). Where
    every pair differs by the same amount (``sd`` = 0, e.g. one test row on every seed) the t-test is undefined
    (it would say p = 0): the exact two-sided sign test's p-value, 2 · 0.5ⁿ, is used instead."""
    from scipy.stats import t

    if sd == 0:
        return min(1.0, 2 * 0.5 ** n) if mean != 0 else 1.0
    return float(2 * t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def holm_intervals(diffs: dict[str, Sequence[float]], *, alpha: float = ALPHA) -> dict[str, dict]:
    """Paired t-intervals of each comparison's differences (one value per seed) at Holm's step-down levels.

    The comparisons are ordered by their paired t-test p-values; the k-th smallest (k = 0, 1, ...) is tested at
    ``alpha / (m − k)`` while every earlier one was rejected; from the first that is not, every later one keeps
    that step's level. Each interval is the two-sided t-interval at its level, so it excludes 0 exactly where
    Holm's procedure rejects (family-wise error ≤ ``alpha`` over the ``m`` comparisons); ``p_holm`` is Holm's
    adjusted p-value.

    Returns:
        name → ``{"n", "mean", "sd", "p", "p_holm", "level", "low", "high", "ahead"}`` (``ahead``: 1, −1, or 0
        where the interval holds 0); names with fewer than 2 values are left out.
    """
    stats = {}
    for name, values in diffs.items():
        d = np.asarray(values, dtype=float)
        if d.size < 2:
            continue
        mean, sd = float(d.mean()), float(d.std(ddof=1))
        stats[name] = {"n": int(d.size), "mean": mean, "sd": sd, "p": _two_sided_p(mean, sd, d.size)}
    m = len(stats)
    order = sorted(stats, key=lambda k: stats[k]["p"])
    rejecting, level, adjusted = True, alpha / max(m, 1), 0.0
    for k, name in enumerate(order):
        s = stats[name]
        if rejecting:
            level = alpha / (m - k)
            rejecting = s["p"] <= level
        adjusted = max(adjusted, min(1.0, (m - k) * s["p"]))
        half = _t_quantile(1 - level / 2, s["n"] - 1) * s["sd"] / math.sqrt(s["n"])
        low, high = s["mean"] - half, s["mean"] + half
        if s["sd"] == 0 and not rejecting:                   # the sign test keeps 0: so does the interval
            low, high = min(low, 0.0), max(high, 0.0)
        s.update(p_holm=adjusted, level=level, low=low, high=high,
                 ahead=(1 if s["mean"] > 0 else -1) if rejecting else 0)
    return stats


def bonferroni_verdict(d: dict, m: int, *, alpha: float = ALPHA) -> int:
    """The verdict (1, −1, 0) of one comparison of a :func:`holm_intervals` result under Bonferroni over ``m``
    comparisons: its t-interval at ``alpha / m`` (simultaneous with the other ``m − 1``), or the exact sign test
    at that level where every pair differs by the same amount."""
    if d["sd"] == 0:
        rejects = d["mean"] != 0 and _two_sided_p(d["mean"], 0.0, d["n"]) <= alpha / m
        return (1 if d["mean"] > 0 else -1) if rejects else 0
    half = _t_quantile(1 - alpha / (2 * m), d["n"] - 1) * d["sd"] / math.sqrt(d["n"])
    return 1 if d["mean"] - half > 0 else -1 if d["mean"] + half < 0 else 0


def mean_sd(values: Sequence[float]) -> dict:
    """``{"mean", "sd"}`` of the finite ``values`` (None where there are none; ``sd`` None for one value)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "sd": None}
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else None}


def pct(x: float | None, missing: str = "–") -> str:
    """A share as a percentage with one decimal; ``missing`` where there is none (None or NaN)."""
    return missing if x is None or math.isnan(x) else f"{100 * x:.1f}"


def pm(d: dict, scale: float = 100.0, fmt: str = ".1f") -> str:
    """A :func:`mean_sd` as ``mean ± sd`` (scaled, ``fmt``); the mean alone without an sd; "–" without a mean."""
    if d["mean"] is None:
        return "–"
    mean = format(scale * d["mean"], fmt)
    return mean if d["sd"] is None else f"{mean} ± {format(scale * d['sd'], fmt)}"
