"""Task identification against the bytes of the router's feature statistics, per form (:data:`~cl_graft.
strategies.routing.features.FORMS`), in the class-incremental setting (no task label at test).

Feature statistics are fitted **at θ_pre**, which never changes during a stream, so what they identify does not
depend on training: each task's statistics are the mean and covariance of the input of the model's output layer
(the head module of a multi-head model, the shared output layer of a single-head one) over the task's training
rows at θ_pre, exactly what :class:`~cl_graft.strategies.graft.plugin.GraftPlugin` fits when an experience ends;
every test row is routed by :class:`~cl_graft.strategies.routing.features.FeatureRouter` over every task of
the stream, and a row is identified when its own task scores highest.

- digits streams (``split-digits``, ``permuted-digits:N``) with the single-head ``mlp`` (θ_pre: its random
  initialisation, built by the seed as ``cl-graft run`` builds it), plus the raw 64 pixels as a reference
  feature space (``--input-space``);
- the text stream from a finished ``cl-graft run`` (``--run``: its saved skills hold each task's full
  statistics; test rows' features computed once at θ_pre).

Every form is reduced from the same full statistics
(:meth:`~cl_graft.strategies.routing.features.FeatureStats.reduce`), so rows differ only by what is kept;
``pooled once`` is the pooled covariance stored once plus a mean per task (the router's decisions of ``full`` by
construction, ``T·d + d²`` floats), ``pooled once, lowrank:R`` that pooled covariance in ``lowrank:R``
(``T·d + (R + 1)·d`` floats; not a form the router's storage offers, measured to see what it would buy).
Prints a markdown table and writes JSON.

Run: ``python -m cl_graft.benchmarks.experiments.probes.feature_forms --stream split-digits --seeds 0,1,2 --out DIR``
(writes ``DIR/feature_forms.json`` and the run record ``DIR/config.json``; ``--out`` is claimed as a command's
folder, :mod:`.script_out`); ``--digits-run RUN`` instead scores the routing rules of a finished digits run
(graft's saved skills) into ``DIR/rules.json``.
"""
from __future__ import annotations

import json
from pathlib import Path

import click
import torch

from cl_graft.files import write_json

from ..script_out import claimed, out_options

FORMS = ("full", "lowrank:64", "lowrank:32", "lowrank:16", "lowrank:8", "lowrank:4", "lowrank:2", "lowrank:1",
         "diagonal", "mean")
POOLED_FORMS = ("lowrank:32", "lowrank:16", "lowrank:8")
"""The pooled covariance stored once in these forms, with a mean per task (rows ``pooled once, lowrank:R``)."""


def identification(stats: list, test: list[torch.Tensor], form: str) -> float:
    """Share of test rows (per task j: ``(N_j, d)`` features) whose own task j scores highest, ``form`` kept."""
    from cl_graft.strategies.routing.features import FeatureRouter

    router = FeatureRouter([s.reduce(form) for s in stats])
    hits = sum(int((router.scores(f).argmax(0) == j).sum()) for j, f in enumerate(test))
    return hits / sum(len(f) for f in test)


def score_forms(stats: list, test: list[torch.Tensor]) -> dict[str, dict[str, float]]:
    """Per form: identification (%) and bytes kept over the stream (the ``pooled once`` rows included)."""
    from cl_graft.strategies.routing.features import FeatureStats

    out = {}
    for form in FORMS:
        out[form] = {"task_id": 100 * identification(stats, test, form),
                     "bytes": sum(s.reduce(form).nbytes() for s in stats)}
    d = stats[0].mean.numel()
    out["pooled once"] = {"task_id": out["full"]["task_id"], "bytes": 4 * (len(stats) * d + d * d)}
    count = sum(s.count for s in stats)
    pooled = FeatureStats(torch.zeros(d), sum(s.cov.double() * s.count for s in stats).float() / count, count)
    for form in POOLED_FORMS:
        shared = pooled.reduce(form)
        per_task = [FeatureStats(s.mean, None, s.count, basis=shared.basis, var=shared.var) for s in stats]
        out[f"pooled once, {form}"] = {"task_id": 100 * identification(per_task, test, "lowrank:" + form[8:]),
                                       "bytes": 4 * (len(stats) * d + shared.basis.numel() + shared.var.numel())}
    return out


@torch.no_grad()
def digits_features(name: str, seed: int, input_space: bool) -> tuple[list, list[torch.Tensor]]:
    """Full statistics per task (training rows) and test features per task, at the ``mlp``'s θ_pre."""
    from cl_graft.benchmarks.digits import DigitsStream, digits_model
    from cl_graft.strategies.routing.features import FeatureAccumulator, output_layer
    from cl_graft.strategies.head_inputs import HeadInputs

    stream = DigitsStream.make(name, "mlp", seed=seed, scenario="class")
    model = digits_model("mlp", seed).eval()

    def rows(exp) -> torch.Tensor:
        return torch.stack([exp.dataset[i][0] for i in range(len(exp.dataset))])

    first = rows(stream.benchmark.train_stream[0])
    layer = output_layer(model, lambda: model(first[:2]))

    def features(x: torch.Tensor) -> torch.Tensor:
        if input_space:
            return x
        with HeadInputs(layer) as rec:
            model(x)
        return rec.take(len(x))

    stats = []
    for exp in stream.benchmark.train_stream:
        acc = FeatureAccumulator()
        acc.update(features(rows(exp)))
        stats.append(acc.finish("full"))
    return stats, [features(rows(exp)) for exp in stream.benchmark.test_stream]


@torch.no_grad()
def text_features(run: Path, data_dir: str | None) -> tuple[list, list[torch.Tensor]]:
    """The saved full statistics of a text run's tasks and its test rows' features at θ_pre."""
    from cl_graft.strategies.routing.states import TaskRouter
    from cl_graft.strategies.graft.targets import graft_target

    from .task_inference_rules import load_text_run

    tasks, bm, adapter, owners = load_text_run(run, data_dir)
    router = TaskRouter(graft_target(adapter), owners)
    test = []
    for exp in bm.test_stream:
        ds = exp.dataset
        batches = [ds.collate_fn([ds[i] for i in range(s, min(s + 64, len(ds)))]) for s in range(0, len(ds), 64)]
        test.append(torch.cat([router.features(b[0]) for b in batches]))
    router.close_()
    return [owners.features[t] for t in tasks], test


@torch.no_grad()
def digits_run_rules(run: Path) -> dict[str, dict[str, float]]:
    """A finished digits ``cl-graft run``'s graft (its saved skills, on the run's model at θ_pre, rebuilt from its
    seed) served without task labels: per routing rule (``features`` with the statistics as saved, ``entropy``,
    ``max-softmax``), task identification and class-incremental accuracy (%, over every test row)."""
    from cl_graft.benchmarks.digits import DigitsStream, digits_model
    from cl_graft.strategies.routing.states import TASK_INFERENCE, TaskRouter
    from cl_graft.strategies.graft.saved_checks import load_skills
    from cl_graft.strategies.graft.targets import graft_target

    from cl_graft.files import read_json

    rec = read_json(run / "config.json")
    stream = DigitsStream.make(rec["stream"], rec["model"], seed=rec["seed"], scenario=rec["scenario"])
    model = digits_model(rec["model"], rec["seed"]).eval()
    owners = load_skills(run / "graft" / "state" / "skills", model)
    owners.apply_(model)
    router = TaskRouter(graft_target(model), owners)
    hits = {rule: [0, 0] for rule in TASK_INFERENCE}
    rows = 0
    for j, exp in enumerate(stream.benchmark.test_stream):
        x, y = (torch.stack([exp.dataset[i][k] if k == 0 else torch.as_tensor(exp.dataset[i][k])
                             for i in range(len(exp.dataset))]) for k in (0, 1))
        rows += len(y)
        for rule in TASK_INFERENCE:
            logits, chosen = router.infer(x, rule)
            hits[rule][0] += int((chosen == j).sum())
            hits[rule][1] += int((logits.argmax(-1) == y).sum())
    router.close_()
    form = owners.features[owners.tasks[0]].form
    return {(f"features ({form})" if rule == "features" else rule): {"task_id": 100 * a / rows, "accuracy": 100 * b / rows}
            for rule, (a, b) in hits.items()}


def table(results: dict[str, dict]) -> str:
    """Markdown: one row per form, identification mean over seeds (min–max) and kB kept, per setting."""
    settings = list(results)
    head = "| form | " + " | ".join(f"{s}: id % | kB" for s in settings) + " |"
    lines = [head, "|---|" + "---|---|" * len(settings)]
    for form in (*FORMS, "pooled once", *(f"pooled once, {f}" for f in POOLED_FORMS)):
        cells = []
        for s in settings:
            per_seed = [r[form] for r in results[s].values()]
            ids = [r["task_id"] for r in per_seed]
            cells.append(f"{sum(ids) / len(ids):.1f} ({min(ids):.1f}–{max(ids):.1f}) | "
                         f"{per_seed[0]['bytes'] / 1000:.1f}")
        lines.append(f"| {form} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@click.command(help=__doc__.splitlines()[0])
@click.option("--stream", "streams", multiple=True, help="A digits stream (repeat for several).")
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--input-space", is_flag=True, help="Digits: the raw pixels as features instead (a reference).")
@click.option("--run", "runs", multiple=True, help="A finished text cl-graft run folder (repeat per seed).")
@click.option("--digits-run", "digits_runs", multiple=True,
              help="A finished digits cl-graft run folder with graft: score its routing rules (repeat per seed).")
@click.option("--data-dir", default=None)
@out_options()
def main(streams, seeds, input_space, runs, digits_runs, data_dir, out, overwrite) -> None:
    with claimed("probes.feature_forms", click.get_current_context().params) as run_dir:
        if digits_runs:
            rules = {Path(r).name: digits_run_rules(Path(r)) for r in digits_runs}
            write_json(run_dir.path / "rules.json", rules)
            print(json.dumps(rules, indent=1))
            return
        results: dict[str, dict] = {}
        for name in streams:
            key = name + (" (pixels)" if input_space else "")
            results[key] = {s: score_forms(*digits_features(name, int(s), input_space)) for s in seeds.split(",")}
        if runs:
            results["text"] = {Path(r).name: score_forms(*text_features(Path(r), data_dir)) for r in runs}
        write_json(run_dir.path / "feature_forms.json", results)
    print(table(results))


if __name__ == "__main__":
    main()
