"""``cl-graft finetune``: fine-tune one task and write model, metrics and run config."""
from __future__ import annotations

import time

import click

from .common import common_options, console_options, data_identity, data_source


@click.command()
@click.option("--task", required=True, help="Task name (see benchmarks.TASKS) or a folder name under --data-dir.")
@click.option("--k", type=int, default=None, help="Training examples per class (default: the preset's).")
@click.option("--steps", type=int, default=None, help="Optimizer steps (default: the preset's).")
@click.option("--optimizer", type=click.Choice(["sgd", "adamw"]), default=None,
              help="Default sgd (regions localize); adamw for comparison.")
@click.option("--lr", type=float, default=None,
              help="Learning rate (default: the preset's for sgd, 5e-5 for adamw).")
@console_options
@common_options
def finetune(task, k, steps, optimizer, lr, quiet, verbose, model, head, fresh_head, preset, data_dir, seed, device,
             out, overwrite):
    """Fine-tune MODEL on TASK; writes model.safetensors, metrics.json and config.json under --out."""
    import torch

    from .. import distributed
    from ..console import Console
    from ..artifacts import save_classifier
    from ..benchmarks import load_rows
    from ..files import write_json
    from ..outdir import claim_out_dir
    from ..presets import get_preset
    from ..provenance import run_record
    from ..training.evaluate import evaluate
    from ..training.finetune import finetune_
    from ..training.models import build_classifier, resolve_device

    console = Console.from_flags(quiet=quiet, verbose=verbose)
    progress = console.live or console.verbose                     # tqdm bars on a terminal, or with --verbose
    device = resolve_device(device)
    if optimizer == "adamw" and lr is None:
        lr = 5e-5
    cfg = get_preset(preset, seed=seed, k=k, steps=steps, optimizer=optimizer, lr=lr)
    distributed.check_batch(cfg.finetune.batch_size)
    splits = load_rows(task, data_dir, cfg, seed=seed)
    settings = {"command": "finetune", "task": task, "model": model, "head": head, "fresh_head": fresh_head,
                "preset": cfg.name, "seed": seed, "k": cfg.k, "dev_k": cfg.dev_k, "eval_cap": cfg.eval_cap,
                "data_sha256": data_identity([task], data_dir), "finetune": cfg.finetune.to_json()}
    with claim_out_dir(out, "finetune", settings=settings, overwrite=overwrite) as run_dir:   # before the model loads
        torch.manual_seed(seed)
        clf = build_classifier(model, head=head, max_length=cfg.max_length, device=device, fresh_head=fresh_head)
        clf.add_task(splits.spec, seed=seed)
        t0 = time.perf_counter()
        result = finetune_(clf, splits.train, splits.dev, cfg.finetune, progress=progress)
        train_s = time.perf_counter() - t0
        metrics, _ = evaluate(clf, splits.test, progress=progress)
        save_classifier(clf, run_dir.path)
        write_json(run_dir.path / "metrics.json", {"task": task, "test": metrics, "best_step": result.best_step,
                                                   "best_dev": result.best_dev, "history": result.history,
                                                   "train_seconds": round(train_s, 1),
                                                   "n_train": len(splits.train), "n_dev": len(splits.dev)})
        run_dir.finish(run_record(**settings, device=str(device), data=data_source(data_dir)))
    headline = f"f1 {metrics['f1']:.4f}  " if splits.spec.metric == "f1" else ""
    console.echo(f"{task}: test {headline}accuracy {metrics['accuracy']:.4f}  "
               f"ECE {100 * metrics['ece']:.1f}  (n={metrics['n']}, best dev step {result.best_step}, "
               f"train {train_s:.0f}s) -> {run_dir.path}")
