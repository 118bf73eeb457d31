"""Task-agnostic inference on a finished ``cl-graft run``: which routing rule identifies the task best?

Loads a run's saved skills (``<run>/graft/state/skills``), computes every test input's logits under every learned
task's grafted model once (T forward passes per input, the models switched in place by
:class:`~cl_graft.strategies.routing.states.TaskRouter`), then scores routing rules offline: lowest entropy
(``cl-graft run --task-inference entropy``), highest top probability (``max-softmax``), lowest entropy
divided by log C_k (tasks with more labels have a higher entropy ceiling) and, when the skills hold feature
statistics (:mod:`~cl_graft.strategies.routing.features`: saved by runs with ``--task-inference features`` or in
the class scenario, and by every run between their addition and issue 44), the head-input
features at θ_pre (one more pass per input) scored by the linear discriminant of ``--task-inference features``
and, a variant without the covariance, by the nearest task mean (Euclidean). Prints and writes JSON with, per
rule, task-identification accuracy, task-agnostic accuracy strict (right task and right label:
``task_agnostic``) and as Avalanche counts it (the routed logits' argmax equals the label: ``avalanche``) per
task, beside the task-aware accuracy.

Run: ``python -m cl_graft.benchmarks.experiments.probes.task_inference_rules --run runs/cl --out DIR`` (writes
``DIR/rules.json`` and the run record ``DIR/config.json``; ``--out`` is claimed as a command's folder,
:mod:`.script_out`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import click
import torch
from cl_graft.strategies.adapter import MASK_VALUE

from cl_graft.files import write_json

from ..script_out import claimed, out_options

RULES = ("entropy", "max-softmax", "entropy/log C")
FEATURE_RULES = ("features", "features: nearest mean")


def _feature_scores(f: torch.Tensor, stats: list, rule: str) -> torch.Tensor:
    """Scores ``(T, N)`` (higher = more likely that task) of head-input features at θ_pre ``(N, d)``."""
    from cl_graft.strategies.routing.features import FeatureRouter

    if rule == "features":
        return FeatureRouter(stats).scores(f)
    return torch.stack([-((f.float() - s.mean) ** 2).mean(1) for s in stats])


def _score(logits: torch.Tensor, rule: str) -> torch.Tensor:
    """Confidence (higher = more confident) of each row of one task's logits (B, C_k)."""
    p = torch.softmax(logits.float(), -1)
    neg_h = torch.special.xlogy(p, p).sum(-1)
    if rule == "entropy":
        return neg_h
    if rule == "max-softmax":
        return p.max(-1).values
    n_labels = int((logits[0] > MASK_VALUE / 2).sum())                 # the task's own columns (others masked)
    return neg_h / math.log(n_labels)


def load_text_run(run: Path, data_dir: str | None):
    """A finished text ``cl-graft run``'s graft, rebuilt: ``(tasks, benchmark, adapter, owners)`` — the run's
    classifier at its seed with every task's head, its saved skills applied
    (:func:`~cl_graft.strategies.graft.saved_checks.load_skills`, cross-checked),
    wrapped in a :class:`~cl_graft.strategies.adapter.TaskAdapter` in eval mode."""
    from cl_graft.benchmarks import load_rows
    from cl_graft.benchmarks.streams import make_benchmark
    from cl_graft.strategies.adapter import TaskAdapter
    from cl_graft.strategies.graft.saved_checks import load_skills
    from cl_graft.strategies.interface.config import continual_setup

    from cl_graft.files import read_json
    from cl_graft.training.models import build_classifier

    rec = read_json(run / "config.json")
    tasks, seed = rec["stream"], rec["seed"]
    data, _ = continual_setup(rec["preset"], seed=seed, k=rec["k"])
    splits = [load_rows(t, data_dir, data, seed=seed) for t in tasks]
    torch.manual_seed(seed)
    clf = build_classifier(rec["model"], head=rec["head"], max_length=data.max_length)
    for i, s in enumerate(splits):
        clf.add_task(s.spec, seed=seed + i)
    bm = make_benchmark(splits, clf)
    owners = load_skills(run / "graft" / "state" / "skills", clf)
    owners.apply_(clf)
    return tasks, bm, TaskAdapter(clf, tasks).eval(), owners


@torch.no_grad()
def task_logits(run: Path, data_dir: str | None) -> tuple[list[str], list[list[torch.Tensor]], list[torch.Tensor],
                                                          list[torch.Tensor] | None, list | None]:
    """Per test task j: logits under every task k's model, (N_j, C_k) each, the labels (N_j,), and (None when the
    skills have no feature statistics) the head-input features at θ_pre (N_j, d) and every task's statistics."""
    from cl_graft.strategies.routing.states import TaskRouter
    from cl_graft.strategies.graft.targets import graft_target

    tasks, bm, adapter, owners = load_text_run(run, data_dir)
    router = TaskRouter(graft_target(adapter), owners)
    stats = [owners.features.get(t) for t in tasks]
    with_features = all(s is not None for s in stats)
    out, labels, feats = [], [], []
    for exp in bm.test_stream:
        ds = exp.dataset
        batches = [ds.collate_fn([ds[i] for i in range(s, min(s + 64, len(ds)))]) for s in range(0, len(ds), 64)]
        per_task = []
        for k in range(len(tasks)):
            router.switch_(k)
            per_task.append(torch.cat([adapter(b[0], k) for b in batches]))
        out.append(per_task)
        if with_features:
            feats.append(torch.cat([router.features(b[0]) for b in batches]))
        labels.append(torch.cat([b[1] for b in batches]))
    router.close_()
    return tasks, out, labels, (feats if with_features else None), (stats if with_features else None)


def evaluate_rules(tasks: list[str], logits: list[list[torch.Tensor]], labels: list[torch.Tensor],
                   features: list[torch.Tensor] | None = None, stats: list | None = None) -> dict:
    """Task-aware accuracy and, per rule, task identification and task-agnostic accuracy (strict and as
    Avalanche counts it) per task; the feature rules only with ``features`` and ``stats``."""
    res = {"tasks": tasks, "task_aware": [float((logits[j][j].argmax(-1) == labels[j]).float().mean())
                                          for j in range(len(tasks))]}
    rules = RULES + (FEATURE_RULES if features is not None else ())
    for rule in rules:
        ids, agnostic, avalanche = [], [], []
        for j, per_task in enumerate(logits):
            if rule in FEATURE_RULES:
                pick = _feature_scores(features[j], stats, rule).argmax(0)               # (N_j,)
            else:
                pick = torch.stack([_score(t, rule) for t in per_task]).argmax(0)
            preds = torch.stack([t.argmax(-1) for t in per_task])                        # (T, N_j)
            pred = preds[pick, torch.arange(len(pick))]
            ids.append(float((pick == j).float().mean()))
            agnostic.append(float(((pick == j) & (pred == labels[j])).float().mean()))
            avalanche.append(float((pred == labels[j]).float().mean()))
        res[rule] = {"task_id": ids, "task_agnostic": agnostic, "avalanche": avalanche}
    return res


@click.command(help=__doc__.splitlines()[0])
@click.option("--run", required=True, help="A cl-graft run folder with graft/state/skills.")
@click.option("--data-dir", default=None)
@out_options()
def main(run, data_dir, out, overwrite) -> None:
    with claimed("probes.task_inference_rules", click.get_current_context().params) as run_dir:
        res = evaluate_rules(*task_logits(Path(run), data_dir))
        write_json(run_dir.path / "rules.json", res)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
