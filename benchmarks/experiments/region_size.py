"""GraftStrategy's automatic region size against fixed sizes and Avalanche's baselines, in plain Avalanche runs.

Every strategy gets the same model (seeded), optimizer (SGD lr 0.05, momentum 0.9), batch size 32 and epochs per
experience; only the strategy line differs, and every strategy runs at its defaults: ``GraftStrategy`` with no
size argument (the automatic size of :mod:`cl_graft.strategies.graft.sizing`), ``GraftStrategy(size=s)`` for fixed
shares s, and Avalanche's ``Naive``, ``EWC``, ``LwF``, ``SynapticIntelligence``, ``Replay``, ``GEM`` and ``AGEM``
(Avalanche's defaults; where Avalanche has none: EWC λ = 100, LwF α = 1 and T = 2, GEM/A-GEM 32 patterns per
experience, the values of ``avalanche_digits``; SI is ``Naive`` with
:class:`~cl_graft.strategies.plugins.synaptic_intelligence.CopiedSynapticIntelligence` at λ = 100, damping 0.1,
because Avalanche's own SI learns no importance on CPU and equals Naive; ``benchmarks/results/sanity.md``;
GEM needs the ``quadprog`` solver:
``pip install -e ".[baselines]"``). Benchmarks, all from sklearn's digits (1797 8×8
images, 70/30 stratified split; offline):

- ``split-digits``: Avalanche's ``nc_benchmark``, 5 experiences × 2 classes with task labels, ``MTSimpleMLP``;
- ``split-digits-cnn``: the same stream with a from-scratch convolutional model (:func:`cl_graft.benchmarks.digits.conv_trunk_model`);
- ``permuted-N-single`` / ``permuted-N-multi``: N tasks, each all 10 classes under a fixed pixel permutation
  (seeded), task labels given; a from-scratch single-head ``nn.Sequential`` MLP (64-256-10; every layer
  graftable) or ``MTSimpleMLP`` (one head per task).

After experience i the seen tasks 0..i are evaluated (the accuracy matrix; ``--final-only`` evaluates once at
the end, for long capacity runs). Per run: the matrix, final average accuracy and forgetting
(:mod:`cl_graft.strategies.comparison.metrics`), training and evaluation wall time, the seconds the graft plugin spent
choosing and finding regions, and for grafting the share of graftable elements owned after each task and each
task's size record. Results in ``--out`` (claimed as a command's folder, :mod:`.script_out`): ``runs.jsonl`` (one
line per run, added as runs finish: an interrupted invocation keeps what ran, and ``--resume`` skips runs already
there; ``--report-only FILE`` runs nothing and reports the runs of another ``runs.jsonl``), ``region_size.json`` and
``region_size.md`` (tables: mean ± sample sd over seeds, paired 95% t-intervals of default graft minus every
other strategy, wall times), ``capacity.png`` (share owned after each task) and ``accuracy.png`` (final accuracy
on each task), each with its run record (made by :mod:`.region_size_report`), and ``config.json``.

Run (2 CPU threads are enough; one thread per process), then copy the results into the repository's folder::

    nice -n 10 python -m cl_graft.benchmarks.experiments.region_size --out runs/region_size
    cp runs/region_size/{runs.jsonl,region_size.json,region_size.md,capacity.png,accuracy.png} \\
        benchmarks/results/region_size/
    # the committed pages again from the committed runs:
    python -m cl_graft.benchmarks.experiments.region_size --out runs/rs_page \\
        --report-only benchmarks/results/region_size/runs.jsonl
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import click
import numpy as np
import torch

from cl_graft.benchmarks.digits import digits_model, permuted_digits, split_digits
from cl_graft.files import write_text
from cl_graft.provenance import run_record
from cl_graft.strategies.comparison.metrics import summarize

from .region_size_report import RUNS, read_runs, write_report
from .script_out import claimed, out_options

FIXED = {"graft-0.1%": 0.001, "graft-1%": 0.01, "graft-2%": 0.02, "graft-5%": 0.05, "graft-10%": 0.1}
STRATEGIES = ("graft", *FIXED, "naive", "ewc", "lwf", "si", "replay", "gem", "agem")
BENCHMARKS = ("split-digits", "permuted-20-single", "permuted-20-multi")
EPOCHS, MB, LR = 20, 32, 0.05


# ----- benchmarks and models (cl_graft.benchmarks.digits) -------------------------------------------------
def make_benchmark(name: str, seed: int):
    """The benchmark and its model (seeded by ``seed``): ``split-digits`` (MTSimpleMLP), ``split-digits-cnn``,
    ``permuted-N-single`` (the single-head MLP) or ``permuted-N-multi`` (MTSimpleMLP)."""
    if name in ("split-digits", "split-digits-cnn"):
        return split_digits(seed), digits_model("cnn" if name.endswith("cnn") else "mtmlp", seed)
    _, n, head = name.split("-")
    return (permuted_digits(int(n), seed, multi_head=head == "multi"),
            digits_model("mtmlp" if head == "multi" else "mlp", seed))


def make_strategy(name: str, model, evaluator, epochs: int = EPOCHS):
    """The one line that differs between runs."""
    import avalanche.training as av

    from cl_graft.strategies import GraftStrategy
    from cl_graft.strategies.plugins.synaptic_intelligence import CopiedSynapticIntelligence

    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    common = {"model": model, "optimizer": opt, "criterion": torch.nn.CrossEntropyLoss(), "train_mb_size": MB,
              "train_epochs": epochs, "eval_mb_size": 256, "evaluator": evaluator}
    if name == "graft":
        return GraftStrategy(**common)
    if name in FIXED:
        return GraftStrategy(**common, size=FIXED[name])
    return {"naive": lambda: av.Naive(**common),
            "ewc": lambda: av.EWC(**common, ewc_lambda=100.0),
            "lwf": lambda: av.LwF(**common, alpha=1.0, temperature=2.0),
            "si": lambda: av.Naive(**common, plugins=[CopiedSynapticIntelligence(si_lambda=100.0)]),
            "replay": lambda: av.Replay(**common),
            "gem": lambda: av.GEM(**common, patterns_per_exp=32),
            "agem": lambda: av.AGEM(**common, patterns_per_exp=32)}[name]()


# ----- one run ----------------------------------------------------------------------------------------
def run_one(benchmark: str, name: str, seed: int, *, epochs: int = EPOCHS, final_only: bool = False) -> dict:
    """One strategy on one benchmark and seed."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from cl_graft.strategies.graft.sizing import sizing_records

    bm, model = make_benchmark(benchmark, seed)
    n = len(bm.train_stream)
    strategy = make_strategy(name, model, EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), epochs)
    matrix = np.full((n, n), np.nan)
    train_s = eval_s = 0.0
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(1000 * seed + i)
        t0 = time.perf_counter()
        strategy.train(exp)
        train_s += time.perf_counter() - t0
        if final_only and i < n - 1:
            continue
        t0 = time.perf_counter()
        metrics = strategy.eval(bm.test_stream[:i + 1])
        eval_s += time.perf_counter() - t0
        for j in range(i + 1):
            matrix[i, j] = metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"]
    out = {"benchmark": benchmark, "strategy": name, "seed": seed, "tasks": n, "epochs": epochs,
           "final_only": final_only,
           "train_seconds": round(train_s, 2), "eval_seconds": round(eval_s, 2), "final": matrix[-1].tolist()}
    if not final_only:
        out.update(matrix=matrix.tolist(), **{k: summarize(matrix)[k] for k in ("average", "forgetting")})
    else:
        out["average"] = float(np.mean(matrix[-1]))
    graft = getattr(strategy, "graft", None)
    if graft is not None:
        records = sizing_records(graft.owners)
        numel = sum(o.numel() for o in graft.owners.owner.values())
        out["graftable"] = numel
        out["localize_seconds"] = round(sum(graft.localize_seconds), 3)
        out["search_seconds"] = round(sum(r.get("search_seconds", 0.0) for r in records), 3)
        out["owned"] = np.cumsum([r["share"] for r in records]).tolist()
        out["sizes"] = [{k: r.get(k) for k in ("task", "share", "loss", "bound", "kept", "met", "free", "allowance",
                                               "cap_share", "below_cap", "score", "reference", "chance",
                                               "above_chance", "rungs")} for r in records]
        out["below_cap"] = sum(bool(r.get("below_cap")) for r in records)
        out["below_target"] = [r["task"] for r in records if r.get("met") is False]
        out["at_chance"] = [r["task"] for r in records if r.get("above_chance") is False]
    return out


@click.command()
@out_options(resume=True)
@click.option("--benchmarks", default=",".join(BENCHMARKS), show_default=True,
              help="Comma-separated: split-digits, split-digits-cnn, permuted-N-single, permuted-N-multi (N tasks).")
@click.option("--strategies", default=",".join(STRATEGIES), show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--epochs", type=int, default=EPOCHS, show_default=True, help="Epochs per experience, every strategy.")
@click.option("--final-only", is_flag=True, help="Evaluate only after the last experience (long streams).")
@click.option("--report-only", "report_from", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="Run nothing: the tables and figures of the runs in this runs.jsonl (copied into "
                                 "--out).")
def main(out: Path, overwrite: bool, resume: bool, benchmarks: str, strategies: str, seeds: str, epochs: int,
         final_only: bool, report_from: Path | None) -> None:
    """Default GraftStrategy vs fixed region sizes vs Avalanche's baselines (see the module docstring)."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    record = run_record(device="cpu")
    params = click.get_current_context().params
    with claimed("region_size", params, settings={}) as run_dir:        # each run's row records its settings
        runs_file = run_dir.path / RUNS
        if report_from is not None:
            write_text(runs_file, report_from.read_text(encoding="utf-8"))
        else:
            _run_all(runs_file, benchmarks, strategies, seeds, epochs, final_only, record)
        write_report(run_dir.path, record)


def _run_all(runs_file: Path, benchmarks: str, strategies: str, seeds: str, epochs: int, final_only: bool,
             record: dict) -> None:
    """Every benchmark × strategy × seed not yet in ``runs_file``; each run's row is added as it ends, with
    ``record`` (this invocation's run record: command line, revision, device, versions)."""
    rows = read_runs(runs_file)
    done = {(r["benchmark"], r["strategy"], r["seed"]) for r in rows}
    for bench in benchmarks.split(","):
        for name in strategies.split(","):
            for seed in (int(s) for s in seeds.split(",")):
                if (bench, name, seed) in done:
                    continue
                try:
                    row = run_one(bench, name, seed, epochs=epochs, final_only=final_only)
                except Exception as e:                           # noqa: BLE001 — recorded, e.g. a baseline
                    row = {"benchmark": bench, "strategy": name, "seed": seed, "error": f"{type(e).__name__}: "
                           f"{e}"[:300]}
                rows.append({**row, "record": record})
                write_text(runs_file, "".join(json.dumps(r) + "\n" for r in rows))
                click.echo(f"{bench} {name} seed {seed}: " + (row.get("error") or
                           f"accuracy {100 * row['average']:.1f} train {row['train_seconds']:.0f}s"), err=True)


if __name__ == "__main__":
    main()
