"""GraftStrategy in a plain Avalanche experiment: Avalanche's benchmark loop, EvaluationPlugin and loggers.

Forget-free continual learning by grafting (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600):

    python -m cl_graft.benchmarks.experiments.example_avalanche --stream qnli,sst2 --data-dir ../shared/data \\
        --out runs/example_avalanche

Everything below is ordinary Avalanche code; the cl-graft parts are the benchmark builder (tokenised text
experiences with task labels), the model adapter (one linear head per task) and the strategy. Avalanche's
metrics (accuracy, forgetting, BWT per experience and stream) and loggers (interactive, text, CSV) work
unchanged; forgetting comes out as exactly 0. Avalanche's text and CSV logs go to ``<out>/logs``, the run record
to ``<out>/config.json`` (``--out`` is claimed as a command's folder, :mod:`.script_out`).
"""
from __future__ import annotations

import click
import torch

from .script_out import adopt, claimed, out_options


@click.command(help=__doc__.splitlines()[0])
@click.option("--stream", default="qnli,sst2", show_default=True)
@click.option("--data-dir", default=None, help="local task folders (default: $CL_GRAFT_DATA or the Hub)")
@click.option("--model", default="minilm", show_default=True)
@click.option("--k", type=int, default=32, show_default=True, help="training rows per class")
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--region-size", type=float, default=0.01, show_default=True,
              help="each task's region, fraction of the layers")
@out_options()
def main(stream, data_dir, model, k, epochs, region_size, out, overwrite) -> dict:
    """Runs the example; returns Avalanche's last metrics."""
    from avalanche.evaluation.metrics import accuracy_metrics, bwt_metrics, forgetting_metrics
    from avalanche.logging import CSVLogger, InteractiveLogger, TextLogger
    from avalanche.training.plugins import EvaluationPlugin
    from cl_graft.benchmarks import cap, kshot, load_task
    from cl_graft.benchmarks.streams import make_benchmark
    from cl_graft.strategies import GraftStrategy, LocalizeFinder, TaskAdapter

    from cl_graft.regions.config import LocalizeConfig
    from cl_graft.task import TaskRows
    from cl_graft.training.models import build_classifier

    with claimed("example_avalanche", click.get_current_context().params) as run_dir:
        log_dir = run_dir.path / "logs"
        log_dir.mkdir(exist_ok=True)
        try:
            torch.manual_seed(0)
            clf = build_classifier(model, max_length=64)
            tasks = []
            for i, name in enumerate(stream.split(",")):
                data = load_task(name, data_dir)
                clf.add_task(data.spec, seed=i)
                train, dev = kshot(data.train, k, seed=0, num_labels=data.spec.num_labels, dev_k=8)
                tasks.append(TaskRows(data.spec, train, dev, cap(data.test, 200, seed=0)))
            benchmark = make_benchmark(tasks, clf)                       # train_stream / test_stream, task labels
            model = TaskAdapter(clf, [t.spec.name for t in tasks])       # x (B, 2, L) + task labels -> logits
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
            finder = LocalizeFinder("graft", LocalizeConfig(region_size=region_size, steps=4, n_batches=2,
                                                            select_rows=32))
            with open(log_dir / "log.txt", "w") as log:
                evaluator = EvaluationPlugin(
                    accuracy_metrics(experience=True, stream=True), forgetting_metrics(experience=True, stream=True),
                    bwt_metrics(experience=True, stream=True),
                    loggers=[InteractiveLogger(), TextLogger(log), CSVLogger(str(log_dir))])
                strategy = GraftStrategy(model=model, optimizer=optimizer, train_mb_size=16, train_epochs=epochs,
                                         eval_mb_size=64, evaluator=evaluator, finder=finder,
                                         valid_stream=getattr(benchmark, "valid_stream", None))
                for experience in benchmark.train_stream:                # Avalanche's own loop
                    print(f"--- experience {experience.current_experience}: {model.task_names[experience.task_label]}")
                    strategy.train(experience)
                    metrics = strategy.eval(benchmark.test_stream)

            owners = strategy.graft.owners
            for task, patch in zip(owners.tasks, owners.patches, strict=True):
                share = 100 * patch.region.density()
                print(f"{task}: region of {patch.region.size} parameters ({share:.2f}% of the layers)")
            print(f"stored skills: {owners.bytes()['total']} bytes; logs in {log_dir}")
        finally:
            adopt(run_dir, log_dir)                              # Avalanche's loggers wrote them
    return metrics


if __name__ == "__main__":
    main()
