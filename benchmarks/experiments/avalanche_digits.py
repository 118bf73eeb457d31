"""GraftStrategy in a plain Avalanche experiment: split digits (sklearn's load_digits, offline), MTSimpleMLP.

Everything but the strategy line is Avalanche's own: ``nc_benchmark`` splits the 10 classes into 5 experiences
of 2 classes with task labels, the model is ``MTSimpleMLP`` (one head per task), the evaluator is an
``EvaluationPlugin``; ``GraftStrategy`` takes the same keyword arguments as ``Naive``, ``EWC``, ``LwF``, ``SI`` and
``PackNet``. Each strategy runs 3 seeds (class order, initialisation, batch order); after experience ``i`` the
seen tasks ``0..i`` are evaluated, giving the accuracy matrix, final accuracy and forgetting
(:mod:`cl_graft.strategies.comparison.metrics`). Storage is what a strategy keeps beyond the initial model to serve every
task: the trained model (all heads) plus the tensors its plugins keep (EWC importances and saved parameters,
LwF's previous model, SI's trajectories, PackNet's masks), or, for grafting, the regions and heads. Grafting is
also evaluated without task labels (entropy routing and feature-statistics routing,
:mod:`cl_graft.strategies.graft.routing`).

Run: ``python -m cl_graft.benchmarks.experiments.avalanche_digits --out DIR --page
benchmarks/results/avalanche_digits.md`` (writes ``DIR/avalanche_digits.{json,md}`` and the run record
``DIR/config.json``, :mod:`.script_out`; the page also where ``--page`` says).
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import click
import numpy as np
import torch

from cl_graft.benchmarks.digits import HIDDEN, digits_model, split_digits
from cl_graft.files import write_json
from cl_graft.outdir import OutDir
from cl_graft.provenance import run_record
from cl_graft.strategies.comparison.metrics import summarize

from .script_out import claimed, out_options, write_page

STRATEGIES = ("graft", "naive", "ewc", "lwf", "si", "packnet", "packnet-cl-graft")
EPOCHS, MB, LR = 20, 32, 0.05


def make_strategy(name: str, model, evaluator, n_experiences: int, steps: int):
    """The one line that differs between runs; every strategy gets the same optimizer and batch sizes.

    ``packnet`` is Avalanche's (``PackNetModel`` + ``PackNet``); ``packnet-cl-graft`` is cl-graft's
    :class:`~cl_graft.strategies.PackNetPlugin` (``steps`` = optimizer steps of an experience) in a plain
    ``SupervisedTemplate``."""
    from avalanche.training import EWC, LwF, Naive, PackNet, SynapticIntelligence
    from cl_graft.strategies import GraftStrategy, LocalizeFinder

    from cl_graft.regions.config import LocalizeConfig

    common = {"criterion": torch.nn.CrossEntropyLoss(), "train_mb_size": MB, "train_epochs": EPOCHS,
              "eval_mb_size": 256, "evaluator": evaluator}
    if name == "packnet":
        from avalanche.models.packnet import PackNetModel

        model = PackNetModel(model)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        return PackNet(model=model, optimizer=opt, post_prune_epochs=EPOCHS // 4,
                       prune_proportion=1 - 1 / n_experiences, **common)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    if name == "packnet-cl-graft":
        from avalanche.training.templates import SupervisedTemplate
        from cl_graft.strategies import PackNetPlugin

        plugin = PackNetPlugin(steps=steps, n_tasks=n_experiences)
        return SupervisedTemplate(model=model, optimizer=opt, plugins=[plugin], **common)
    if name == "graft":
        finder = LocalizeFinder("graft", LocalizeConfig(sparsity=0.1, seed=0))
        return GraftStrategy(model=model, optimizer=opt, finder=finder, **common)
    if name == "naive":
        return Naive(model=model, optimizer=opt, **common)
    if name == "ewc":
        return EWC(model=model, optimizer=opt, ewc_lambda=100.0, mode="separate", **common)
    if name == "lwf":
        return LwF(model=model, optimizer=opt, alpha=1.0, temperature=2.0, **common)
    return SynapticIntelligence(model=model, optimizer=opt, si_lambda=1.0, **common)


def _tensor_bytes(obj, seen: set[int], depth: int = 0) -> int:
    """Bytes of the tensors reachable from ``obj`` (dicts, lists, modules, objects' attributes), each once."""
    if depth > 6 or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, torch.nn.Module):
        return sum(_tensor_bytes(t, seen, depth + 1) for t in (*obj.parameters(), *obj.buffers()))
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen, depth + 1) for v in obj)
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("avalanche"):
        return sum(_tensor_bytes(v, seen, depth + 1) for v in vars(obj).values())
    return 0


def storage(name: str, strategy) -> int:
    """Bytes kept beyond the initial model to serve every task (see the module docstring)."""
    if name in ("graft", "packnet-cl-graft"):
        return next(p for p in strategy.plugins if hasattr(p, "owners")).owners.bytes()["total"]
    seen = {id(p) for p in strategy.plugins if type(p).__name__ in ("EvaluationPlugin", "Clock")}
    total = _tensor_bytes(strategy.model, seen)
    for plugin in strategy.plugins:
        total += _tensor_bytes(plugin, seen)
    return total


def run_one(name: str, seed: int) -> dict:
    """One strategy on one seed: accuracy matrix (NaN above the diagonal), summary, bytes, seconds."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin
    from cl_graft.strategies import TaskIdentificationAccuracy

    bm = split_digits(seed, from_zero=False)                        # global class ids, as published
    n = len(bm.train_stream)
    model = digits_model("mtmlp", seed)
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True, stream=True), TaskIdentificationAccuracy(),
                                 loggers=[])
    steps = EPOCHS * -(-min(len(e.dataset) for e in bm.train_stream) // MB)
    strategy = make_strategy(name, model, evaluator, n, steps)
    matrix = np.full((n, n), np.nan)
    t0 = time.perf_counter()
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(1000 * seed + i)
        strategy.train(exp)
        metrics = strategy.eval(bm.test_stream[:i + 1])
        for j in range(i + 1):
            matrix[i, j] = metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"]
    out = {"strategy": name, "seed": seed, "classes": [list(e.classes_in_this_experience) for e in bm.train_stream],
           "matrix": matrix.tolist(), **summarize(matrix), "seconds": round(time.perf_counter() - t0, 2),
           "bytes": storage(name, strategy)}
    if name == "graft":                                               # the same model, task labels withheld
        strategy.graft.task_inference = "entropy"
        metrics = strategy.eval(bm.test_stream)
        out["task_agnostic"] = float(metrics["Top1_Acc_Stream/eval_phase/test_stream/Task004"])
        out["task_aware"] = float(np.mean(matrix[-1]))
        out["task_id"] = float(metrics["TaskInference_Acc_Stream/eval_phase/test_stream"])
        strategy.graft.task_inference = "features"                  # head-input statistics instead of entropy
        metrics = strategy.eval(bm.test_stream)
        out["task_agnostic_features"] = float(metrics["Top1_Acc_Stream/eval_phase/test_stream/Task004"])
        out["task_id_features"] = float(metrics["TaskInference_Acc_Stream/eval_phase/test_stream"])
    return out


def _mean_sd(values: list[float]) -> str:
    return f"{100 * np.mean(values):.1f} ± {100 * np.std(values):.1f}"


def write(rows: list[dict], run_dir: OutDir, command: str, page: Path | None) -> None:
    """``avalanche_digits.json`` and the page ``avalanche_digits.md`` in ``--out`` (and at ``page``)."""
    record = run_record(command=command, device="cpu")
    write_json(run_dir.path / "avalanche_digits.json", {"run": record, "runs": rows})
    lines = ["# GraftStrategy in a plain Avalanche experiment: split digits, MTSimpleMLP", "",
             (f"Command: `{command}` (2 shared CPU cores; wall times are noisy). sklearn's `load_digits` "
             "(1797 8×8 images; 70/30 stratified split), Avalanche's `nc_benchmark` (5 experiences × 2 classes, "
             f"task labels, class order by seed), `MTSimpleMLP(64, {HIDDEN})`, SGD lr {LR} momentum 0.9, "
             f"{EPOCHS} epochs of batch {MB} per experience; seen tasks evaluated after each experience. "
             "Mean ± sd over seeds 0, 1, 2; accuracy, forgetting in %."), "",
             "| strategy | final accuracy | forgetting | stored beyond θ_pre | wall time (s) |", "|---|---|---|---|---|"]
    for name in dict.fromkeys(r["strategy"] for r in rows):
        runs = [r for r in rows if r["strategy"] == name]
        if "error" in runs[0]:
            lines.append(f"| {name} | failed: {runs[0]['error']} | | | |")
            continue
        kb = np.mean([r["bytes"] for r in runs]) / 1024
        secs = np.mean([r["seconds"] for r in runs])
        lines.append(f"| {name} | {_mean_sd([r['average'] for r in runs])} | "
                     f"{_mean_sd([r['forgetting'] for r in runs])} | {kb:.0f} KiB | {secs:.1f} |")
    graft = [r for r in rows if r["strategy"] == "graft" and "task_agnostic" in r]
    if graft:
        lines += ["", ("Grafting without task labels at test time (entropy routing over the 5 tasks' models, "
                  "5 forward passes per input; labels are digit classes, so a wrong task gives a wrong class):"), "",
                  "| task-aware accuracy | task-agnostic accuracy | task identification |", "|---|---|---|",
                  (f"| {_mean_sd([r['task_aware'] for r in graft])} | {_mean_sd([r['task_agnostic'] for r in graft])} "
                  f"| {_mean_sd([r['task_id'] for r in graft])} |")]
    graft = [r for r in graft if "task_agnostic_features" in r]
    if graft:
        lines += ["", ("The same models routed by head-input feature statistics (`task_inference=\"features\"`: "
                  "a linear discriminant of the heads' input at θ_pre, one mean per task and a pooled covariance "
                  "fitted on the tasks' training examples; 2 forward passes per input):"), "",
                  "| task-aware accuracy | task-agnostic accuracy | task identification |", "|---|---|---|",
                  (f"| {_mean_sd([r['task_aware'] for r in graft])} | "
                  f"{_mean_sd([r['task_agnostic_features'] for r in graft])} "
                  f"| {_mean_sd([r['task_id_features'] for r in graft])} |")]
    write_page("\n".join(lines) + "\n", run_dir, "avalanche_digits.md", page)


@click.command(help=__doc__.splitlines()[0])
@click.option("--strategies", default=",".join(STRATEGIES), show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True)
@out_options(page=True)
def main(strategies, seeds, out, overwrite, page) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    with claimed("avalanche_digits", click.get_current_context().params) as run_dir:
        rows = []
        for name in strategies.split(","):
            for seed in (int(s) for s in seeds.split(",")):
                try:
                    rows.append(run_one(name, seed))
                except Exception as e:                               # noqa: BLE001 — recorded: Avalanche's PackNet
                    rows.append({"strategy": name, "seed": seed, "error": f"{type(e).__name__}: {e}"[:200]})
                    print(name, seed, rows[-1]["error"])
                    break
                print(name, seed, {k: rows[-1][k] for k in ("average", "forgetting", "bytes", "seconds")},
                      flush=True)
        command = "python -m cl_graft.benchmarks.experiments.avalanche_digits"
        write(rows, run_dir, command + (f" --strategies {strategies}" if strategies != ",".join(STRATEGIES) else ""),
              page)


if __name__ == "__main__":
    main()
