"""Graft's automatic size with and without retraining (``--retrain``), paired by seed, on any set of streams.

Reads the ``results.json`` of ``cl-graft run ... --strategies graft --retrain R --seed S`` runs found under the
given folders (one run per folder), groups them by stream, model and scenario, and per group writes the average
final accuracy of each ``retrain`` share (mean over seeds), retrained minus not (paired by seed, 95% t-interval),
the median and largest region size, the bytes stored and how many tasks kept their retrained region::

    python -m cl_graft.benchmarks.experiments.probes.retrain_ab --runs "RUN,RUN,..." --out DIR [--page PAGE]

(``DIR/retrain.md`` and the run record ``DIR/config.json``; :mod:`.script_out`).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import click
from cl_graft.regions.names import current_setting_names
from cl_graft.strategies.comparison.metrics import paired_interval
from cl_graft.units import BYTE_UNIT, MB

from ..script_out import ScriptError, claimed, load_results, out_options, write_page


def variant(run: dict) -> tuple[tuple, float, int]:
    """``((stream, model, scenario), retrain share, seed)`` of one results.json."""
    rec = run["run"]
    if "graft" not in run["strategies"] or "graft" not in rec.get("strategy_settings", {}):
        raise ScriptError(f"{rec.get('command_line')}: holds no graft run")
    size = current_setting_names(rec["strategy_settings"]["graft"])["region_size"]
    if not isinstance(size, dict):
        raise ScriptError(f"{rec['command_line']}: a fixed region size, not the automatic one")
    scenario = run.get("scenario") or rec.get("scenario", "task")        # a text run's record names none
    stream = rec["stream"] if isinstance(rec["stream"], str) else ",".join(rec["stream"])
    return (stream, rec["model"], scenario), float(size.get("retrain", 0.0)), int(rec["seed"])


def _summary(graft: dict) -> dict:
    sizes = sorted(s["share"] for s in graft["info"]["sizing"])
    return {"average": 100 * graft["summary"]["average"], "median": 100 * statistics.median(sizes),
            "largest": 100 * sizes[-1], "mb": graft["bytes"] / MB, "tasks": len(sizes),
            "kept": sum(1 for s in graft["info"]["sizing"] if s.get("retrain", {}).get("kept"))}


def page_text(runs: list[dict]) -> str:
    """The page over ``runs`` (results.json holding graft)."""
    groups: dict[tuple, dict[float, dict[int, dict]]] = {}
    for run in runs:
        key, share, seed = variant(run)
        groups.setdefault(key, {}).setdefault(share, {})[seed] = _summary(run["strategies"]["graft"])
    lines = ["# Graft's automatic size with and without retraining", "",
             ("`retrain` R: the size search runs after a share 1 − R of each experience's steps and the last R trains "
              "a region two rungs below the vouched one, kept where it scores at least as well on the held-out rows "
              "(`cl_graft.strategies.graft.retrain`); R = 0 searches after training. Average final accuracy (%), "
              "mean over seeds; the difference paired by seed with its 95% t-interval; sizes as shares of the "
              f"graftable elements (median and largest over every task of every seed); {BYTE_UNIT}. Made by "
              "`benchmarks/experiments/probes/retrain_ab.py` from the runs listed below."), "",
             ("| stream | model | scenario | R | seeds | average | retrained − not | median size % | largest % | MB | "
             "retrained region kept |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (stream, model, scenario), by_share in sorted(groups.items()):
        base = by_share.get(0.0, {})
        for share, seeds in sorted(by_share.items()):
            cells = list(seeds.values())
            common = sorted(set(seeds) & set(base))
            diff = "–"
            if share and len(common) >= 2:
                pi = paired_interval([seeds[s]["average"] for s in common], [base[s]["average"] for s in common])
                diff = f"{pi['mean']:+.2f} [{pi['low']:+.2f}, {pi['high']:+.2f}]"
            sizes = [c["median"] for c in cells]
            lines.append(f"| {stream} | {model} | {scenario} | {share:g} | {len(cells)} | "
                         f"{statistics.mean(c['average'] for c in cells):.2f} | {diff} | "
                         f"{statistics.median(sizes):.2f} | {max(c['largest'] for c in cells):.1f} | "
                         f"{statistics.mean(c['mb'] for c in cells):.2f} | "
                         f"{sum(c['kept'] for c in cells)} of {sum(c['tasks'] for c in cells)} |")
    lines += ["", "Runs (git revision): " + "; ".join(
        f"`{r['run']['command_line']}` ({r['run']['git_revision'][:7]})" for r in runs) + "."]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--runs", required=True, help="Comma-separated cl-graft run folders (or results.json files).")
@out_options(page=True)
def main(runs: str, out: Path, overwrite: bool, page: Path | None) -> None:
    params = click.get_current_context().params
    loaded = [load_results(p) for p in runs.split(",") if p]
    text = page_text(loaded)                                            # bad input: before --out is claimed
    with claimed("probes.retrain_ab", params) as run_dir:
        write_page(text, run_dir, "retrain.md", page)
    print(f"-> {out / 'retrain.md'}")


if __name__ == "__main__":
    main()
