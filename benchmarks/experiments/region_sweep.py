"""Learned region vs top-|Δ| at tiny sparsities, chosen honestly on dev.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600) learn the grafting region γ (method ``graft``,
:mod:`cl_graft.regions.learned`); the plain baseline is the top-|Δ| region (method ``topk``) of the same size.
For each task and sparsity this script finds the top-k region and the learned region at every point of a small
declared grid of learned-region settings, and compares them without ever choosing on test rows:

- the preset's dev rows are split (stratified by label, seeded) into two halves: **dev-select**, handed to
  ``learn_region`` for its own selection of the best step (with the training rows), and **dev-choose**, used
  only to choose the grid point (the top-k region and FT are scored on it the same way);
- the grid point with the best dev-choose accuracy (the earliest of the grid on ties) is chosen BEFORE any test
  row is scored (:func:`choose` refuses candidates that already carry test scores);
- then every candidate (FT, top-k, every grid point) is scored on the test rows: accuracy, ECE, and the paired
  standard error of "chosen − top-k" over the same test rows.

Run (fine-tunes of ``cl-graft finetune --preset quick`` with the same seed)::

    python -m cl_graft.benchmarks.experiments.region_sweep --data-dir ../shared/data \\
        --finetuned sst2=runs/ft/sst2,agnews=runs/ft/agnews,qnli=runs/ft/qnli --out DIR \\
        --page benchmarks/results/region_sweep.md

Writes ``DIR/region_sweep.json`` and ``DIR/region_sweep.md`` (tables; after every cell), the run record
``DIR/config.json`` (``--out`` is claimed as a command's folder, :mod:`.script_out`), and the page at ``--page``.
Tasks can run as parallel processes (one ``--finetuned task=folder`` and ``--out`` each) and be joined with
``--merge DIR_A --merge DIR_B ... --out DIR`` (folders of earlier runs, or their ``region_sweep.json``).
"""
from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import click
import numpy as np
import torch

from cl_graft.artifacts import load_classifier
from cl_graft.errors import UserError
from cl_graft.files import read_json, write_json
from cl_graft.grafting.graft import graft_model
from cl_graft.outdir import OutDir
from cl_graft.presets import get_preset
from cl_graft.provenance import finish_record, portable_path, run_record
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.learned import learn_region
from cl_graft.regions.methods import find_region
from cl_graft.training.evaluate import evaluate
from cl_graft.training.models import build_classifier, resolve_device

from .script_out import claimed, out_options, settings_of, write_page
from .verdicts import pct as _pct
from .verdicts import se_verdict

RESULT = "region_sweep.json"


def split_dev(rows: Sequence[dict], seed: int) -> tuple[list[dict], list[dict]]:
    """Two disjoint halves of ``rows`` (dev-select, dev-choose), stratified by label and seeded; an odd class
    gives its extra row to dev-choose. Each half keeps the rows' original order."""
    by_label: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_label.setdefault(r["label"], []).append(i)
    rng = random.Random(seed)
    select: list[int] = []
    for label in sorted(by_label):
        idx = by_label[label][:]
        rng.shuffle(idx)
        select += idx[:len(idx) // 2]
    chosen = set(select)
    return [rows[i] for i in sorted(select)], [r for i, r in enumerate(rows) if i not in chosen]


def choose(candidates: Sequence[Mapping]) -> int:
    """Index of the candidate with the best ``dev_choose`` accuracy (the earliest on ties).

    Raises:
        ValueError: a candidate already carries test scores (the choice must come before test is scored), or
            there is no candidate.
    """
    if not candidates:
        raise ValueError("no candidate to choose from")
    if any("test" in c for c in candidates):
        raise ValueError("choose before scoring test: a candidate already has test scores")
    best = 0
    for i, c in enumerate(candidates):
        if c["dev_choose"] > candidates[best]["dev_choose"]:
            best = i
    return best


def paired_se(correct_a: np.ndarray, correct_b: np.ndarray) -> float:
    """Standard error of mean(correct_a) − mean(correct_b) over the same rows (paired; 0/1 arrays)."""
    d = np.asarray(correct_a, dtype=float) - np.asarray(correct_b, dtype=float)
    if d.size < 2:
        return float("nan")
    return float(d.std(ddof=1) / math.sqrt(d.size))


def grid_label(point: Mapping) -> str:
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def _dev(model, rows, task) -> float:
    return float(evaluate(model, rows, task)[0]["accuracy"])


def _test(model, rows, task) -> tuple[dict, np.ndarray]:
    metrics, preds = evaluate(model, rows, task)
    labels = np.array([r["label"] for r in rows])
    return {"accuracy": float(metrics["accuracy"]), "ece": float(metrics["ece"])}, preds == labels


def run_cell(pre, ft, splits, dev_select, dev_choose, *, task: str, sparsity: float, base: LocalizeConfig,
             grid: list[dict]) -> dict:
    """One (task, sparsity): find and dev-score every candidate, choose, THEN score test."""
    cands: list[dict] = []
    regions = []
    t0 = time.perf_counter()
    topk = find_region("topk", pre, ft, splits.train, dev_select, LocalizeConfig(region_size=sparsity, seed=base.seed),
                       task=task, progress=False).region
    cands.append({"name": "topk", "size": topk.size, "seconds": round(time.perf_counter() - t0, 2),
                  "dev_choose": _dev(graft_model(pre, ft, topk), dev_choose, task)})
    regions.append(topk)
    print(f"  {task} {sparsity:g} topk: size {topk.size}, dev-choose {100 * cands[-1]['dev_choose']:.1f}", flush=True)
    for point in grid:
        cfg = LocalizeConfig.from_json({**base.to_json(), **point, "region_size": sparsity})
        res = learn_region(pre, ft, splits.train, dev_select, cfg, task=task, progress=False)
        best = next(h for h in res.history if h["step"] == res.region.meta["best_step"])
        cands.append({"name": f"graft[{grid_label(point)}]", "point": point, "size": res.region.size,
                      "seconds": round(res.seconds, 1), "best_step": res.region.meta["best_step"],
                      "select_train": best["train"], "select_dev": best["dev"],
                      "dev_choose": _dev(graft_model(pre, ft, res.region), dev_choose, task)})
        regions.append(res.region)
        c = cands[-1]
        print(f"  {task} {sparsity:g} {c['name']}: size {c['size']}, best step {c['best_step']}, "
              f"dev-choose {100 * c['dev_choose']:.1f} ({c['seconds']:.0f} s)", flush=True)
    chosen = 1 + choose(cands[1:])                         # among the graft grid points, before any test score
    cell = {"chosen": cands[chosen]["name"], "chosen_point": cands[chosen]["point"]}
    correct = []
    for c, region in zip(cands, regions):                  # only now: test rows
        c["test"], ok = _test(graft_model(pre, ft, region), splits.test, task)
        correct.append(ok)
    diff = cands[chosen]["test"]["accuracy"] - cands[0]["test"]["accuracy"]
    p = cands[0]["test"]["accuracy"]
    se_single = math.sqrt(p * (1 - p) / len(splits.test))
    se_pair = paired_se(correct[chosen], correct[0])
    best_test = max(range(1, len(cands)), key=lambda i: cands[i]["test"]["accuracy"])
    cell.update({"candidates": cands, "diff_test": diff, "se_single": se_single, "se_paired": se_pair,
                 "verdict": se_verdict(diff, se_pair), "diff_dev_choose": cands[chosen]["dev_choose"] -
                 cands[0]["dev_choose"],
                 "posthoc_best_test": {"name": cands[best_test]["name"],   # NOT a valid selection: reported only
                                       "diff_test": cands[best_test]["test"]["accuracy"] - p}})
    print(f"  {task} {sparsity:g}: chosen {cell['chosen']}: test {100 * diff:+.1f} vs topk "
          f"(paired SE {100 * se_pair:.1f}, single SE {100 * se_single:.1f}) -> {cell['verdict']}", flush=True)
    return cell


def pct(v: float | None) -> str:
    """A share in percent (:func:`.verdicts.pct`); an empty cell where there is none."""
    return _pct(v, missing="")


def markdown(result: dict) -> str:
    lines = ["# Learned region vs top-|Δ|, chosen on dev", "",
             ("Generated by `benchmarks/experiments/region_sweep.py` (see its docstring); command: "
             f"`{result['config']['command_line']}`; git {result['config']['git_revision']}. One seed."), "",
             ("Accuracies in %. dev-choose = the half of the preset's dev rows used only to choose the grid point; "
             "Δ = chosen graft − top-k on test; SE = paired standard error of Δ on the same test rows; "
             "verdict: beats/loses if |Δ| > 2 SE, else within noise. Post-hoc = the best grid point by TEST "
             "(not a valid choice; shown to bound what any choice could have gained)."), "",
             ("| task | sparsity | n test | FT test | top-k dev-choose / test | chosen point | chosen dev-choose / test "
             "| Δ test | SE paired (single) | verdict | post-hoc best Δ |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, cells in result["cells"].items():
        ft = result["ft"][task]
        for s, cell in cells.items():
            c = {x["name"]: x for x in cell["candidates"]}
            top, ch = c["topk"], c[cell["chosen"]]
            lines.append(f"| {task} | {float(s):.2%} | {ft['n_test']} | {pct(ft['test'])} | {pct(top['dev_choose'])} / "
                         f"{pct(top['test']['accuracy'])} | {grid_label(cell['chosen_point'])} | "
                         f"{pct(ch['dev_choose'])} / {pct(ch['test']['accuracy'])} | {100 * cell['diff_test']:+.1f} | "
                         f"{pct(cell['se_paired'])} ({pct(cell['se_single'])}) | {cell['verdict']} | "
                         f"{100 * cell['posthoc_best_test']['diff_test']:+.1f} |")
    lines += ["", "## Every candidate", "",
              "| task | sparsity | candidate | size | best step | dev-choose | test acc | test ECE | seconds |",
              "|---|---|---|---|---|---|---|---|---|"]
    for task, cells in result["cells"].items():
        for s, cell in cells.items():
            for x in cell["candidates"]:
                mark = " (chosen)" if x["name"] == cell["chosen"] else ""
                lines.append(f"| {task} | {float(s):.2%} | {x['name']}{mark} | {x['size']} | {x.get('best_step', '')} | "
                             f"{pct(x['dev_choose'])} | {pct(x['test']['accuracy'])} | {pct(x['test']['ece'])} | "
                             f"{x['seconds']} |")
    return "\n".join(lines) + "\n"


def merge(parts: Sequence[dict]) -> dict:
    """One result from per-task results of the same settings (each keeps its own run record in ``runs``)."""
    keys = ("localize_base", "grid", "split_seed")
    for p in parts[1:]:
        if any(p[k] != parts[0][k] for k in keys):
            raise SystemExit("cannot merge results of different settings")
    out = {"config": {"command_line": " ; ".join(p["config"]["command_line"] for p in parts),
                      "git_revision": sorted({p["config"]["git_revision"] for p in parts})},
           "runs": [p["config"] for p in parts], **{k: parts[0][k] for k in keys}, "ft": {}, "cells": {}}
    for p in parts:
        out["ft"].update(p["ft"])
        out["cells"].update(p["cells"])
    return out


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", default=None)
@click.option("--finetuned", default=None, help="task=folder,... (cl-graft finetune --preset quick outputs)")
@click.option("--sparsities", default="1e-4,5e-4", show_default=True)
@click.option("--lrs", default="2,4", show_default=True)
@click.option("--base-fractions", default="1,0.5", show_default=True)
@click.option("--steps", type=int, default=12, show_default=True)
@click.option("--n-batches", type=int, default=2, show_default=True)
@click.option("--batch-size", type=int, default=16, show_default=True, help="rows per batch (a step averages "
              "--n-batches of them)")
@click.option("--normalize", type=click.Choice(["budget", "max", "none"]), default="budget", show_default=True,
              help="the mask step's scaling (LocalizeConfig.normalize; none: the paper's raw step, lr about 1e7)")
@click.option("--select-rows", type=int, default=64, show_default=True)
@click.option("--eval-every", type=int, default=4, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="cpu", show_default=True, help="where the models run: cpu, cuda, auto, ...")
@click.option("--split-seed", type=int, default=13, show_default=True)
@click.option("--merge", "merge_paths", type=click.Path(exists=True, path_type=Path), multiple=True,
              help="only merge these per-task results (earlier --out folders or their region_sweep.json; repeat "
                   "the option)")
@out_options(page=True)
def main(data_dir, finetuned, sparsities, lrs, base_fractions, steps, n_batches, batch_size, normalize, select_rows,
         eval_every, seed, device, split_seed, merge_paths, out, overwrite, page) -> None:
    params = click.get_current_context().params
    if merge_paths:
        merged = merge([read_json(p / RESULT if p.is_dir() else p) for p in merge_paths])
        with claimed("region_sweep", params) as run_dir:
            write_json(run_dir.path / RESULT, merged)
            write_page(markdown(merged), run_dir, "region_sweep.md", page)
        print(f"-> {out / RESULT}", flush=True)
        return
    with claimed("region_sweep", params) as run_dir:
        _sweep(run_dir, params)
    print(f"-> {out / RESULT}", flush=True)


def _sweep(run_dir: OutDir, params: dict) -> None:
    """Every task × sparsity cell of the script's options ``params``; the results and the page are written after
    each."""
    data_dir, finetuned, sparsities, lrs, base_fractions, seed, split_seed, page = (params[k] for k in (
        "data_dir", "finetuned", "sparsities", "lrs", "base_fractions", "seed", "split_seed", "page"))
    steps, n_batches, select_rows, eval_every, batch_size, normalize, device = (params[k] for k in (
        "steps", "n_batches", "select_rows", "eval_every", "batch_size", "normalize", "device"))
    if not finetuned:
        raise UserError("--finetuned task=folder,... is required (or --merge)")
    folders = dict(kv.split("=", 1) for kv in finetuned.split(","))
    sparsities = [float(s) for s in sparsities.split(",")]
    grid = [{"lr": lr, "base_fraction": bf} for lr, bf in
            itertools.product([float(x) for x in lrs.split(",")],
                              [float(x) for x in base_fractions.split(",")])]
    base = LocalizeConfig(steps=steps, batch_size=batch_size, n_batches=n_batches, normalize=normalize,
                          select_rows=select_rows, eval_every=eval_every, seed=seed)
    preset = get_preset("quick", seed=seed)
    result: dict = {"config": run_record(command="benchmarks.region_sweep", **settings_of(params)),
                    "localize_base": base.to_json(), "grid": grid, "split_seed": split_seed,
                    "ft": {}, "cells": {}}
    from cl_graft.benchmarks import load_rows

    for task, folder in folders.items():
        saved = read_json(Path(folder) / "config.json")
        if (saved.get("task"), saved.get("preset"), saved.get("seed")) != (task, "quick", seed):
            raise UserError(f"{folder}: not a quick-preset fine-tune of {task} with seed {seed}")
        ft = load_classifier(folder, device=resolve_device(device))
        splits = load_rows(task, data_dir, preset, seed=seed)
        torch.manual_seed(seed)                       # θ_pre as cl_graft.cli.common.pre_and_finetuned builds it
        pre = build_classifier(ft.source, head=ft.head_kind, pooling=ft.pooling, max_length=preset.max_length,
                               device=resolve_device(device))
        pre.add_task(splits.spec, seed=seed)
        dev_select, dev_choose = split_dev(splits.dev, split_seed)
        ft_test, _ = _test(ft, splits.test, task)
        result["ft"][task] = {"folder": portable_path(folder), "n_train": len(splits.train),
                              "n_dev_select": len(dev_select),
                              "n_dev_choose": len(dev_choose), "n_test": len(splits.test),
                              "dev_choose": _dev(ft, dev_choose, task), "test": ft_test["accuracy"],
                              "test_ece": ft_test["ece"]}
        print(f"{task}: FT test {100 * ft_test['accuracy']:.1f} ({len(splits.test)} rows), dev-select "
              f"{len(dev_select)}, dev-choose {len(dev_choose)}", flush=True)
        result["cells"][task] = {}
        for s in sparsities:
            result["cells"][task][f"{s:g}"] = run_cell(pre, ft, splits, dev_select, dev_choose, task=task,
                                                       sparsity=s, base=base, grid=grid)
            result["config"] = finish_record(result["config"])
            write_json(run_dir.path / RESULT, result)
            write_page(markdown(result), run_dir, "region_sweep.md", page)


if __name__ == "__main__":
    main()
