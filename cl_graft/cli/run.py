"""``cl-graft run``: continual learning on a task stream, every strategy on the same benchmark and seeds."""
from __future__ import annotations

import click

from ..strategies.registry import DEFAULT_STRATEGIES, STRATEGIES
from .common import common_options, data_identity, data_source


@click.command()
@click.option("--stream", required=True, help="Comma-separated tasks, one experience each: qnli,agnews,sst2.")
@click.option("--strategies", default=",".join(DEFAULT_STRATEGIES), show_default=True,
              help=f"Comma-separated: {', '.join(STRATEGIES)}.")
@click.option("--method", default=None, help="Region method of graft (default: graft = learned, Eq. 3).")
@click.option("--sparsity", type=float, default=None, help="Fixed per-task region budget, fraction of graftable params "
              "(default: each task's size chosen on its dev rows: the smallest keeping 99% of its trained score).")
@click.option("--steps", type=int, default=None, help="Optimizer steps per experience (default: the preset's).")
@click.option("--k", type=int, default=None, help="Training examples per class (default: the preset's).")
@click.option("--tune", is_flag=True, help="Choose each strategy's settings from its grid on dev rows first "
              "(same budget for every strategy; test rows are never used to choose).")
@click.option("--settings-from", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Use the settings an earlier `run --tune` chose on its dev rows (its --out folder), e.g. to run "
                   "more seeds with them.")
@click.option("--task-inference", type=click.Choice(["entropy", "max-softmax", "features"]), default=None,
              help="After the stream, also evaluate with task labels withheld: each input goes to the task whose "
                   "grafted model is most confident (entropy, max-softmax) or whose head-input statistics make its "
                   "features most likely (features) (graft, graft-paper, packnet; T forward passes per input).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in --out (every setting and the data must be the same).")
@click.option("--quiet", is_flag=True, help="No Avalanche progress bars.")
@common_options
def run(stream, strategies, method, sparsity, steps, k, tune, settings_from, task_inference, resume, quiet, model,
        head, fresh_head, preset, data_dir, seed, device, out, overwrite):
    """Train the strategies on the stream; print accuracy matrices, forgetting, BWT, storage and wall time;
    write results.json/csv, matrices.csv and figures/ under --out."""
    import torch

    from .. import distributed
    from ..benchmarks import load_rows
    from ..benchmarks.streams import make_benchmark, parse_stream
    from ..errors import UserError
    from ..outdir import claim_out_dir
    from ..provenance import run_record
    from ..strategies.continual_config import continual_setup
    from ..strategies.registry import parse_strategies
    from ..strategies.tuning import chosen_settings, split_dev
    from ..training.models import build_classifier, resolve_device

    device = resolve_device(device)
    tasks = parse_stream(stream, data_dir)
    names = parse_strategies(strategies)
    if tune and settings_from:
        raise UserError("--tune and --settings-from exclude each other: tune here, or reuse an earlier choice")
    chosen = chosen_settings(settings_from, names) if settings_from else None
    data, cfg = continual_setup(preset, seed=seed, steps=steps, sparsity=sparsity, method=method, k=k)
    distributed.check_batch(cfg.recipe.batch_size)
    distributed.check_batch(cfg.localize.batch_size, "localization batch size")
    splits = [load_rows(t, data_dir, data, seed=seed) for t in tasks]
    settings = {"command": "run", "stream": tasks, "strategies": names, "model": model, "head": head,
                "fresh_head": fresh_head, "preset": preset, "seed": seed, "k": data.k, "dev_k": data.dev_k,
                "eval_cap": data.eval_cap, "max_length": data.max_length,
                "data_sha256": data_identity(tasks, data_dir), "config": cfg.to_json(), "tune": tune,
                "settings_from": chosen, "task_inference": task_inference}
    torch.manual_seed(seed)
    clf = build_classifier(model, head=head, max_length=data.max_length, device=device, fresh_head=fresh_head)
    for i, s in enumerate(splits):
        clf.add_task(s.spec, seed=seed + i)
    tune_splits = split_dev(splits) if tune else None
    record = run_record(**settings, device=str(device), data=data_source(data_dir))
    with claim_out_dir(out, "run", settings=settings, overwrite=overwrite, resume=resume,
                       keep_on_error=True) as run_dir:
        bm = make_benchmark(splits, clf)
        tuning = {"chosen": chosen}
        if tune_splits is not None:
            tuning = {"tune_bm": make_benchmark(tune_splits, clf),
                      "tune_dev_rows": {s.spec.name: s.dev for s in tune_splits}}
        _run(clf, bm, tasks, names, cfg, run_dir.path, {t: s.dev for t, s in zip(tasks, splits)}, resume,
             quiet, record, tuning, task_inference)
        run_dir.finish(record)


def _run(clf, bm, tasks, names, cfg, out, dev_rows, resume, quiet, record, tuning, task_inference) -> None:
    from ..provenance import finish_record
    from ..strategies.report import strategy_table, summary_table, write_results
    from ..strategies.runner import run_continual

    results = run_continual(clf, bm, tasks, names, cfg, out=out, dev_rows=dev_rows, resume=resume,
                            task_inference=task_inference, progress=not quiet,
                            on_result=lambda r: click.echo("\n" + strategy_table(r)), **tuning)
    write_results(out, results, record=finish_record(record))
    click.echo("\n" + summary_table(results) + f"\n\nresults -> {out}")
