"""Figures and text of a skill map (:class:`~.results.SkillMap`): PNGs, aligned tables, a plain-text summary.

Everything here reads the numbers of one :class:`~.results.SkillMap` and nothing else (Panigrahi et al. 2023,
§5.1: overlap, transfer and composition of task regions).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import plotting
from . import analysis
from .results import SkillMap


def _off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """A copy of a square (T, T) matrix with NaN on the diagonal, so colours spread over the off-diagonal range."""
    m = np.array(matrix, dtype=float)
    np.fill_diagonal(m, np.nan)
    return m


def draw_figures(sm: SkillMap, fig_dir: str | Path) -> list[Path]:
    """Every figure of a run as PNG under ``fig_dir``, from the numbers in ``sm`` alone."""
    fig_dir, tasks = Path(fig_dir), sm.tasks
    acc = {"θ_pre": sm.acc_pre, **({"single-task FT": sm.acc_single} if sm.acc_single is not None else {}),
           "multi-task FT": sm.acc_mt, "graft own region": np.diag(sm.acc_graft)}
    paths = [
        plotting.plot_grouped_bars(acc, fig_dir / "accuracy.png", labels=tasks, ylabel="accuracy",
                                   title="Accuracy per task"),
        plotting.plot_matrix(_off_diagonal(sm.overlap), fig_dir / "overlap.png", rows=tasks, vmin=0,
                             title="Overlap |γi∩γj| / |γj| (diagonal 1 left blank)", xlabel="j", ylabel="i"),
        plotting.plot_matrix(_off_diagonal(sm.iou), fig_dir / "iou.png", rows=tasks, vmin=0,
                             title="IoU of regions (diagonal 1 left blank)"),
        plotting.plot_matrix(sm.transfer, fig_dir / "transfer.png", rows=tasks, cmap="RdBu", vmin=-1, vmax=1,
                             title="Relative gain of region γi on task j", xlabel="evaluated on task j",
                             ylabel="region of task i"),
    ]
    for axis, a in sm.anatomy.items():
        shares = {t: a["share"][i] for i, t in enumerate(tasks)}
        paths.append(plotting.plot_grouped_bars(shares, fig_dir / f"anatomy_{axis}.png", labels=a["labels"],
                                                ylabel="share of region", title=f"Region anatomy by {axis}"))
    if sm.groups:
        names = list(sm.groups)
        for steps, suffix in ((False, ""), (True, "_steps")):
            label = " + quick steps" if steps else ""
            paths.append(plotting.plot_matrix(
                sm.union_gain(steps=steps), fig_dir / f"composition{suffix}.png", rows=names, cols=tasks,
                cmap="RdBu", vmin=-1, vmax=1, title=f"Relative gain of group unions{label}"))
        g, gs = sm.group_gains(), sm.group_gains(steps=True)
        paths.append(plotting.plot_grouped_bars(
            {"in group": g["in"], "outside": g["out"], "in group + steps": gs["in"],
             "outside + steps": gs["out"]},
            fig_dir / "composition_summary.png", labels=names, ylabel="mean relative gain",
            title="Union of a group's regions"))
    return paths


def table(matrix: np.ndarray, rows: list[str], cols: list[str] | None = None, *, fmt: str = "6.3f") -> str:
    """A matrix as aligned text (rows × cols, NaN as ``n/a``), for notebooks and logs."""
    cols = rows if cols is None else cols
    width = max(len(format(0.0, fmt)), *(len(c) for c in cols)) + 1
    left = max(len(r) for r in rows) + 1
    lines = [" " * left + "".join(f"{c:>{width}}" for c in cols)]
    for r, vals in zip(rows, np.asarray(matrix, dtype=float), strict=True):
        cells = "".join(f"{format(v, fmt) if np.isfinite(v) else 'n/a':>{width}}" for v in vals)
        lines.append(f"{r:<{left}}{cells}")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:.1f}%"


def summary(sm: SkillMap) -> str:
    """A plain-text report: accuracy per task, region sizes, most-overlapping pairs, group unions."""
    head = f"{'task':<10}{'pre':>7}{'single':>8}{'MT':>7}{'graft':>7}{'|γ|':>9}{'density':>10}"
    lines = [head]
    for i, t in enumerate(sm.tasks):
        single = _pct(sm.acc_single[i]) if sm.acc_single is not None else "n/a"
        size = int(sm.region_elements[i])
        lines.append(f"{t:<10}{_pct(sm.acc_pre[i]):>7}{single:>8}{_pct(sm.acc_mt[i]):>7}"
                     f"{_pct(sm.acc_graft[i, i]):>7}{size:>9}{size / sm.numel:>10.2e}")
    chance = sm.chance_overlap
    pairs = analysis.top_pairs(sm.iou, sm.tasks, k=4, symmetric=True)
    lines.append("most similar regions (IoU): " + ", ".join(f"{a}~{b} {v:.3f}" for a, b, v in pairs))
    idx = [(sm.tasks.index(a), sm.tasks.index(b)) for a, b, _ in pairs]
    ratio = [sm.overlap[i, j] / chance[i, j] if chance[i, j] else np.nan for i, j in idx]
    lines.append("  overlap / chance level for those pairs: "
                 + ", ".join(f"{r:.0f}x" if np.isfinite(r) else "n/a" for r in ratio))
    if sm.groups:
        g, gs = sm.group_gains(), sm.group_gains(steps=True)
        for k, name in enumerate(sm.groups):
            members = ",".join(sm.groups[name])
            lines.append(f"union {name} ({members}): relative gain in group {_pct(g['in'][k])}, outside "
                         f"{_pct(g['out'][k])}; after the quick steps {_pct(gs['in'][k])} / "
                         f"{_pct(gs['out'][k])}")
    return "\n".join(lines)
