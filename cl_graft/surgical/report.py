"""The table and figures of ``cl-graft surgical``: models side by side, FIM shares per layer and group."""
from __future__ import annotations

from pathlib import Path

from ..plotting import plot_anatomy, plot_grouped_bars
from ..regions.names import current_names

FIM_PNG = "fim_layers.png"
GROUPS_PNG = "fim_groups.png"


def format_surgical(result: dict, *, task: str) -> str:
    """Markdown: the model table, then FIM shares / graft-region shares per layer and ranking stability."""
    def pct(v) -> str:
        return "" if v is None else f"{100 * v:.1f}"

    head = ["model", "layers", "trained params", "acc", "F1", "ECE", "agree FT", "% of FT", "time s"]
    lines = [f"{task}:", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        layers = r["layers"] if isinstance(r["layers"], str) else ("" if r["layers"] is None else
                                                                  ",".join(map(str, r["layers"])))
        cells = [r["name"], layers, f"{r['trained']:,}", pct(r["accuracy"]), pct(r.get("f1")), pct(r["ece"]),
                 pct(r["agreement"]), pct(r["relative"]), "" if r["seconds"] is None else f"{r['seconds']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    layers = result["fim"]["start"]["layers"]
    lines += ["", "| share per layer (%) | " + " | ".join(f"L{i}" for i in layers) + " |",
              "|---|" + "---|" * len(layers)]
    for stage, fim in result["fim"].items():
        lines.append(f"| FIM {stage} | " + " | ".join(pct(s) for s in fim["scores"]) + " |")
    an = current_names(result["anatomy"])                          # results written before the rename: sparsity
    lines.append(f"| graft region {an['region_size']:g} | " + " | ".join(pct(s) for s in an["share"]) + " |")
    lines.append("")
    for pair, per_k in result["stability"].items():
        cells = ", ".join(f"top-{k} overlap {100 * v[f'top{k}_overlap']:.0f}%" for k, v in per_k.items())
        lines.append(f"- FIM ranking {pair}: Spearman {next(iter(per_k.values()))['spearman']:.2f}; {cells}")
    return "\n".join(lines)


def draw_figures(result: dict, out: Path, *, task: str) -> None:
    """``fim_layers.png`` (FIM shares per layer at each stage next to the graft region's) and ``fim_groups.png``
    (FIM shares at θ_pre per layer, stacked by parameter group) in ``out``."""
    start = result["fim"]["start"]
    labels = [f"L{i}" for i in start["layers"]]
    bars = {f"FIM {stage}": fim["scores"] for stage, fim in result["fim"].items()}
    bars[f"graft region {current_names(result['anatomy'])['region_size']:g}"] = result["anatomy"]["share"]
    plot_grouped_bars(bars, out / FIM_PNG, labels=labels, title=f"{task}: FIM score vs graft region, per layer",
                      xlabel="layer", ylabel="share of total")
    plot_anatomy({lab: {g: v[i] for g, v in start["groups"].items()} for i, lab in enumerate(labels)},
                 out / GROUPS_PNG, title=f"{task}: FIM score at θ_pre by parameter group",
                 ylabel="share of total FIM")
