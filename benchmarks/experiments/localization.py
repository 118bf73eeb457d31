"""Benchmark of skill localization on MiniLM (Panigrahi et al. 2023, https://arxiv.org/abs/2302.06600).

Run: ``python -m cl_graft.benchmarks.experiments.localization --data-dir ../shared/data --out DIR`` (add
``--skip-quality`` for the cost figures only). Prints the figures and writes ``DIR/localization.json`` (the run
record ``DIR/config.json``; regions and fine-tuned models made on the way in ``DIR/work``, :mod:`.script_out`):

- ``cost``: seconds of one localization step vs one fine-tuning step on the same batch (16 rows), measured as
  the difference between runs of the real loops with more and fewer steps (fixed costs cancel); target ≤ 1.15;
- ``switch``: seconds to switch a model between two stored skills in place (``restore_`` + ``patch_``) vs
  loading the full fine-tuned checkpoint (``load_classifier``); target ≥ 500× faster;
- ``storage``: bytes of a stored skill (region indices + values + the task head) vs the checkpoint; ≤ 0.5%;
- ``quality``: per task (quick preset), FT vs the learned graft region (and top-k) at each sparsity: test
  accuracy and ECE. Fine-tuned models are reused from ``--finetuned-root/<task>`` when present.

The repository's copy is ``benchmarks/results/localization.json`` (copied from ``DIR``).
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click
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

from .script_out import claimed, out_options, settings_of, work_folder


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def get_finetuned(task: str, root: Path, scratch: Path, data_dir: str | None, seed: int):
    """The fine-tuned model of ``task``, its rows, the preset and its folder: ``root/<task>`` if it holds one, else
    ``scratch/<task>`` (MiniLM fine-tuned with the quick preset and saved there, unless an earlier task did)."""
    preset = get_preset("quick", seed=seed)
    splits = load_rows(task, data_dir, preset, seed=seed)
    for folder in (root / task, scratch / task):
        if (folder / "model.safetensors").exists():
            return load_classifier(folder), splits, preset, folder
    torch.manual_seed(seed)
    ft = build_classifier("minilm", max_length=preset.max_length)
    ft.add_task(splits.spec, seed=seed)
    finetune_(ft, splits.train, splits.dev, preset.finetune)
    save_classifier(ft, scratch / task)
    return ft, splits, preset, scratch / task


def measure_cost(pre, ft, rows: list[dict], *, short: int, long: int) -> dict:
    """Seconds per batch of learn_region (1 and the default number of batches per step) and of finetune_,
    on the same 16 rows: the difference between a long and a short run over the extra steps, so that the
    fixed costs (copies, fingerprints, the selection evaluations at the first and last step) cancel."""
    batch = rows[:16]

    def localize(steps: int, n_batches: int) -> float:
        cfg = LocalizeConfig(region_size=1e-3, steps=steps, n_batches=n_batches, batch_size=16, eval_every=10**6,
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
        cfg = LocalizeConfig(region_size=s)
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


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", default=None)
@click.option("--tasks", default="sst2,agnews,qnli", show_default=True)
@click.option("--sparsities", default="1e-4,5e-4,1e-3,1e-2", show_default=True)
@click.option("--methods", default="graft,topk", show_default=True)
@click.option("--finetuned-root", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="fine-tuned models are read from <root>/<task> when there")
@click.option("--steps", type=int, default=LocalizeConfig.steps, show_default=True)
@click.option("--n-batches", type=int, default=LocalizeConfig.n_batches, show_default=True)
@click.option("--lr", type=float, default=LocalizeConfig.lr, show_default=True)
@click.option("--base-fraction", type=float, default=LocalizeConfig.base_fraction, show_default=True)
@click.option("--skip-quality", is_flag=True)
@click.option("--seed", type=int, default=0, show_default=True)
@out_options()
def main(data_dir, tasks, sparsities, methods, finetuned_root, steps, n_batches, lr, base_fraction, skip_quality,
         seed, out, overwrite) -> None:
    params = click.get_current_context().params
    tasks = tasks.split(",")
    sparsities = [float(s) for s in sparsities.split(",")]
    with claimed("localization", params) as run_dir:
        scratch = work_folder(run_dir, "finetuned")
        result: dict = {"config": run_record(command="benchmarks.localization", **settings_of(params))}
        ft, splits, preset, ckpt = get_finetuned(tasks[0], finetuned_root, scratch, data_dir, seed)
        pre = build_classifier("minilm", max_length=preset.max_length)
        result["cost"] = measure_cost(pre, ft, splits.train, short=2, long=8)
        cost = result["cost"]
        for key in (k for k in cost if k.startswith("n_batches")):
            print(f"cost ({key}): localization {cost[key]['localize_s_per_batch']:.3f} s per batch / fine-tuning "
                  f"step {cost['finetune_step_s']:.3f} s = {cost[key]['ratio']:.2f} (target <= 1.15)", flush=True)
        result["switch"], result["storage"] = measure_switch_and_storage(pre, ft, splits.train, ckpt, tasks[0],
                                                                         [1e-4, 1e-3, 1e-2])
        for s in ("0.0001", "0.001", "0.01"):
            sw, st, switch = result["switch"][s], result["storage"][s], result["switch"]
            print(f"sparsity {s}: switch {1e3 * sw['switch_s']:.2f} ms vs load {switch['load_checkpoint_s']:.2f} s "
                  f"= {sw['speedup']:.0f}x (weights only {switch['load_weights_only_s']:.3f} s: "
                  f"{sw['speedup_vs_weights_only']:.0f}x); stored {st['disk_bytes'] / 1e3:.1f} kB = "
                  f"{st['percent']:.3f}% of the checkpoint", flush=True)
        result["quality"] = {}
        for task in [] if skip_quality else tasks:
            ft, splits, preset, _ = get_finetuned(task, finetuned_root, scratch, data_dir, seed)
            cfg = LocalizeConfig(steps=steps, n_batches=n_batches, lr=lr, base_fraction=base_fraction, seed=seed)
            rows = localize_table(pre, ft, splits.train, splits.dev, splits.test, task=task,
                                  methods=methods.split(","), region_sizes=sparsities, cfg=cfg,
                                  out=work_folder(run_dir, "regions", task))
            result["quality"][task] = {"n_test": len(splits.test), "config": cfg.to_json(), "rows": rows}
            for r in rows:
                print(f"{task} {r['name']:>14}: acc {100 * r['accuracy']:.1f}  ECE {100 * r['ece']:.1f}  size "
                      f"{r['size'] if r['size'] is not None else '-'}", flush=True)
            write_json(run_dir.path / "localization.json", result)        # after every task
        write_json(run_dir.path / "localization.json", result)
    print(f"-> {out / 'localization.json'}")


if __name__ == "__main__":
    main()
