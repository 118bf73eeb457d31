"""The committed artifacts README.md's figures are rebuilt from, and the small formatters its quotes share
(``tests/docs/test_readme_figures.py``: every quoted passage equals what its artifact says)."""
from __future__ import annotations

import functools
import json
import math
import statistics

from scipy import stats

from helpers import REPO_ROOT

README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "benchmarks" / "results"
KB, MB = 10 ** 3, 10 ** 6                          # the one unit of every page: MB = 10^6 bytes (cl_graft.units)
WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def count(n: int, noun: str) -> str:
    """``n`` ``noun``s in words as the README writes small counts: "one seed", "four cores"."""
    return f"{WORDS[n]} {noun}{'s' if n != 1 else ''}"


@functools.cache
def art(rel: str) -> dict:
    """A committed JSON artifact, by its path under benchmarks/results."""
    return json.loads((RESULTS / rel).read_text(encoding="utf-8"))


def flat(text: str) -> str:
    return " ".join(text.replace("−", "-").split())


def pct(share: float, digits: int = 1) -> str:
    return f"{100 * share:.{digits}f}"


def span(values, fmt=lambda v: f"{v:g}", sep="–") -> str:
    """``low–high`` of ``values`` formatted (one value when they are equal)."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}{sep}{high}"


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval of ``values``."""
    mean = statistics.mean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def signed(x: float) -> str:
    return f"{x:+.1f}"
