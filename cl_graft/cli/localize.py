"""``cl-graft localize``: find skill regions of a fine-tuned model, graft them, and tabulate what they keep."""
from __future__ import annotations

import dataclasses
import typing

import click

from ..errors import UserError
from ..localize.experiment import TRAINED_BASELINES
from ..regions.methods import REGION_METHODS
from .common import check_finetune_folder, common_options, console_options, data_identity, data_source, field_option

RESULTS_FILE, TABLE_FILE, FINETUNED_DIR = "results.json", "table.md", "finetuned"


def _split(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise UserError(f"--{what} {text!r} has an empty item")
    return items


def parse_region_sizes(text: str) -> list[float]:
    """``"1e-4,1e-3"`` → ``[1e-4, 1e-3]`` (``--region-size``); each must be a number in (0, 1]."""
    out = []
    for item in _split(text, "region-size"):
        try:
            value = float(item)
        except ValueError:
            raise UserError(f"--region-size {item!r} is not a number") from None
        if not 0 < value <= 1:
            raise UserError(f"--region-size {item} is outside (0, 1]")
        out.append(value)
    return out


def localize_config_options(f):
    """One click option per :class:`~cl_graft.regions.config.LocalizeConfig` field except region_size and seed."""
    from ..regions.config import LocalizeConfig

    hints = typing.get_type_hints(LocalizeConfig)
    for fld in reversed(dataclasses.fields(LocalizeConfig)):
        if fld.name not in ("region_size", "seed"):
            f = field_option(fld, hints[fld.name])(f)
    return f


@click.command()
@click.option("--task", required=True, help="Task name (see benchmarks.TASKS) or a folder name under --data-dir.")
@click.option("--finetuned", type=click.Path(file_okay=False), default=None,
              help="Folder written by `cl-graft finetune` (default: fine-tune first, saved under --out/finetuned).")
@click.option("--region-size", "region_sizes", default="1e-4,1e-3,1e-2", show_default=True,
              help="Comma-separated region sizes as fractions of the graftable parameters, each in (0, 1].")
@click.option("--methods", default="graft,topk,random", show_default=True,
              help=f"Comma-separated region methods: {', '.join(REGION_METHODS)}; and the trained baselines "
                   f"{', '.join(TRAINED_BASELINES)} (graft re-training, BitFit).")
@click.option("--ood", default="", help="Comma-separated out-of-distribution tasks scored with the task's head.")
@click.option("--region", "regions", multiple=True, type=click.Path(file_okay=False),
              help="A saved region folder to score as well (repeatable).")
@localize_config_options
@console_options
@common_options
def localize(task, finetuned, region_sizes, methods, ood, regions, quiet, verbose, model, head, fresh_head, preset,
             data_dir, seed, device, out, overwrite, **settings):
    """Localize TASK's skill in a fine-tuned model: regions, grafted accuracy/ECE/agreement/OOD, anatomy PNGs.

    Writes results.json, table.md, config.json and regions/<method>-<region size>/ (region + anatomy.png) under
    --out; the fine-tuned model too when --finetuned is not given.
    """
    import torch

    from .. import distributed
    from ..console import Console
    from ..artifacts import load_classifier, save_classifier
    from ..benchmarks import cap, get_task, load_rows, load_task
    from ..files import write_json, write_text
    from ..localize.experiment import load_given_regions, localize_table
    from ..localize.report import format_table
    from ..outdir import claim_out_dir
    from ..presets import get_preset
    from ..provenance import run_record
    from ..regions.config import LocalizeConfig
    from ..regions.problem import resolve_elements
    from ..regions.region import graftable_names
    from ..task import ood_rows
    from ..training.finetune import finetune_
    from ..training.models import build_classifier, resolve_device

    console = Console.from_flags(quiet=quiet, verbose=verbose)
    progress = console.live or console.verbose                     # tqdm bars on a terminal, or with --verbose
    device = resolve_device(device)
    levels = parse_region_sizes(region_sizes)
    cfgs = [LocalizeConfig(region_size=s, seed=seed, **settings) for s in levels]
    names = _split(methods, "methods")
    known = (*REGION_METHODS, *TRAINED_BASELINES)
    unknown = [m for m in names if m not in known]
    if unknown:
        raise UserError(f"unknown region method {unknown[0]!r}; choose from {', '.join(known)}")
    ood_specs = [get_task(t, data_dir) for t in (_split(ood, "ood") if ood else [])]
    cfg = get_preset(preset, seed=seed)
    distributed.check_batch(cfgs[0].batch_size, "localization batch size")
    if finetuned is None:
        distributed.check_batch(cfg.finetune.batch_size)
    if finetuned:
        check_finetune_folder(finetuned)
    ft = load_classifier(finetuned, device=device) if finetuned else None
    if ft is not None and task not in ft.tasks:
        raise UserError(f"--finetuned {finetuned} has tasks {sorted(ft.tasks)}, not {task!r}")
    splits = load_rows(task, data_dir, cfg, seed=seed)
    ood_sets = {s.name: ood_rows(cap(load_task(s.name, data_dir).test, cfg.eval_cap, seed=seed), s, splits.spec)
                for s in ood_specs}
    source = ft.source if ft is not None else model
    pre = build_classifier(source, head=ft.head_kind if ft else head, pooling=ft.pooling if ft else "mean",
                           max_length=cfg.max_length, device=device, fresh_head=fresh_head)
    pre_params = dict(pre.named_parameters())
    numel = sum(pre_params[n].numel() for n in graftable_names(pre_params.items()))
    for c in cfgs:
        resolve_elements(c, numel)
    given = load_given_regions(regions, pre, ft, region_elements=settings["region_elements"])
    run = {"command": "localize", "task": task, "finetuned": finetuned, "model": source, "head": pre.head_kind,
           "fresh_head": fresh_head, "preset": cfg.name, "seed": seed, "k": cfg.k, "dev_k": cfg.dev_k,
           "eval_cap": cfg.eval_cap, "data_sha256": data_identity([task, *ood_sets], data_dir),
           "localize": cfgs[0].to_json(), "region_sizes": levels, "methods": names, "ood": list(ood_sets),
           "regions": list(regions)}
    record = run_record(**run, device=str(device), data=data_source(data_dir))
    with claim_out_dir(out, "localize", settings=run, overwrite=overwrite) as run_dir:
        if ft is None:
            torch.manual_seed(seed)
            ft = build_classifier(source, head=head, max_length=cfg.max_length, device=device, fresh_head=fresh_head)
            ft.add_task(splits.spec, seed=seed)
            finetune_(ft, splits.train, splits.dev, cfg.finetune, progress=progress)
            save_classifier(ft, run_dir.path / FINETUNED_DIR)
        rows = localize_table(pre, ft, splits.train, splits.dev, splits.test, task=task, methods=names,
                              region_sizes=levels, cfg=cfgs[0], out=run_dir.path, ood=ood_sets, given=given,
                              recipe=cfg.finetune, progress=progress)
        table = format_table(rows, task=task)
        write_json(run_dir.path / RESULTS_FILE, {"task": task, "n_test": len(splits.test), "numel": numel,
                                                 "rows": rows, "ood_n": {k: len(v) for k, v in ood_sets.items()},
                                                 "config": record})
        write_text(run_dir.path / TABLE_FILE, table + "\n")
        run_dir.finish(record)
    console.echo(table)
    console.echo(f"-> {run_dir.path}")
