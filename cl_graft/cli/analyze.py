"""``cl-graft analyze``: calibration (reliability, temperature, head re-fit), OOD accuracy and WiSE curves."""
from __future__ import annotations

import click

from ..errors import UserError
from .common import common_options, console_options, data_identity, data_source, pre_and_finetuned
from .localize import parse_region_sizes

RESULTS_FILE, TABLE_FILE, FINETUNED_DIR = "results.json", "table.md", "finetuned"


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_alphas(text: str) -> list[float]:
    try:
        return [float(t) for t in _items(text)]
    except ValueError:
        raise UserError(f"--alphas {text!r} is not a comma-separated list of numbers") from None


@click.command()
@click.argument("sections", nargs=-1)
@click.option("--task", required=True, help="Task name (see benchmarks.TASKS) or a folder name under --data-dir.")
@click.option("--finetuned", type=click.Path(file_okay=False), default=None,
              help="Folder written by `cl-graft finetune` (default: fine-tune here, saved under --out/finetuned).")
@click.option("--region-size", "region_sizes", default="1e-4,1e-3,1e-2", show_default=True,
              help="Comma-separated sizes of the learned graft regions, fractions of the graftable parameters.")
@click.option("--ood", default=None, help="Comma-separated OOD tasks (default: all known pairs of --task).")
@click.option("--baselines/--no-baselines", default=True, show_default=True,
              help="Calibration: also graft re-training and BitFit (each costs about one fine-tuning run).")
@click.option("--retrain-region-size", type=float, default=None,
              help="Region size for graft re-training, one of --region-size (default: the middle one).")
@click.option("--alphas", default="0,0.25,0.5,0.75,1", show_default=True, help="WiSE mixing weights in [0, 1].")
@click.option("--wise-region-size", type=float, default=None,
              help="Region size for WiSE-graft, one of --region-size (default: the middle one).")
@console_options
@common_options
def analyze(sections, task, finetuned, region_sizes, ood, baselines, retrain_region_size, alphas, wise_region_size,
            quiet, verbose, model, head, fresh_head, preset, data_dir, seed, device, out, overwrite):
    """Calibration, OOD and WiSE analyses of FT vs grafted models on TASK. SECTIONS: any of calibration, ood,
    wise (default: all). Writes results.json, table.md, reliability.png, wise.png and config.json under --out."""

    from ..analyze.calibration import OOD_PAIRS, check_ood_pair
    from ..console import Console
    from ..analyze.experiment import AnalyzePlan, analyze_task
    from ..analyze.report import draw_figures, format_analysis
    from ..artifacts import save_classifier
    from ..benchmarks import cap, get_task, load_rows, load_task
    from ..files import write_json, write_text
    from ..outdir import claim_out_dir
    from ..presets import get_preset
    from ..provenance import run_record
    from ..task import ood_rows
    from ..training.finetune import finetune_
    from ..training.models import clone_model, resolve_device

    console = Console.from_flags(quiet=quiet, verbose=verbose)
    progress = console.live or console.verbose                     # tqdm bars on a terminal, or with --verbose
    device = resolve_device(device)
    sections = tuple(sections) or ("calibration", "ood", "wise")
    levels = parse_region_sizes(region_sizes)
    middle = levels[len(levels) // 2]
    ood_names = (_items(ood) if ood else list(OOD_PAIRS.get(task, ()))) if "ood" in sections else []
    if "ood" in sections and not ood_names:
        raise UserError(f"no OOD pairs known for {task!r}; known: {', '.join(OOD_PAIRS)}")
    for name in ood_names:
        check_ood_pair(task, name)
    plan = AnalyzePlan(sections=sections, region_sizes=levels, baselines=baselines,
                       retrain_region_size=retrain_region_size or middle, alphas=parse_alphas(alphas),
                       wise_region_size=wise_region_size or middle, seed=seed)
    cfg = get_preset(preset, seed=seed)
    splits = load_rows(task, data_dir, cfg, seed=seed)
    ood_sets = {n: ood_rows(cap(load_task(n, data_dir).test, cfg.eval_cap, seed=seed), get_task(n, data_dir),
                            splits.spec) for n in ood_names}
    pre, ft, _ = pre_and_finetuned(finetuned, splits.spec, model=model, head=head, fresh_head=fresh_head,
                                       max_length=cfg.max_length, device=device, seed=seed)
    source = pre.source
    settings = {"command": "analyze", "task": task, "finetuned": finetuned, "model": source, "head": pre.head_kind,
                "fresh_head": fresh_head, "preset": cfg.name, "seed": seed, "k": cfg.k, "dev_k": cfg.dev_k,
                "eval_cap": cfg.eval_cap, "data_sha256": data_identity([task, *ood_names], data_dir),
                "finetune": cfg.finetune.to_json(), "sections": list(sections), "region_sizes": levels,
                "ood": ood_names, "baselines": baselines, "retrain_region_size": plan.retrain_region_size,
                "alphas": plan.alphas, "wise_region_size": plan.wise_region_size}
    record = run_record(**settings, device=str(device), data=data_source(data_dir))
    with claim_out_dir(out, "analyze", settings=settings, overwrite=overwrite) as run_dir:
        out = run_dir.path
        if ft is None:
            ft = clone_model(pre)
            finetune_(ft, splits.train, splits.dev, cfg.finetune, progress=progress)
            save_classifier(ft, out / FINETUNED_DIR)
        result = analyze_task(pre, ft, splits, ood_sets, cfg.finetune, plan, progress=progress)
        draw_figures(result, out, task=task)
        table = format_analysis(result, task=task, metric=splits.spec.metric)
        write_json(out / RESULTS_FILE, {"task": task, "n_test": len(splits.test),
                                        "ood_n": {k: len(v) for k, v in ood_sets.items()}, **result, "config": record})
        write_text(out / TABLE_FILE, table + "\n")
        run_dir.finish(record)
    console.echo(table)
    console.echo(f"-> {out}")
