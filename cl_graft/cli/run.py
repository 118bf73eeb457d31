"""``cl-graft run``: continual learning on a task stream, every strategy on the same benchmark and seeds."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError
from ..strategies.registry import DEFAULT_STRATEGIES, STRATEGIES
from .common import common_options, data_source

_SAME_RUN = ("stream", "model", "head", "preset", "seed", "config")


@click.command()
@click.option("--stream", required=True, help="Comma-separated tasks, one experience each: qnli,agnews,sst2.")
@click.option("--strategies", default=",".join(DEFAULT_STRATEGIES), show_default=True,
              help=f"Comma-separated: {', '.join(STRATEGIES)}.")
@click.option("--method", default=None, help="Region method of graft (default: graft = learned, Eq. 3).")
@click.option("--sparsity", type=float, default=None, help="Per-task region budget, fraction of graftable params.")
@click.option("--steps", type=int, default=None, help="Optimizer steps per experience (default: the preset's).")
@click.option("--k", type=int, default=None, help="Training examples per class (default: the preset's).")
@click.option("--task-inference", type=click.Choice(["entropy", "max-softmax"]), default=None,
              help="After the stream, also evaluate with task labels withheld: each input goes to the task whose "
                   "grafted model is most confident (graft, graft-paper, packnet; T forward passes per input).")
@click.option("--resume", is_flag=True, help="Continue an interrupted run in --out (same stream, model, preset).")
@click.option("--quiet", is_flag=True, help="No Avalanche progress bars.")
@common_options
def run(stream, strategies, method, sparsity, steps, k, task_inference, resume, quiet, model, head, preset, data_dir,
        seed, device, out, overwrite):
    """Train the strategies on the stream; print accuracy matrices, forgetting, BWT, storage and wall time;
    write results.json/csv, matrices.csv and figures/ under --out."""
    import torch

    from ..artifacts import RUN_CONFIG, prepare_out_dir, read_json, run_record, write_json
    from ..benchmarks import load_rows
    from ..benchmarks.streams import make_benchmark, parse_stream
    from ..strategies.continual_config import continual_setup
    from ..strategies.registry import parse_strategies
    from ..training.models import build_classifier, resolve_device

    device = resolve_device(device)
    tasks = parse_stream(stream, data_dir)
    names = parse_strategies(strategies)
    data, cfg = continual_setup(preset, seed=seed, steps=steps, sparsity=sparsity, method=method, k=k)
    record = {"command": "run", "device": str(device),
              "stream": tasks, "strategies": names, "model": model, "head": head,
              "preset": preset, "seed": seed, "k": data.k, "config": cfg.to_json(),
              "task_inference": task_inference,
              "data": data_source(data_dir)}
    if resume:
        _check_resume(Path(out), record)
    splits = [load_rows(t, data_dir, data, seed=seed) for t in tasks]
    torch.manual_seed(seed)
    clf = build_classifier(model, head=head, max_length=data.max_length, device=device)
    for i, s in enumerate(splits):
        clf.add_task(s.spec, seed=seed + i)
    out = Path(out) if resume else prepare_out_dir(out, overwrite=overwrite, owns=(RUN_CONFIG, "results.json"))
    if not resume:
        write_json(out / RUN_CONFIG, run_record(**record))
    bm = make_benchmark(splits, clf)
    _run(clf, bm, tasks, names, cfg, out, {t: s.dev for t, s in zip(tasks, splits)}, resume, quiet,
         read_json(out / RUN_CONFIG), task_inference)


def _check_resume(out: Path, record: dict) -> None:
    from ..artifacts import RUN_CONFIG, read_json

    if not (out / RUN_CONFIG).is_file():
        raise UserError(f"--resume: {out} holds no run to resume ({RUN_CONFIG} missing)")
    saved = read_json(out / RUN_CONFIG)
    for key in _SAME_RUN:
        if saved.get(key) != record[key]:
            was = saved.get(key) if key != "config" else "other settings"
            raise UserError(f"--resume: {out} holds a run with another {key} ({was}); use a new --out")


def _run(clf, bm, tasks, names, cfg, out, dev_rows, resume, quiet, record, task_inference) -> None:
    from ..strategies.report import strategy_table, summary_table, write_results
    from ..strategies.runner import run_continual

    results = run_continual(clf, bm, tasks, names, cfg, out=out, dev_rows=dev_rows, resume=resume,
                            task_inference=task_inference, progress=not quiet, on_result=lambda r: click.echo("\n" + strategy_table(r)))
    write_results(out, results, record=record)
    click.echo("\n" + summary_table(results) + f"\n\nresults -> {out}")
