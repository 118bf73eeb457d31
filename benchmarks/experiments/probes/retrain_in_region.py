"""Probe: does training a few steps inside a small top-|Δ| region recover what grafting it lost?

The default size search (``cl_graft.strategies.graft.sizing``) keeps a rung only when it loses at most 2 points
of the trained model's accuracy, and on MiniLM at the quick preset the top-|Δ| regions of 1% lose about that much,
so the text stream's median size is 5%. This probe measures, per task and size, the test accuracy of θ_pre grafted
with the top-|Δ| region of a fine-tuned model, and of the same graft after ``--steps`` more optimizer steps on
that region's elements and the task head only (the fine-tuning recipe of the preset, the best of two dev
evaluations kept; every other element bit-exact): what a size search that retrains inside a small region could
gain, and at what cost. Dev rows choose the checkpoint; test rows are only reported.

Run: ``python -m cl_graft.benchmarks.experiments.probes.retrain_in_region --data-dir ../shared/data --finetuned-root
DIR --out OUT`` (fine-tuned models are read from ``DIR/<task>``, e.g. the localization benchmark's
``work/finetuned``, else fine-tuned with the quick preset into ``OUT/work``). Writes ``OUT/retrain.json`` and
``OUT/retrain.md`` (the run record: ``OUT/config.json``); ``--combine A/retrain.json,B/retrain.json,... --out OUT``
writes ``OUT/retrain_seeds.md``, the probe over seeds with paired intervals.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import click
from cl_graft.strategies.comparison.metrics import paired_interval

from cl_graft.files import write_json
from cl_graft.grafting.graft import graft_model
from cl_graft.provenance import run_record
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.methods import find_region
from cl_graft.training.evaluate import evaluate
from cl_graft.training.finetune import finetune_
from cl_graft.training.models import build_classifier

from ..localization import get_finetuned
from ..script_out import claimed, combine_seeds, out_options, settings_of, work_folder, write_page


def accuracy(model, rows: list[dict], task: str) -> float:
    return evaluate(model, rows, task)[0]["accuracy"]


def page(result: dict) -> str:
    lines = ["# Retraining inside a small top-|Δ| region (probe)", "",
             (f"Test accuracy (%) of θ_pre grafted with the top-|Δ| region of each size, and after {result['steps']} "
              "more steps on that region and the head only. "
              f"Command: `{result['config']['command_line']}` (git {result['config']['git_revision']})."), "",
             "| task | FT | size % | graft | retrained | gain | seconds |", "|---|---|---|---|---|---|---|"]
    gains = []
    for task, r in result["tasks"].items():
        for row in r["rows"]:
            gains.append(row["retrained"] - row["graft"])
            lines.append(f"| {task} | {100 * r['ft']:.1f} | {100 * row['share']:.1f} | {100 * row['graft']:.1f} | "
                         f"{100 * row['retrained']:.1f} | {100 * gains[-1]:+.1f} | {row['seconds']:.0f} |")
    lines += ["", (f"Mean gain over the {len(gains)} cells: {100 * sum(gains) / len(gains):+.1f} points (one seed, "
                   "one run each: a direction, not a verdict).")]
    return "\n".join(lines) + "\n"


def seeds_page(results: list[dict]) -> str:
    """The probe over seeds (``results``: each seed's ``retrain.json``): per size, the mean over tasks of graft and
    retrained accuracy and of the gain, with the gain's paired 95% t-interval over seeds; then over every cell."""
    seeds = [r["config"]["seed"] for r in results]
    lines = ["# Retraining inside a small top-|Δ| region (probe), over seeds", "",
             f"Seeds {', '.join(map(str, seeds))}; runs: " + "; ".join(
                 f"`{r['config']['command_line']}` (git {r['config']['git_revision'][:7]})" for r in results) + ".",
             "", "| size % | FT | graft | retrained | gain (95% t-interval over seeds) |", "|---|---|---|---|---|"]

    cells = [[{"share": row["share"], "ft": t["ft"], "graft": row["graft"], "retrained": row["retrained"]}
              for t in r["tasks"].values() for row in t["rows"]] for r in results]      # per seed

    def means(share: float | None, key: str) -> list[float]:
        """Per seed, the mean of ``key`` (%) over its cells of size ``share`` (every cell for None)."""
        out = []
        for seed_cells in cells:
            picked = [c[key] for c in seed_cells if share is None or c["share"] == share]
            out.append(100 * sum(picked) / len(picked))
        return out

    shares = sorted({row["share"] for t in results[0]["tasks"].values() for row in t["rows"]})
    for share in [*shares, None]:
        ft, graft, retrained = means(share, "ft"), means(share, "graft"), means(share, "retrained")
        pi = paired_interval(retrained, graft)
        label = f"{100 * share:.1f}" if share is not None else "all"
        lines.append(f"| {label} | {sum(ft) / len(ft):.1f} | {sum(graft) / len(graft):.1f} | "
                     f"{sum(retrained) / len(retrained):.1f} | {pi['mean']:+.1f} [{pi['low']:+.1f}, {pi['high']:+.1f}] |")
    lines += ["", (f"Tasks: {', '.join(results[0]['tasks'])}; {results[0]['steps']} steps inside the region; test "
                   "accuracy, mean over the tasks of each seed.")]
    return "\n".join(lines) + "\n"


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", default=None)
@click.option("--tasks", default="sst2,qnli,agnews", show_default=True)
@click.option("--sizes", default="0.002,0.005,0.01,0.02", show_default=True, help="shares of the graftable elements")
@click.option("--steps", type=int, default=40, show_default=True, help="optimizer steps inside the region")
@click.option("--finetuned-root", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="fine-tuned models are read from <root>/<task> when there")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--combine", default=None, help="Comma-separated retrain.json of earlier runs (one per seed): write "
                                              "retrain_seeds.md over them instead of running.")
@out_options()
def main(data_dir, tasks, sizes, steps, finetuned_root, seed, combine, out, overwrite) -> None:
    params = click.get_current_context().params
    shares = [float(s) for s in sizes.split(",")]
    if combine:
        combine_seeds("probes.retrain_in_region", params, "retrain.json", "retrain_seeds.md", seeds_page)
        return
    with claimed("probes.retrain_in_region", params) as run_dir:
        scratch = work_folder(run_dir, "finetuned")
        result: dict = {"config": run_record(command="benchmarks.experiments.probes.retrain_in_region", **settings_of(params)),
                        "steps": steps, "tasks": {}}
        for task in tasks.split(","):
            ft, splits, preset, _ = get_finetuned(task, finetuned_root, scratch, data_dir, seed)
            pre = build_classifier("minilm", max_length=preset.max_length)
            recipe = replace(preset.finetune, steps=steps, eval_every=max(1, steps // 2), seed=seed)
            r = result["tasks"][task] = {"ft": accuracy(ft, splits.test, task), "n_test": len(splits.test),
                                         "rows": []}
            for share in shares:
                t0 = time.perf_counter()
                region = find_region("topk", pre, ft, splits.train, splits.dev, LocalizeConfig(region_size=share),
                                     task=task, progress=False).region              # global top-|Δ|
                model = graft_model(pre, ft, region)
                before = accuracy(model, splits.test, task)
                finetune_(model, splits.train, splits.dev, recipe, task=task, region=region, progress=False)
                after = accuracy(model, splits.test, task)
                r["rows"].append({"share": share, "elements": region.size, "graft": before, "retrained": after,
                                  "seconds": round(time.perf_counter() - t0, 1)})
                print(f"{task} {100 * share:.1f}%: graft {100 * before:.1f} -> retrained {100 * after:.1f} "
                      f"(FT {100 * r['ft']:.1f})", flush=True)
            write_json(run_dir.path / "retrain.json", result)            # after every task
        write_page(page(result), run_dir, "retrain.md", None)
    print(f"-> {out / 'retrain.json'}, {out / 'retrain.md'}")


if __name__ == "__main__":
    main()
