"""``cl-graft multitask``: the skill map of a task set (regions, overlap, transfer, composition)."""
from __future__ import annotations

import click

from ..errors import UserError
from .common import common_options, console_options, data_identity, data_source


def parse_tasks(text: str) -> list[str]:
    """``"sst2,cr"`` → ``["sst2", "cr"]``; at least two distinct names."""
    names = [t.strip() for t in text.split(",")]
    if any(not t for t in names):
        raise UserError(f"--tasks {text!r} has an empty task name")
    repeated = sorted({t for t in names if names.count(t) > 1})
    if repeated:
        raise UserError(f"--tasks names {repeated[0]!r} more than once")
    if len(names) < 2:
        raise UserError(f"--tasks needs at least two tasks, got {names}")
    return names


def parse_groups(text: str | None) -> dict[str, tuple[str, ...]] | None:
    """``"sentiment=sst2,cr;nli=mnli,snli"`` → ``{"sentiment": ("sst2", "cr"), ...}``; None stays None."""
    if text is None:
        return None
    groups: dict[str, tuple[str, ...]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, members = part.partition("=")
        tasks = tuple(t.strip() for t in members.split(",") if t.strip())
        if not sep or not name.strip() or not tasks or name.strip() in groups:
            raise UserError(f"--groups part {part!r}: expected NAME=TASK,TASK with a new NAME")
        groups[name.strip()] = tasks
    return groups


@click.command()
@click.option("--tasks", default="sst2,cr,mnli,snli,qnli,qqp,mrpc,agnews", show_default=True,
              help="Comma-separated tasks to train together (at least two).")
@click.option("--groups", default=None,
              help="Task groups for compositionality, 'NAME=T1,T2;NAME=T3' (default: sentiment, nli, "
                   "paraphrase, topic restricted to --tasks).")
@click.option("--single/--no-single", default=True, show_default=True,
              help="Also fine-tune each task alone, for comparison with the multi-task model.")
@click.option("--region-size", type=float, default=None, help="Each task's region size, a share of the "
              "graftable parameters in (0, 1] (default: the preset's).")
@console_options
@common_options
def multitask(tasks, groups, single, region_size, quiet, verbose, model, head, fresh_head, preset, data_dir, seed,
              device, out, overwrite):
    """Train one model on TASKS, localize each task's skill in it and map overlap, transfer and composition.

    Writes skillmap.json, regions/<task>/ and figures/*.png under --out (redraw with `cl-graft plot`).
    """
    from dataclasses import replace

    import torch

    from .. import distributed
    from ..console import Console
    from ..benchmarks import get_task, load_rows
    from ..outdir import claim_out_dir
    from ..provenance import run_record
    from ..skillmaps.experiment import resolve_groups, run_skillmap, skillmap_setup
    from ..skillmaps.report import summary
    from ..training.models import build_classifier, resolve_device

    console = Console.from_flags(quiet=quiet, verbose=verbose)
    progress = console.live or console.verbose                     # tqdm bars on a terminal, or with --verbose
    device = resolve_device(device)
    names = parse_tasks(tasks)
    for t in names:                                                   # every name known before any data loads
        get_task(t, data_dir)
    data, cfg = skillmap_setup(preset, len(names), seed=seed, single=single, groups=parse_groups(groups))
    if region_size is not None:
        cfg = replace(cfg, localize=replace(cfg.localize, region_size=region_size))
    resolve_groups(cfg.groups, names)
    distributed.check_batch(cfg.multitask.batch_size)
    distributed.check_batch(cfg.localize.batch_size, "localization batch size")
    splits = {t: load_rows(t, data_dir, data, seed=seed) for t in names}
    torch.manual_seed(seed)
    clf = build_classifier(model, head=head, max_length=data.max_length, device=device, fresh_head=fresh_head)
    settings = {"command": "multitask", "tasks": names, "model": model, "head": head, "fresh_head": fresh_head,
                "preset": data.name, "seed": seed, "k": data.k, "dev_k": data.dev_k, "eval_cap": data.eval_cap,
                "max_length": data.max_length, "data_sha256": data_identity(names, data_dir),
                "skillmap": cfg.to_json()}
    record = run_record(**settings, device=str(device), data=data_source(data_dir))
    with claim_out_dir(out, "multitask", settings=settings, overwrite=overwrite) as run_dir:
        sm = run_skillmap(clf, splits, cfg, out=run_dir.path, info=record, progress=progress)
        run_dir.finish(record)
    console.echo(summary(sm))
    console.echo(f"{sm.info['seconds']['total']:.0f}s -> {run_dir.path}")
