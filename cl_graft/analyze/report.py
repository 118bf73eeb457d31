"""The table and figures of ``cl-graft analyze``: calibration and OOD per model, reliability, WiSE curves."""
from __future__ import annotations

from pathlib import Path

from ..plotting import plot_curves, plot_reliability

RELIABILITY_PNG = "reliability.png"
WISE_PNG = "wise.png"


def format_analysis(result: dict, *, task: str, metric: str) -> str:
    """Markdown: per model ID score, ECE, ECE after temperature, head re-fit, OOD; then the WiSE curves."""
    def pct(v) -> str:
        return "" if v is None else f"{100 * v:.1f}"

    rows = result["rows"]
    ood = sorted({n for r in rows for n in r["ood"]})
    calib = any("temperature" in r for r in rows)
    head = ["model", metric, "ECE"] + (["T", "ECE@T", f"refit {metric}", "refit ECE"] if calib else [])
    head += [f"OOD {n}" for n in ood] + ([f"refit OOD {n}" for n in ood] if calib else []) + ["time s"]
    lines = [f"{task}:", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        refit = r.get("refit", {})
        cells = [r["name"], pct(r["score"]), pct(r["ece"])]
        if calib:
            cells += [f"{r['temperature']:.2f}", pct(r["ece_scaled"]), pct(refit.get("score")), pct(refit.get("ece"))]
        cells += [pct(r["ood"][n]) for n in ood]
        cells += [pct(refit.get("ood", {}).get(n)) for n in ood] if calib else []
        cells.append(f"{r['seconds']:.0f}" if r["seconds"] else "")
        lines.append("| " + " | ".join(cells) + " |")
    wise_ = result["wise"]
    if wise_["curves"]:
        names = list(wise_["curves"])
        cols = [f"{c} {w}" for c in names for w in ["ID", "ECE", *(f"OOD {n}" for n in ood)]]
        lines += ["", "| α | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for i, a in enumerate(wise_["alphas"]):
            cells = []
            for c in names:
                p = wise_["curves"][c][i]
                cells += [pct(p["score"]), pct(p["ece"]), *(pct(p["ood"][n]) for n in ood)]
            lines.append(f"| {a:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw_figures(result: dict, out: Path, *, task: str) -> None:
    """``reliability.png`` (when calibration ran) and ``wise.png`` (ID and OOD accuracy along each WiSE curve,
    when the wise section ran) in ``out``."""
    if result["reliability"]:
        plot_reliability(result["reliability"], out / RELIABILITY_PNG, title=f"{task}: reliability on test rows")
    curves = {}
    for name, points in result["wise"]["curves"].items():
        curves[f"{name} ID"] = [p["score"] for p in points]
        curves.update({f"{name} {n}": [p["ood"][n] for p in points] for n in points[0]["ood"]} if points else {})
    if curves:
        plot_curves(curves, out / WISE_PNG, x=result["wise"]["alphas"],
                    title=f"{task}: WiSE, θ_pre (α=0) to model (α=1)", xlabel="α", ylabel="accuracy")
