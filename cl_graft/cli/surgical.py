"""``cl-graft surgical``: FIM layer scores, surgical fine-tuning of the top-k layers, and its controls."""
from __future__ import annotations

import time

import click

from ..errors import UserError
from .common import common_options, console_options, data_identity, data_source, pre_and_finetuned

RESULTS_FILE, TABLE_FILE, FINETUNED_DIR = "results.json", "table.md", "finetuned"


def parse_ints(text: str, what: str) -> list[int]:
    """``"1,2,3"`` → ``[1, 2, 3]``; empty text → ``[]``."""
    try:
        return [int(t) for t in text.split(",")] if text.strip() else []
    except ValueError:
        raise UserError(f"--{what} {text!r} is not a comma-separated list of integers") from None


@click.command()
@click.option("--task", required=True, help="Task name (see benchmarks.TASKS) or a folder name under --data-dir.")
@click.option("--finetuned", type=click.Path(file_okay=False), default=None,
              help="Folder written by `cl-graft finetune` with the same preset and seed (default: fine-tune here).")
@click.option("--top-layers", default="1,2,3", show_default=True,
              help="Comma-separated k: fine-tune the k layers with the highest FIM score, for each k.")
@click.option("--random-layers", default=None,
              help="Comma-separated k for the random-layers control (default: as --top-layers; '' for none).")
@click.option("--fisher-rows", type=int, default=256, show_default=True, help="Training rows for the FIM scores.")
@click.option("--fisher-batch", type=int, default=16, show_default=True, help="Rows per Fisher forward/backward.")
@click.option("--anatomy-region-size", type=float, default=1e-3, show_default=True,
              help="Size (a share of the graftable parameters) of the graft region whose per-layer share is "
                   "shown beside the FIM scores.")
@click.option("--graft/--no-graft", default=True, show_default=True,
              help="Also graft a learned region as large as each top-k layer set.")
@click.option("--stability/--no-stability", default=True, show_default=True,
              help="Also FIM ranks in the middle of full FT, not only start and end (costs half a fine-tuning run).")
@console_options
@common_options
def surgical(task, finetuned, top_layers, random_layers, fisher_rows, fisher_batch, anatomy_region_size, graft,
             stability, quiet, verbose, model, head, fresh_head, preset, data_dir, seed, device, out, overwrite):
    """Surgical fine-tuning of TASK (Lodha et al. 2023): FIM layer ranking, top-k layers vs full FT vs random
    layers vs grafting, ranking stability. Writes results.json, table.md, fim_layers.png, fim_groups.png and
    config.json under --out (and the fine-tuned model when --finetuned is not given)."""

    from .. import distributed
    from ..console import Console
    from ..artifacts import save_classifier
    from ..benchmarks import load_rows
    from ..files import write_json, write_text
    from ..outdir import claim_out_dir
    from ..presets import get_preset
    from ..provenance import run_record
    from ..regions.fisher import fisher_sample, layer_fisher
    from ..surgical.experiment import SurgicalPlan, surgical_table
    from ..surgical.finetune import layer_names
    from ..surgical.report import draw_figures, format_surgical
    from ..training.finetune import finetune_
    from ..training.models import clone_model, resolve_device

    console = Console.from_flags(quiet=quiet, verbose=verbose)
    progress = console.live or console.verbose                     # tqdm bars on a terminal, or with --verbose
    device = resolve_device(device)
    top = parse_ints(top_layers, "top-layers")
    rand = top if random_layers is None else parse_ints(random_layers, "random-layers")
    if not top:
        raise UserError("--top-layers is empty")
    if not 0 < anatomy_region_size <= 1 or fisher_batch < 1:
        raise UserError("--anatomy-region-size must be in (0, 1] and --fisher-batch >= 1")
    cfg = get_preset(preset, seed=seed)
    distributed.check_batch(cfg.finetune.batch_size)
    splits = load_rows(task, data_dir, cfg, seed=seed)
    sample = fisher_sample(splits.train, fisher_rows, seed)
    pre, ft, ft_seconds = pre_and_finetuned(finetuned, splits.spec, model=model, head=head, fresh_head=fresh_head,
                                       max_length=cfg.max_length, device=device, seed=seed,
                                       match=(cfg.name, seed))
    source = pre.source
    n_layers = len(layer_names(pre))
    bad = [k for k in top + rand if not 1 <= k <= n_layers]
    if bad:
        raise UserError(f"--top-layers/--random-layers {bad[0]} is outside the model's 1..{n_layers} layers")
    settings = {"command": "surgical", "task": task, "finetuned": finetuned, "model": source, "head": pre.head_kind,
                "fresh_head": fresh_head, "preset": cfg.name, "seed": seed, "k": cfg.k, "dev_k": cfg.dev_k,
                "eval_cap": cfg.eval_cap, "data_sha256": data_identity([task], data_dir),
                "finetune": cfg.finetune.to_json(), "top_layers": top, "random_layers": rand,
                "fisher_rows": len(sample), "graft": graft, "stability": stability,
                "anatomy_region_size": anatomy_region_size}
    record = run_record(**settings, device=str(device), data=data_source(data_dir))
    with claim_out_dir(out, "surgical", settings=settings, overwrite=overwrite) as run_dir:
        out = run_dir.path
        t0 = time.perf_counter()
        fim_start = layer_fisher(pre, sample, batch_size=fisher_batch, progress=progress)
        fim_seconds = time.perf_counter() - t0
        if ft is None:
            ft, t0 = clone_model(pre), time.perf_counter()
            finetune_(ft, splits.train, splits.dev, cfg.finetune, progress=progress)
            ft_seconds = time.perf_counter() - t0
            save_classifier(ft, out / FINETUNED_DIR)
        plan = SurgicalPlan(top=top, random=rand, graft=graft, stability=stability,
                            anatomy_region_size=anatomy_region_size, fisher_batch=fisher_batch, seed=seed)
        result = surgical_table(pre, ft, ft_seconds, fim_start, splits, sample, cfg.finetune, plan, progress=progress)
        draw_figures(result, out, task=task)
        table = format_surgical(result, task=task)
        write_json(out / RESULTS_FILE, {"task": task, "n_test": len(splits.test),
                                        "fim_seconds": round(fim_seconds, 1), **result, "config": record})
        write_text(out / TABLE_FILE, table + "\n")
        run_dir.finish(record)
    console.echo(table)
    console.echo(f"-> {out}")
