"""The table and figures of ``cl-graft localize``: one Markdown row per model, one anatomy plot per region."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..plotting import plot_anatomy
from ..regions.region import Region, layer_index, param_type


def anatomy_counts(region: Region) -> dict[str, dict[str, int]]:
    """Selected elements per layer label (``L0``…, ``other``) and parameter type, for :func:`plot_anatomy`."""
    out: dict[str, dict[str, int]] = {}
    for n, count in region.counts().items():
        layer = layer_index(n)
        per = out.setdefault("other" if layer is None else f"L{layer}", {})
        per[param_type(n)] = per.get(param_type(n), 0) + count
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == "other", int(kv[0][1:]) if kv[0] != "other" else 0)))


def save_anatomy(region: Region, path: Path, *, title: str) -> Path:
    """The region's anatomy as a PNG: selected elements per layer, stacked by parameter type."""
    return plot_anatomy(anatomy_counts(region), path, title=title)


def format_table(rows: Sequence[Mapping], *, task: str) -> str:
    """A Markdown table: name, size, density %, accuracy, F1, ECE, agreement, OOD accuracies, time."""
    ood_names = sorted({n for r in rows for n in r.get("ood", {})})
    head = ["model", "size", "density %", "acc", "F1", "ECE", "agree", *(f"OOD {n}" for n in ood_names), "time s"]
    lines = [f"{task}:", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    def pct(v: float | None) -> str:
        return "" if v is None else f"{100 * v:.1f}"

    for r in rows:
        cells = [r["name"], "" if r["size"] is None else str(r["size"]),
                 "" if r["density"] is None else f"{100 * r['density']:.3g}", pct(r["accuracy"]),
                 pct(r.get("f1")), pct(r["ece"]), pct(r["agreement"]), *(pct(r["ood"].get(n)) for n in ood_names),
                 "" if r["seconds"] is None else f"{r['seconds']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
