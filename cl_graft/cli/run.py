"""``cl-graft run``: continual learning on a task stream, every strategy on the same benchmark and seeds."""
from __future__ import annotations

import click

from ..errors import UserError
from .common import common_options, data_identity, data_source, load_splits


@click.command()
@click.option("--stream", required=True, help="Comma-separated tasks, one experience each: qnli,agnews,sst2.")
@click.option("--strategies", default="graft,naive,ewc,lwf,replay,joint", show_default=True,
              help="Comma-separated: graft, graft-paper, packnet, naive, ewc, lwf, replay, joint, single.")
@click.option("--method", default=None, help="Region method of graft (default: graft = learned, Eq. 3).")
@click.option("--sparsity", type=float, default=None, help="Per-task region budget, fraction of graftable params.")
@click.option("--steps", type=int, default=None, help="Optimizer steps per experience (default: the preset's).")
@click.option("--k", type=int, default=None, help="Training examples per class (default: the preset's).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in --out (every setting and the data must be the same).")
@click.option("--quiet", is_flag=True, help="No Avalanche progress bars.")
@common_options
def run(stream, strategies, method, sparsity, steps, k, resume, quiet, model, head, fresh_head, preset, data_dir, seed,
        device, out, overwrite):
    """Train the strategies on the stream; print accuracy matrices, forgetting, BWT, storage and wall time;
    write results.json/csv, matrices.csv and figures/ under --out."""
    from dataclasses import replace

    import torch

    from ..artifacts import claim_out_dir, run_record
    from ..benchmarks.streams import StreamTask, make_benchmark, parse_stream
    from ..models import build_classifier, resolve_device
    from ..strategies.continual_config import continual_preset, parse_strategies

    device = resolve_device(device)
    tasks = parse_stream(stream, data_dir)
    names = parse_strategies(strategies)
    p = continual_preset(preset, seed=seed, steps=steps, sparsity=sparsity, method=method)
    if k is not None:
        if k < 1:
            raise UserError(f"--k must be >= 1, got {k}")
        p = replace(p, data=replace(p.data, k=k))
    splits = [load_splits(t, data_dir, p.data, seed) for t in tasks]
    settings = {"command": "run", "stream": tasks, "strategies": names, "model": model, "head": head,
                "fresh_head": fresh_head, "preset": preset, "seed": seed, "k": p.data.k, "dev_k": p.data.dev_k,
                "eval_cap": p.data.eval_cap, "max_length": p.data.max_length,
                "data_sha256": data_identity(tasks, data_dir), "config": p.config.to_json()}
    torch.manual_seed(seed)
    clf = build_classifier(model, head=head, max_length=p.data.max_length, device=device, fresh_head=fresh_head)
    for i, s in enumerate(splits):
        clf.add_task(s.spec, seed=seed + i)
    record = run_record(**settings, device=str(device), data=data_source(data_dir))
    with claim_out_dir(out, "run", settings=settings, overwrite=overwrite, resume=resume,
                       keep_on_error=True) as run_dir:
        bm = make_benchmark([StreamTask(s.spec, s.train, s.test, s.dev) for s in splits], clf)
        _run(clf, bm, tasks, names, p.config, run_dir.path, {t: s.dev for t, s in zip(tasks, splits)}, resume,
             quiet, record)
        run_dir.finish(record)


def _run(clf, bm, tasks, names, cfg, out, dev_rows, resume, quiet, record) -> None:
    from ..strategies.report import strategy_table, summary_table, write_results
    from ..strategies.runner import run_continual

    results = run_continual(clf, bm, tasks, names, cfg, out=out, dev_rows=dev_rows, resume=resume,
                            progress=not quiet, on_result=lambda r: click.echo("\n" + strategy_table(r)))
    write_results(out, results, record=record)
    click.echo("\n" + summary_table(results) + f"\n\nresults -> {out}")
