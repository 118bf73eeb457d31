"""Matplotlib figures from arrays only (the one module that imports matplotlib). Every function writes a PNG.

Inputs are plain numpy arrays / dicts produced by the analysis and result code, so figures can be redrawn from
saved JSON without recomputing anything.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .files import atomic_write


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_matrix(matrix: np.ndarray, path: str | Path, *, rows: Sequence[str], cols: Sequence[str] | None = None,
                title: str = "", xlabel: str = "", ylabel: str = "", fmt: str = ".2f", cmap: str = "viridis",
                vmin: float | None = None, vmax: float | None = None) -> Path:
    """Annotated heatmap of an (R, C) matrix; NaN cells are left blank. Returns the PNG path."""
    plt = _plt()
    m = np.asarray(matrix, dtype=float)
    cols = list(cols) if cols is not None else list(rows)
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(cols), 0.8 + 0.6 * len(rows)), dpi=120)
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    finite = m[np.isfinite(m)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            if np.isfinite(m[i, j]):
                ax.text(j, i, format(m[i, j], fmt), ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] < mid else "black")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return _save(fig, path)


def plot_anatomy(counts: Mapping[str, Mapping[str, float]], path: str | Path, *, title: str = "",
                 ylabel: str = "parameters in region") -> Path:
    """Stacked bars of a region's size per layer (x) and parameter type (stack).

    Args:
        counts: ``{layer_label: {param_type: selected_elements}}``, e.g. from ``Region.breakdown()`` (or any
            per-layer, per-type amount, named by ``ylabel``).
    """
    plt = _plt()
    layers = list(counts)
    types = sorted({t for per in counts.values() for t in per})
    fig, ax = plt.subplots(figsize=(1.5 + 0.6 * len(layers), 3.6), dpi=120)
    bottom = np.zeros(len(layers))
    for t in types:
        vals = np.array([counts[layer].get(t, 0) for layer in layers], dtype=float)
        ax.bar(range(len(layers)), vals, bottom=bottom, label=t)
        bottom += vals
    ax.set_xticks(range(len(layers)), layers, rotation=0)
    ax.set(title=title, xlabel="layer", ylabel=ylabel)
    ax.legend(fontsize=7, ncol=2, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def plot_curves(curves: Mapping[str, Sequence[float]], path: str | Path, *, x: Sequence | None = None,
                title: str = "", xlabel: str = "", ylabel: str = "") -> Path:
    """One line per named series (e.g. a task's accuracy after each experience)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    for name, ys in curves.items():
        xs = list(x) if x is not None else list(range(1, len(ys) + 1))
        ax.plot(xs[:len(ys)], ys, marker="o", label=name)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png"))
    finally:
        _plt().close(fig)


def plot_grouped_bars(values: Mapping[str, Sequence[float]], path: str | Path, *, labels: Sequence[str],
                      title: str = "", xlabel: str = "", ylabel: str = "") -> Path:
    """Side-by-side bars: one group per label (x), one bar per named series; NaN bars are left out.

    Args:
        values: ``{series: (K,) values}``, e.g. each task's region share per layer, or accuracy per model.
        labels: the K group labels on the x axis.
    """
    plt = _plt()
    series = list(values)
    width = 0.8 / max(len(series), 1)
    wide = min(max(2.0 + 0.25 * len(labels) * max(len(series), 2), 5.0), 12.0)
    fig, ax = plt.subplots(figsize=(wide, 3.6), dpi=120)
    for s, name in enumerate(series):
        ys = np.asarray(values[name], dtype=float)
        xs = np.arange(len(labels)) + (s - (len(series) - 1) / 2) * width
        ok = np.isfinite(ys)
        ax.bar(xs[ok], ys[ok], width=width, label=name)
    tilt = len(labels) > 6
    ax.set_xticks(range(len(labels)), labels, rotation=45 if tilt else 0, ha="right" if tilt else "center")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.legend(fontsize=7, ncol=min(len(series), 4 if wide > 6 else 2), frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def plot_reliability(panels: Mapping[str, Mapping[str, Sequence]], path: str | Path, *, title: str = "") -> Path:
    """Reliability diagrams, one panel per model: accuracy per confidence bin against the diagonal.

    Args:
        panels: ``{model: {"edges": (B+1,), "accuracy": (B,), "confidence": (B,), "count": (B,), "ece": float}}``
            as from :func:`cl_graft.analyze.calibration.reliability`; empty bins (None) are left out.
    """
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 2.9), dpi=120, squeeze=False)
    for ax, (name, bins) in zip(axes[0], panels.items(), strict=True):
        edges = np.asarray(bins["edges"], dtype=float)
        acc = np.array([np.nan if a is None else a for a in bins["accuracy"]], dtype=float)
        ok = np.isfinite(acc)
        ax.bar(edges[:-1][ok], acc[ok], width=np.diff(edges)[ok], align="edge", edgecolor="black", linewidth=0.4)
        ax.plot([0, 1], [0, 1], color="gray", linestyle="--", linewidth=0.8)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=f"{name}\nECE {100 * bins['ece']:.1f}", xlabel="confidence")
    axes[0][0].set_ylabel("accuracy")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
