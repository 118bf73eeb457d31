"""Task-agnostic inference on a finished ``cl-graft run``: which routing rule identifies the task best?

Loads a run's saved skills (``<run>/graft/state/skills``), computes every test input's logits under every learned
task's grafted model once (T forward passes per input, the models switched in place by
:class:`~cl_graft.strategies.routing.TaskRouter`), then scores routing rules offline: lowest entropy
(``cl-graft run --task-inference entropy``), highest top probability (``max-softmax``) and lowest entropy
divided by log C_k (tasks with more labels have a higher entropy ceiling). Prints and writes JSON with, per rule,
task-identification accuracy and task-agnostic accuracy per task, beside the task-aware accuracy.

Run: ``python -m cl_graft.benchmarks.experiments.task_inference_rules --run runs/cl --out results.json``.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from cl_graft.strategies.adapter import MASK_VALUE

RULES = ("entropy", "max-softmax", "entropy/log C")


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


@torch.no_grad()
def task_logits(run: Path, data_dir: str | None) -> tuple[list[str], list[list[torch.Tensor]], list[torch.Tensor]]:
    """Per test task j: logits under every task k's model, (N_j, C_k) each, and the labels (N_j,)."""
    from cl_graft.benchmarks import load_rows
    from cl_graft.benchmarks.streams import make_benchmark
    from cl_graft.strategies.adapter import TaskAdapter
    from cl_graft.strategies.continual_config import continual_setup
    from cl_graft.strategies.owner_map import OwnerMap
    from cl_graft.strategies.routing import TaskRouter
    from cl_graft.strategies.targets import graft_target

    from cl_graft.artifacts import read_json
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
    owners = OwnerMap.load(run / "graft" / "state" / "skills", clf)
    owners.apply_(clf)
    adapter = TaskAdapter(clf, tasks).eval()
    router = TaskRouter(graft_target(adapter), owners)
    out, labels = [], []
    for exp in bm.test_stream:
        ds = exp.dataset
        batches = [ds.collate_fn([ds[i] for i in range(s, min(s + 64, len(ds)))]) for s in range(0, len(ds), 64)]
        per_task = []
        for k in range(len(tasks)):
            router.switch_(k)
            per_task.append(torch.cat([adapter(b[0], k) for b in batches]))
        out.append(per_task)
        labels.append(torch.cat([b[1] for b in batches]))
    router.close_()
    return tasks, out, labels


def evaluate_rules(tasks: list[str], logits: list[list[torch.Tensor]], labels: list[torch.Tensor]) -> dict:
    """Task-aware accuracy and, per rule, task identification and task-agnostic accuracy per task."""
    res = {"tasks": tasks, "task_aware": [float((logits[j][j].argmax(-1) == labels[j]).float().mean())
                                          for j in range(len(tasks))]}
    for rule in RULES:
        ids, agnostic = [], []
        for j, per_task in enumerate(logits):
            pick = torch.stack([_score(t, rule) for t in per_task]).argmax(0)          # (N_j,)
            preds = torch.stack([t.argmax(-1) for t in per_task])                        # (T, N_j)
            pred = preds[pick, torch.arange(len(pick))]
            ids.append(float((pick == j).float().mean()))
            agnostic.append(float(((pick == j) & (pred == labels[j])).float().mean()))
        res[rule] = {"task_id": ids, "task_agnostic": agnostic}
    return res


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="A cl-graft run folder with graft/state/skills.")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default=None, help="JSON file to write.")
    args = parser.parse_args(argv)
    res = evaluate_rules(*task_logits(Path(args.run), args.data_dir))
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
