"""Probe: can any region of 0.5–1% of MiniLM's encoder keep a task's trained accuracy at the continual quick recipe?

Issue 29 asks the default size search for a median region of at most 1% *and* at least 99% of single-task
accuracy on the text stream. This probe asks whether such regions exist at all, whatever a search would choose.
Per task it trains MiniLM with the continual quick recipe (``--steps`` SGD steps, no checkpoint selection) and
scores, on ``--probe-rows`` rows drawn from the task's training file outside the preset's train and dev rows
(never test rows):

- ``full``: the trained model;
- ``topk``: θ_pre grafted with the trained model's top-|Δ| region (what the size search grafts at each rung);
- ``fisher-delta``: grafted with the region of largest F·Δ², F the diagonal empirical Fisher of the trained model
  on ``--fisher-rows`` training rows (the second-order estimate of the loss of resetting an element, Optimal
  Brain Damage, LeCun et al. 1990, applied to Δ);
- ``fish-trained``: trained from the start with only the top-Fisher region of θ_pre (with the new head) free,
  plus the head (FISH masks, Sung et al. 2021, https://arxiv.org/abs/2111.09839), at each of ``--lrs``: the
  region is then the whole of what training changed, so nothing is lost to grafting.

Run: ``python -m cl_graft.benchmarks.experiments.probes.small_regions --data-dir ../shared/data --seed S --out OUT``
(``OUT/small_regions.json`` and ``.md``, the run record ``OUT/config.json``); ``--combine A/small_regions.json,...
--out OUT`` writes ``OUT/small_regions_seeds.md``: per region and size, the accuracy kept as a share of ``full``,
with the paired 95% t-interval over seeds of the difference.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import replace

import click
import torch
from cl_graft.benchmarks.data import load_rows, load_task
from cl_graft.strategies.comparison.metrics import paired_interval
from torch import Tensor

from cl_graft.files import write_json
from cl_graft.grafting.graft import graft_model
from cl_graft.presets import get_preset
from cl_graft.provenance import run_record
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.data import region_data
from cl_graft.regions.fisher import diagonal_fisher
from cl_graft.regions.methods import find_region
from cl_graft.regions.problem import Problem, elements_for
from cl_graft.training.evaluate import evaluate
from cl_graft.training.finetune import finetune_
from cl_graft.training.models import build_classifier, clone_model

from ..script_out import claimed, combine_seeds, out_options, settings_of, write_page

GRAFTS = ("topk", "fisher-delta")


def accuracy(model, rows: list[dict], task: str) -> float:
    return evaluate(model, rows, task)[0]["accuracy"]


def outside_rows(rows: list[dict], used: list[dict], n: int, seed: int) -> list[dict]:
    """At most ``n`` of ``rows`` that are not in ``used`` (compared by content), a seeded sample."""
    seen = {json.dumps(r, sort_keys=True) for r in used}
    rest = [r for r in rows if json.dumps(r, sort_keys=True) not in seen]
    return random.Random(seed).sample(rest, min(n, len(rest)))


def element_scores(pre, ft, data, rows: int, seed: int) -> tuple[Problem, dict[str, Tensor]]:
    """θ_pre and ``ft`` as a :class:`Problem`, and each graft's element scores ``(N,)``: |Δ| (``topk``) and F·Δ²
    (``fisher-delta``; F: ``ft``'s diagonal empirical Fisher on ``rows`` training rows of ``data``)."""
    prob = Problem.build(pre, ft, LocalizeConfig(region_size=1.0))
    work = clone_model(ft).eval()
    for p in work.parameters():
        p.requires_grad_(False)
    _, params = prob.bind(work)
    for p in params:
        p.requires_grad_(True)
    fisher = torch.cat([f.reshape(-1) for f in diagonal_fisher(work, params, data, rows, seed=seed)])   # (N,)
    return prob, {"topk": prob.delta.abs(), "fisher-delta": fisher * prob.delta.square()}


def kept_lines(task: str, r: dict) -> list[str]:
    """One table row per (region, size, lr) cell of a task: accuracy and share of ``full`` kept (%)."""
    return [f"| {task} | {c['region']} | {100 * c['share']:.1f} | {c.get('lr', '') or ''} | "
            f"{100 * c['accuracy']:.1f} | {100 * c['accuracy'] / r['full']:.1f} | {c['seconds']:.0f} |"
            for c in r["cells"]]


def page(result: dict) -> str:
    lines = ["# Can a region of 0.5–1% keep the trained accuracy? (probe)", "",
             (f"Accuracy (%) on {result['probe_rows']} rows per task from the training file outside the preset's train "
              f"and dev rows, after {result['steps']} steps (full), and of each region (see the script's docstring). "
              f"Command: `{result['config']['command_line']}` (git {result['config']['git_revision']})."), "",
             "| task | region | size % | lr | accuracy | % of full | seconds |", "|---|---|---|---|---|---|---|"]
    for task, r in result["tasks"].items():
        lines.append(f"| {task} | full | 100 |  | {100 * r['full']:.1f} | 100.0 | {r['seconds']:.0f} |")
        lines += kept_lines(task, r)
    return "\n".join(lines) + "\n"


def seeds_page(results: list[dict]) -> str:
    """Per (region, size, lr), the mean over tasks and seeds of the share of ``full`` kept, and the paired 95%
    t-interval over seeds of (region − full) in points (each seed: the mean over its tasks)."""
    seeds = [r["config"]["seed"] for r in results]
    lines = ["# Can a region of 0.5–1% keep the trained accuracy? (probe), over seeds", "",
             f"Seeds {', '.join(map(str, seeds))}; runs: " + "; ".join(
                 f"`{r['config']['command_line']}` (git {r['config']['git_revision'][:7]})" for r in results) + ".",
             "", "| region | size % | lr | % of full | region − full, points (95% t-interval over seeds) |",
             "|---|---|---|---|---|"]
    keys = list(dict.fromkeys((c["region"], c["share"], c.get("lr")) for r in results for t in r["tasks"].values()
                              for c in t["cells"]))
    for region, share, lr in keys:
        got, full, kept = [], [], []
        for r in results:
            cells = [(c["accuracy"], t["full"]) for t in r["tasks"].values() for c in t["cells"]
                     if (c["region"], c["share"], c.get("lr")) == (region, share, lr)]
            got.append(100 * sum(a for a, _ in cells) / len(cells))
            full.append(100 * sum(f for _, f in cells) / len(cells))
            kept += [a / f for a, f in cells]
        pi = paired_interval(got, full)
        lines.append(f"| {region} | {100 * share:.1f} | {lr or ''} | {100 * sum(kept) / len(kept):.1f} | "
                     f"{pi['mean']:+.1f} [{pi['low']:+.1f}, {pi['high']:+.1f}] |")
    lines += ["", f"Tasks: {', '.join(results[0]['tasks'])}; {results[0]['steps']} steps."]
    return "\n".join(lines) + "\n"


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", default=None)
@click.option("--tasks", default="sst2,qnli,agnews", show_default=True)
@click.option("--sizes", default="0.005,0.01,0.02,0.05", show_default=True, help="grafted region sizes (shares)")
@click.option("--train-sizes", default="0.005,0.01", show_default=True, help="FISH-trained region sizes (shares)")
@click.option("--lrs", default="0.05,0.2", show_default=True, help="learning rates of the FISH-trained runs")
@click.option("--steps", type=int, default=200, show_default=True, help="optimizer steps (continual quick: 200)")
@click.option("--probe-rows", type=int, default=1000, show_default=True)
@click.option("--fisher-rows", type=int, default=256, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--combine", default=None, help="Comma-separated small_regions.json of earlier runs (one per seed): "
                                              "write small_regions_seeds.md over them instead of running.")
@out_options()
def main(data_dir, tasks, sizes, train_sizes, lrs, steps, probe_rows, fisher_rows, seed, combine, out,
         overwrite) -> None:
    params = click.get_current_context().params
    if combine:
        combine_seeds("probes.small_regions", params, "small_regions.json", "small_regions_seeds.md", seeds_page)
        return
    with claimed("probes.small_regions", params) as run_dir:
        result: dict = {"config": run_record(command="benchmarks.small_regions", **settings_of(params)),
                        "steps": steps, "probe_rows": probe_rows, "tasks": {}}
        preset = get_preset("quick", seed=seed)
        recipe = replace(preset.finetune, steps=steps, eval_every=steps, seed=seed)
        for task in tasks.split(","):
            splits = load_rows(task, data_dir, preset, seed=seed)
            probe = outside_rows(load_task(task, data_dir).train, splits.train + splits.dev, probe_rows, seed)

            torch.manual_seed(seed)
            start = build_classifier("minilm", max_length=preset.max_length)     # θ_pre with the new head
            start.add_task(splits.spec, seed=seed)
            pre = build_classifier("minilm", max_length=preset.max_length)
            t0 = time.perf_counter()
            ft = clone_model(start)
            finetune_(ft, splits.train, [], recipe, task=task, progress=False)
            r = result["tasks"][task] = {"full": accuracy(ft, probe, task), "seconds": time.perf_counter() - t0,
                                         "cells": []}
            t0 = time.perf_counter()
            prob, scores = element_scores(pre, ft, region_data(ft, splits.train, splits.dev, task=task),
                                          fisher_rows, seed)
            r["scores_seconds"] = time.perf_counter() - t0
            for share in (float(s) for s in sizes.split(",")):
                for region in GRAFTS:
                    t0 = time.perf_counter()
                    mask = prob.topk(scores[region], elements_for(share, prob.numel))        # (N,) bool
                    found = prob.region(mask, method=region, cfg=LocalizeConfig(region_size=share), task=task, ft=ft)
                    grafted = accuracy(graft_model(pre, ft, found), probe, task)
                    r["cells"].append({"region": region, "share": share, "accuracy": grafted,
                                       "seconds": time.perf_counter() - t0})
            for share in (float(s) for s in train_sizes.split(",")):
                cfg = LocalizeConfig(region_size=share, batch_size=16, n_batches=max(1, fisher_rows // 16), seed=seed)
                mask = find_region("fish", pre, start, splits.train, [], cfg, task=task, progress=False).region
                for lr in (float(x) for x in lrs.split(",")):
                    t0 = time.perf_counter()
                    model = clone_model(start)
                    finetune_(model, splits.train, [], replace(recipe, lr=lr), task=task, region=mask, progress=False)
                    r["cells"].append({"region": "fish-trained", "share": share, "lr": lr,
                                       "accuracy": accuracy(model, probe, task), "seconds": time.perf_counter() - t0})
            print("\n".join(kept_lines(task, r)), flush=True)
            write_json(run_dir.path / "small_regions.json", result)          # after every task
        write_page(page(result), run_dir, "small_regions.md", None)
    print(f"-> {out / 'small_regions.json'}, {out / 'small_regions.md'}")


if __name__ == "__main__":
    main()
