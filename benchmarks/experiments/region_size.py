"""GraftStrategy's automatic region size against fixed sizes and Avalanche's baselines, in plain Avalanche runs.

Every strategy gets the same model (seeded), optimizer (SGD lr 0.05, momentum 0.9), batch size 32 and epochs per
experience; only the strategy line differs, and every strategy runs at its defaults: ``GraftStrategy`` with no
size argument (the automatic size of :mod:`cl_graft.strategies.graft.sizing`), ``GraftStrategy(size=s)`` for fixed
shares s, and Avalanche's ``Naive``, ``EWC``, ``LwF``, ``SynapticIntelligence``, ``Replay``, ``GEM`` and ``AGEM``
(Avalanche's defaults; where Avalanche has none: EWC λ = 100, LwF α = 1 and T = 2, SI λ = 1, GEM/A-GEM 32
patterns per experience, the values of ``avalanche_digits``; GEM needs the ``quadprog`` solver:
``pip install -e ".[baselines]"``). Benchmarks, all from sklearn's digits (1797 8×8
images, 70/30 stratified split; offline):

- ``split-digits``: Avalanche's ``nc_benchmark``, 5 experiences × 2 classes with task labels, ``MTSimpleMLP``;
- ``split-digits-cnn``: the same stream with a from-scratch convolutional model (:func:`conv_trunk_model`);
- ``permuted-N-single`` / ``permuted-N-multi``: N tasks, each all 10 classes under a fixed pixel permutation
  (seeded), task labels given; a from-scratch single-head ``nn.Sequential`` MLP (64-256-10; every layer
  graftable) or ``MTSimpleMLP`` (one head per task).

After experience i the seen tasks 0..i are evaluated (the accuracy matrix; ``--final-only`` evaluates once at
the end, for long capacity runs). Per run: the matrix, final average accuracy and forgetting
(:mod:`cl_graft.strategies.comparison.metrics`), training and evaluation wall time, the seconds the graft plugin spent
choosing and finding regions, and for grafting the share of graftable elements owned after each task and each
task's size record. Results: ``runs.jsonl`` (one line per run, appended as runs finish: an interrupted
invocation keeps what ran, and ``--resume`` skips runs already there), ``region_size.json`` and
``region_size.md`` (tables: mean ± sample sd over seeds, paired 95% t-intervals of default graft minus every
other strategy, wall times), ``capacity.png`` (share owned after each task) and ``accuracy.png`` (final accuracy
on each task), each with its run record (made by :mod:`.region_size_report`).

Run (2 CPU threads are enough; one thread per process)::

    nice -n 10 python -m cl_graft.benchmarks.experiments.region_size --out benchmarks/results/region_size
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import click
import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

from cl_graft.provenance import run_record
from cl_graft.strategies.comparison.metrics import summarize

from .region_size_report import RUNS, read_runs, write_report

FIXED = {"graft-0.1%": 0.001, "graft-1%": 0.01, "graft-5%": 0.05, "graft-10%": 0.1}
STRATEGIES = ("graft", *FIXED, "naive", "ewc", "lwf", "si", "replay", "gem", "agem")
BENCHMARKS = ("split-digits", "permuted-20-single", "permuted-20-multi")
EPOCHS, MB, LR, HIDDEN = 20, 32, 0.05, 256


# ----- data and models --------------------------------------------------------------------------------
def _digits():
    x, y = load_digits(return_X_y=True)
    return train_test_split(x / 16.0, y, test_size=0.3, random_state=0, stratify=y)


def split_digits(seed: int):
    """5 experiences × 2 classes with task labels 0..4 (class order by ``seed``), class ids 0, 1 in every task:
    each head of ``MTSimpleMLP`` has 2 units. (With Avalanche's default global class ids its ``MultiHeadClassifier``
    pads a head's output with zeros up to the largest class id seen, so a task whose real logits are all negative
    loses rows to a padded 0 once later tasks add classes: accuracy changes with no parameter changing.)"""
    from avalanche.benchmarks import nc_benchmark

    xtr, xte, ytr, yte = _digits()

    def dataset(xs, ys):
        ds = TensorDataset(torch.tensor(xs, dtype=torch.float32), torch.tensor(ys))
        ds.targets = ys.tolist()
        return ds

    return nc_benchmark(dataset(xtr, ytr), dataset(xte, yte), n_experiences=5, task_labels=True, seed=seed,
                        class_ids_from_zero_in_each_exp=True)


def permuted_digits(n_tasks: int, seed: int, *, multi_head: bool = False):
    """``n_tasks`` experiences, each all 10 digits under its own pixel permutation (seeded), task label i.

    Built with Avalanche's ``benchmark_from_datasets``; for a multi-head model with the deprecated
    ``tensors_benchmark`` (the same tensors), because ``MultiHeadClassifier`` cannot index its active units with
    the set that the new API's ``with_classes_timeline`` gives (an IndexError in Avalanche's head adaptation)."""
    from avalanche.benchmarks.scenarios import benchmark_from_datasets, with_classes_timeline
    from avalanche.benchmarks.scenarios.task_aware import with_task_labels
    from avalanche.benchmarks.utils import DataAttribute, TaskAwareSupervisedClassificationDataset
    from avalanche.benchmarks.utils.data_attribute import TaskLabels
    from avalanche.benchmarks.utils.flat_data import ConstantSequence

    xtr, xte, ytr, yte = _digits()

    def dataset(xs, ys, task):
        return TaskAwareSupervisedClassificationDataset(
            [TensorDataset(torch.tensor(xs, dtype=torch.float32), torch.tensor(ys))],
            data_attributes=[DataAttribute(ys.tolist(), "targets"), TaskLabels(ConstantSequence(task, len(ys)))])

    rng = np.random.default_rng(seed)
    if multi_head:
        from avalanche.benchmarks.scenarios.deprecated.generators import tensors_benchmark

        perms = [rng.permutation(64) for _ in range(n_tasks)]
        return tensors_benchmark(
            train_tensors=[(torch.tensor(xtr[:, p], dtype=torch.float32), torch.tensor(ytr)) for p in perms],
            test_tensors=[(torch.tensor(xte[:, p], dtype=torch.float32), torch.tensor(yte)) for p in perms],
            task_labels=list(range(n_tasks)))
    train, test = [], []
    for t in range(n_tasks):
        perm = rng.permutation(64)
        train.append(dataset(xtr[:, perm], ytr, t))
        test.append(dataset(xte[:, perm], yte, t))
    return with_classes_timeline(with_task_labels(benchmark_from_datasets(train=train, test=test)))


def conv_trunk_model():
    """A from-scratch convolutional model with one head per task (a ``MultiTaskModule``): the 64 pixels as an
    8×8 image, two 3×3 convolutions (16, 32 channels), 2×2 max-pooling, a 64-unit layer, Avalanche's
    ``MultiHeadClassifier``."""
    from avalanche.models import MultiHeadClassifier, MultiTaskModule
    from torch import nn

    class ConvDigits(MultiTaskModule):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Flatten(), nn.Linear(32 * 16, 64), nn.ReLU())
            self.classifier = MultiHeadClassifier(64)

        def forward_single_task(self, x, task_label):
            return self.classifier(self.features(x), task_label)

    return ConvDigits()


def make_benchmark(name: str, seed: int):
    """The benchmark and its model (seeded by ``seed``)."""
    from avalanche.models import MTSimpleMLP

    if name == "split-digits-cnn":
        bm = split_digits(seed)
        torch.manual_seed(seed)
        return bm, conv_trunk_model()
    if name == "split-digits":
        bm, head = split_digits(seed), "multi"
    else:
        _, n, head = name.split("-")
        bm = permuted_digits(int(n), seed, multi_head=head == "multi")
    torch.manual_seed(seed)
    if head == "multi":
        return bm, MTSimpleMLP(input_size=64, hidden_size=HIDDEN)
    return bm, torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10))


def make_strategy(name: str, model, evaluator, epochs: int = EPOCHS):
    """The one line that differs between runs."""
    import avalanche.training as av

    from cl_graft.strategies import GraftStrategy

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
            "si": lambda: av.SynapticIntelligence(**common, si_lambda=1.0),
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
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for runs.jsonl, region_size.json/.md and capacity.png (made if missing).")
@click.option("--benchmarks", default=",".join(BENCHMARKS), show_default=True,
              help="Comma-separated: split-digits, split-digits-cnn, permuted-N-single, permuted-N-multi (N tasks).")
@click.option("--strategies", default=",".join(STRATEGIES), show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--epochs", type=int, default=EPOCHS, show_default=True, help="Epochs per experience, every strategy.")
@click.option("--final-only", is_flag=True, help="Evaluate only after the last experience (long streams).")
@click.option("--resume", is_flag=True, help="Keep runs.jsonl in --out and skip the runs it holds.")
@click.option("--report-only", is_flag=True, help="Only rewrite the tables and figure from runs.jsonl.")
def main(out: Path, benchmarks: str, strategies: str, seeds: str, epochs: int, final_only: bool, resume: bool,
         report_only: bool) -> None:
    """Default GraftStrategy vs fixed region sizes vs Avalanche's baselines (see the module docstring)."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    record = run_record(device="cpu")
    runs_file = out / RUNS
    if not report_only:
        if runs_file.exists() and not resume:
            raise click.UsageError(f"{runs_file} exists: pass --resume to add to it or use a new --out")
        out.mkdir(parents=True, exist_ok=True)
        done = {(r["benchmark"], r["strategy"], r["seed"]) for r in read_runs(runs_file)}
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
                    with runs_file.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    click.echo(f"{bench} {name} seed {seed}: " + (row.get("error") or
                               f"accuracy {100 * row['average']:.1f} train {row['train_seconds']:.0f}s"), err=True)
    write_report(out, record)


if __name__ == "__main__":
    main()
