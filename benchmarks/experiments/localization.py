"""Benchmark of skill localization on MiniLM (Panigrahi et al. 2023, https://arxiv.org/abs/2302.06600).

Run: ``python -m cl_graft.benchmarks.experiments.localization --data-dir ../shared/data`` (add ``--skip-quality`` for the
cost figures only). Prints the figures and writes one JSON (default ``benchmarks/results/localization.json``):

- ``cost``: seconds of one localization step vs one fine-tuning step on the same batch (16 rows), measured as
  the difference between runs of the real loops with more and fewer steps (fixed costs cancel); target ≤ 1.15;
- ``switch``: seconds to switch a model between two stored skills in place (``restore_`` + ``patch_``) vs
  loading the full fine-tuned checkpoint (``load_classifier``); target ≥ 500× faster;
- ``storage``: bytes of a stored skill (region indices + values + the task head) vs the checkpoint; ≤ 0.5%;
- ``quality``: per task (quick preset), FT vs the learned graft region (and top-k) at each sparsity: test
  accuracy and ECE. Fine-tuned models are reused from ``--finetuned-root/<task>`` when present.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from cl_graft.benchmarks import load_rows
from safetensors.torch import load_file

from cl_graft.artifacts import load_classifier, save_classifier
from cl_graft.files import write_json
from cl_graft.grafting.graft import SkillPatch, patch_, restore_
from cl_graft.localize.experiment import localize_table
from cl_graft.presets import get_preset
from cl_graft.provenance import run_record
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.learned import learn_region
from cl_graft.regions.methods import find_region
from cl_graft.training.finetune import FinetuneConfig, finetune_
from cl_graft.training.models import build_classifier, clone_model


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def get_finetuned(task: str, root: Path, data_dir: str | None, seed: int):
    """``root/<task>`` if it holds a fine-tuned model, else fine-tune MiniLM (quick preset) and save it there."""
    preset = get_preset("quick", seed=seed)
    splits = load_rows(task, data_dir, preset, seed=seed)
    if (root / task / "model.safetensors").exists():
        return load_classifier(root / task), splits, preset
    torch.manual_seed(seed)
    ft = build_classifier("minilm", max_length=preset.max_length)
    ft.add_task(splits.spec, seed=seed)
    finetune_(ft, splits.train, splits.dev, preset.finetune)
    save_classifier(ft, root / task)
    return ft, splits, preset


def measure_cost(pre, ft, rows: list[dict], *, short: int, long: int) -> dict:
    """Seconds per batch of learn_region (1 and the default number of batches per step) and of finetune_,
    on the same 16 rows: the difference between a long and a short run over the extra steps, so that the
    fixed costs (copies, fingerprints, the selection evaluations at the first and last step) cancel."""
    batch = rows[:16]

    def localize(steps: int, n_batches: int) -> float:
        cfg = LocalizeConfig(sparsity=1e-3, steps=steps, n_batches=n_batches, batch_size=16, eval_every=10**6,
                             select_rows=16)
        return learn_region(pre, ft, batch, [], cfg, progress=False).seconds

    def finetune(steps: int) -> float:
        model = clone_model(ft)
        t0 = time.perf_counter()
        finetune_(model, batch, [], FinetuneConfig(batch_size=16, steps=steps, eval_every=10**6), progress=False)
        return time.perf_counter() - t0

    localize(1, 1), finetune(1)                                       # warm-up
    fin = (finetune(long) - finetune(short)) / (long - short)
    out = {"finetune_step_s": fin, "batch_size": 16, "steps": [short, long], "target": "<= 1.15"}
    for n in sorted({1, LocalizeConfig.n_batches}):
        per_batch = (localize(long, n) - localize(short, n)) / ((long - short) * n)
        out[f"n_batches={n}"] = {"localize_s_per_batch": per_batch, "ratio": per_batch / fin}
    return out
def measure_switch_and_storage(pre, ft, rows, ckpt: Path, task: str, sparsities: list[float]) -> tuple[dict, dict]:
    """Patch-switch vs checkpoint-load seconds, and stored bytes per skill vs the checkpoint file."""
    load_s = median_seconds(lambda: load_classifier(ckpt), 3)
    ckpt_bytes = (ckpt / "model.safetensors").stat().st_size
    head = [n for n, _ in ft.named_parameters() if n.startswith(f"heads.{task}.")]
    model = clone_model(pre)
    model.add_task(ft.tasks[task])
    weights_s = median_seconds(lambda: model.load_state_dict(load_file(ckpt / "model.safetensors")), 5)
    switch = {"load_checkpoint_s": load_s, "load_weights_only_s": weights_s, "target": ">= 500x"}
    storage = {"checkpoint_bytes": ckpt_bytes, "target": "<= 0.5%"}
    for s in sparsities:
        cfg = LocalizeConfig(sparsity=s)
        a = SkillPatch.from_model(ft, find_region("topk", pre, ft, rows, [], cfg, progress=False).region,
                                  extra_names=head)
        b = SkillPatch.from_model(ft, find_region("random", pre, ft, rows, [], cfg, progress=False).region,
                                  extra_names=head)
        stash = patch_(model, a)

        def swap() -> None:
            nonlocal stash, a, b
            restore_(model, stash)
            stash = patch_(model, b)
            a, b = b, a

        sec = median_seconds(swap, 51)
        switch[f"{s:g}"] = {"switch_s": sec, "speedup": load_s / sec, "speedup_vs_weights_only": weights_s / sec,
                            "size": a.region.size}
        with tempfile.TemporaryDirectory() as d:
            a.save(d)
            disk = sum(p.stat().st_size for p in Path(d).iterdir())
        storage[f"{s:g}"] = {"payload_bytes": a.bytes(), "disk_bytes": disk, "percent": 100 * disk / ckpt_bytes,
                             "head_bytes": a.bytes() - a.bytes(extra=False)}
        restore_(model, stash)
    return switch, storage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--tasks", default="sst2,agnews,qnli")
    ap.add_argument("--sparsities", default="1e-4,5e-4,1e-3,1e-2")
    ap.add_argument("--methods", default="graft,topk")
    ap.add_argument("--finetuned-root", type=Path, default=Path("runs"))
    ap.add_argument("--work", type=Path, default=Path("runs/bench-localization"), help="regions go here")
    ap.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "results" / "localization.json")
    ap.add_argument("--steps", type=int, default=LocalizeConfig.steps)
    ap.add_argument("--n-batches", type=int, default=LocalizeConfig.n_batches)
    ap.add_argument("--lr", type=float, default=LocalizeConfig.lr)
    ap.add_argument("--base-fraction", type=float, default=LocalizeConfig.base_fraction)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    sparsities = [float(s) for s in args.sparsities.split(",")]
    result: dict = {"config": run_record(command="benchmarks.localization", **{k: str(v) for k, v in
                                                                              vars(args).items()})}
    ft, splits, preset = get_finetuned(tasks[0], args.finetuned_root, args.data_dir, args.seed)
    pre = build_classifier("minilm", max_length=preset.max_length)
    result["cost"] = measure_cost(pre, ft, splits.train, short=2, long=8)
    cost = result["cost"]
    for key in (k for k in cost if k.startswith("n_batches")):
        print(f"cost ({key}): localization {cost[key]['localize_s_per_batch']:.3f} s per batch / fine-tuning step "
              f"{cost['finetune_step_s']:.3f} s = {cost[key]['ratio']:.2f} (target <= 1.15)", flush=True)
    result["switch"], result["storage"] = measure_switch_and_storage(
        pre, ft, splits.train, args.finetuned_root / tasks[0], tasks[0], [1e-4, 1e-3, 1e-2])
    for s in ("0.0001", "0.001", "0.01"):
        sw, st = result["switch"][s], result["storage"][s]
        print(f"sparsity {s}: switch {1e3 * sw['switch_s']:.2f} ms vs load {result['switch']['load_checkpoint_s']:.2f}"
              f" s = {sw['speedup']:.0f}x (weights only {result['switch']['load_weights_only_s']:.3f} s: "
              f"{sw['speedup_vs_weights_only']:.0f}x); stored {st['disk_bytes'] / 1e3:.1f} kB = {st['percent']:.3f}% of the "
              f"checkpoint", flush=True)
    result["quality"] = {}
    for task in [] if args.skip_quality else tasks:
        ft, splits, preset = get_finetuned(task, args.finetuned_root, args.data_dir, args.seed)
        cfg = LocalizeConfig(steps=args.steps, n_batches=args.n_batches, lr=args.lr,
                             base_fraction=args.base_fraction, seed=args.seed)
        rows = localize_table(pre, ft, splits.train, splits.dev, splits.test, task=task,
                              methods=args.methods.split(","), sparsities=sparsities, cfg=cfg, out=args.work / task)
        result["quality"][task] = {"n_test": len(splits.test), "config": cfg.to_json(), "rows": rows}
        for r in rows:
            print(f"{task} {r['name']:>14}: acc {100 * r['accuracy']:.1f}  ECE {100 * r['ece']:.1f}  size "
                  f"{r['size'] if r['size'] is not None else '-'}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
