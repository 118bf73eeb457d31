"""Probes of three baselines that the sanity flags marked in the runs of the retired region_size experiment
(``benchmarks/results/sanity.md``), with Avalanche directly, in that experiment's setting (digit streams, SGD lr
0.05 momentum 0.9, batch 32, seed 0):

- ``si``: Avalanche's ``SynapticIntelligence`` vs :class:`~cl_graft.strategies.plugins.synaptic_intelligence.
  CopiedSynapticIntelligence` on ``permuted-N-single``: the importances after each experience and the final rows;
- ``ewc``: ``EWC`` on ``permuted-N-single``: after each experience the largest summed Fisher entry, ``η·2λ·ΣF``
  (heavy-ball SGD is stable on the penalty's quadratic only below ``2(1 + β)`` = 3.8) and whether the weights
  are finite; the final row;
- ``lwf``: ``LwF`` (or Naive, ``--alpha 0``) on ``permuted-N-multi`` (MTSimpleMLP): the final row, how far task
  0's head moved since task 0, and task 0's accuracy with that head now vs put back as it was.

Run: ``python -m cl_graft.benchmarks.experiments.probes.flagged_baselines ewc --tasks 50 --epochs 10 --ewc-lambda 100``.
The probes print their findings and write no file (so no ``--out``, unlike the experiment scripts).
"""
from __future__ import annotations

import copy
import warnings

import click
import numpy as np
import torch

from cl_graft.benchmarks.digits import digits_model, permuted_digits

LR, MOMENTUM, MB = 0.05, 0.9, 32


def _template(make, model, epochs: int, **kwargs):
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    return make(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                criterion=torch.nn.CrossEntropyLoss(), train_mb_size=MB, train_epochs=epochs, eval_mb_size=256,
                evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **kwargs)


def _final(strategy, bm) -> np.ndarray:
    metrics = strategy.eval(bm.test_stream)
    n = len(bm.test_stream)
    return np.array([metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"] for j in range(n)])


def _row(final: np.ndarray) -> str:
    return f"final average {100 * final.mean():.1f}%, per task {np.round(100 * final).astype(int).tolist()}"


@click.group()
def probes() -> None:
    """Probes of SI, EWC and LwF (see the module docstring)."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


@probes.command()
@click.option("--tasks", default=4, show_default=True)
@click.option("--epochs", default=2, show_default=True)
@click.option("--si-lambda", default=100.0, show_default=True)
@click.option("--eps", default=0.1, show_default=True, help="Damping ξ of the copying plugin.")
def si(tasks: int, epochs: int, si_lambda: float, eps: float) -> None:
    """Avalanche's SI vs the copying plugin vs Naive: importances after each experience, final rows."""
    from avalanche.training import Naive, SynapticIntelligence
    from avalanche.training.plugins import SynapticIntelligencePlugin

    from cl_graft.strategies.plugins.synaptic_intelligence import CopiedSynapticIntelligence

    makers = {"naive": lambda m: _template(Naive, m, epochs),
              "avalanche SI": lambda m: _template(SynapticIntelligence, m, epochs, si_lambda=si_lambda),
              "copied SI": lambda m: _template(Naive, m, epochs,
                                               plugins=[CopiedSynapticIntelligence(si_lambda=si_lambda, eps=eps)])}
    for name, make in makers.items():
        bm = permuted_digits(tasks, 0)
        strategy = make(digits_model("mlp", 0))
        plugin = next((p for p in strategy.plugins if isinstance(p, SynapticIntelligencePlugin)), None)
        for i, exp in enumerate(bm.train_stream):
            torch.manual_seed(i)
            strategy.train(exp)
            if plugin is not None:
                imp = torch.cat([d.data for d in plugin.ewc_data[1].values()])
                click.echo(f"{name} after task {i}: importance min {imp.min():.3g} max {imp.max():.3g}, "
                           f"{100 * (imp != 0).float().mean():.0f}% nonzero")
        click.echo(f"{name}: {_row(_final(strategy, bm))}")


@probes.command()
@click.option("--tasks", default=50, show_default=True)
@click.option("--epochs", default=10, show_default=True)
@click.option("--ewc-lambda", default=100.0, show_default=True)
@click.option("--decay", type=float, default=None, help="Online EWC with this decay factor (else mode separate).")
def ewc(tasks: int, epochs: int, ewc_lambda: float, decay: float | None) -> None:
    """EWC's summed Fisher against the SGD stability bound, experience by experience."""
    from avalanche.training import EWC
    from avalanche.training.plugins import EWCPlugin

    bm = permuted_digits(tasks, 0)
    mode = {"mode": "separate"} if decay is None else {"mode": "online", "decay_factor": decay}
    strategy = _template(EWC, digits_model("mlp", 0), epochs, ewc_lambda=ewc_lambda, **mode)
    plugin = next(p for p in strategy.plugins if isinstance(p, EWCPlugin))
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(i)
        strategy.train(exp)
        summed = sum(torch.cat([v.data.flatten() for v in d.values()]) for d in plugin.importances.values())
        finite = all(torch.isfinite(p).all().item() for p in strategy.model.parameters())
        top = float(summed.max())
        click.echo(f"after task {i}: max summed Fisher {top:.3g}, η·2λ·ΣF {LR * 2 * ewc_lambda * top:.3g} "
                   f"(bound {2 * (1 + MOMENTUM):.1f}), weights finite: {finite}")
        if not finite:
            break
    click.echo(_row(_final(strategy, bm)))


@probes.command()
@click.option("--tasks", default=12, show_default=True)
@click.option("--epochs", default=10, show_default=True)
@click.option("--alpha", default=1.0, show_default=True, help="LwF's α; 0 runs Naive.")
def lwf(tasks: int, epochs: int, alpha: float) -> None:
    """LwF on a multi-head permuted stream: what happens to task 0's head."""
    from avalanche.training import LwF, Naive

    bm = permuted_digits(tasks, 0, multi_head=True)
    model = digits_model("mtmlp", 0)
    strategy = (_template(Naive, model, epochs) if alpha == 0 else
                _template(LwF, model, epochs, alpha=alpha, temperature=2.0))
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(i)
        strategy.train(exp)
        if i == 0:
            kept = copy.deepcopy(model.classifier.classifiers["0"].state_dict())
    click.echo(_row(_final(strategy, bm)))
    w0 = kept["classifier.weight"]
    moved = float((model.classifier.classifiers["0"].classifier.weight - w0).norm() / w0.norm())
    x, y, _ = next(iter(torch.utils.data.DataLoader(bm.test_stream[0].dataset, batch_size=10_000)))

    def task0(head) -> float:
        probe = copy.deepcopy(model).eval()
        if head is not None:
            probe.classifier.classifiers["0"].load_state_dict(head)
        with torch.no_grad():
            return 100 * float((probe(x, torch.zeros(len(x), dtype=torch.long)).argmax(1) == y).float().mean())

    click.echo(f"task 0's head moved by {moved:.2f} of its norm since task 0; task 0 with it {task0(None):.1f}%, "
               f"with it as after task 0 {task0(kept):.1f}% (same trunk)")


if __name__ == "__main__":
    probes()
