"""Which task a row of a split text stream belongs to, from θ_pre's features alone: task-level Gaussians (graft's
routing before class means) against class-level rules, on training rows only.

For ``split-TASK:N`` (the class order and groups of ``cl-graft run --seed S``), the features are the input of the
head (the pooled sentence embedding) of the pre-trained model. Per class, ``--fit-rows`` training rows fit the
statistics and the next ``--score-rows`` are scored (no dev or test row is read). Rules: the linear discriminant
over tasks (:class:`~cl_graft.strategies.routing.features.FeatureRouter` on statistics fitted without labels,
forms ``lowrank:32`` and ``full``), the same router over classes (statistics with class means, ``lowrank:32``:
what graft keeps now), and the nearest class mean by cosine (the ``ncm`` baseline's rule). Writes
``class_routing.json``: each rule's task identification and, for class rules, class accuracy.

    python -m cl_graft.benchmarks.experiments.probes.class_routing --data-dir ../shared/data --task clinc150 --groups 15 \\
        --out runs/routing
"""
from __future__ import annotations

import random

import click
import torch

from cl_graft.benchmarks.data import load_task
from cl_graft.benchmarks.families.split_text import class_order, groups
from cl_graft.files import write_json
from cl_graft.strategies.routing.features import FeatureAccumulator, FeatureRouter
from cl_graft.strategies.head_inputs import HeadInputs
from cl_graft.training.models import build_classifier

from ..script_out import claimed, out_options, settings_of


@torch.no_grad()
def features(clf, rows: list[dict], task: str, batch: int = 128) -> torch.Tensor:
    """The head's input for ``rows`` at θ_pre, ``(n, d)``."""
    out = []
    with HeadInputs(clf.heads[task]) as rec:
        for s in range(0, len(rows), batch):
            enc = clf.encode(rows[s:s + batch], task)
            clf(enc["input_ids"], enc["attention_mask"], task=task)
            out.append(rec.take(len(rows[s:s + batch])))
    return torch.cat(out)


def identification(fit: torch.Tensor, y_fit: torch.Tensor, score: torch.Tensor, y_score: torch.Tensor,
                   parts: list[list[int]]) -> dict:
    """Each rule's share of scored rows sent to their task (and, for class rules, to their class)."""
    task_of = torch.zeros(int(max(max(p) for p in parts)) + 1, dtype=torch.long)
    for k, p in enumerate(parts):
        task_of[p] = k
    truth = task_of[y_score]
    out = {}
    for form in ("lowrank:32", "full"):
        stats = []
        for p in parts:
            acc = FeatureAccumulator()
            acc.update(fit[torch.isin(y_fit, torch.tensor(p))])
            stats.append(acc.finish(form))
        out[f"task LDA {form}"] = {"task": float((FeatureRouter(stats).scores(score).argmax(0) == truth).float().mean())}
    stats = []
    for p in parts:
        acc = FeatureAccumulator()
        keep = torch.isin(y_fit, torch.tensor(p))
        acc.update(fit[keep], y_fit[keep])
        stats.append(acc.finish("lowrank:32"))
    out["class LDA lowrank:32"] = {"task": float((FeatureRouter(stats).scores(score).argmax(0) == truth).float().mean())}
    labels = torch.unique(y_fit)
    means = torch.stack([fit[y_fit == c].mean(0) for c in labels])
    nearest = labels[(torch.nn.functional.normalize(score, dim=1)
                      @ torch.nn.functional.normalize(means, dim=1).T).argmax(1)]
    out["nearest class mean"] = {"task": float((task_of[nearest] == truth).float().mean()),
                                 "class": float((nearest == y_score).float().mean())}
    return out


@click.command()
@click.option("--data-dir", default=None)
@click.option("--task", default="clinc150", show_default=True)
@click.option("--groups", "n_groups", type=int, default=15, show_default=True)
@click.option("--model", default="minilm", show_default=True)
@click.option("--fit-rows", type=int, default=60, show_default=True, help="training rows per class that fit")
@click.option("--score-rows", type=int, default=20, show_default=True, help="other training rows per class scored")
@click.option("--seed", type=int, default=0, show_default=True, help="the class order's seed (as cl-graft run's)")
@out_options()
def main(data_dir, task, n_groups, model, fit_rows, score_rows, seed, out, overwrite) -> None:
    params = click.get_current_context().params
    with claimed("probes.class_routing", params) as run_dir:
        data = load_task(task, data_dir)
        clf = build_classifier(model, max_length=64)
        clf.add_task(data.spec)
        clf.eval()
        rng, by_class = random.Random(seed), {}
        for r in data.train:
            by_class.setdefault(r["label"], []).append(r)
        fit, scored = [], []
        for c in sorted(by_class):
            rng.shuffle(by_class[c])
            fit += by_class[c][:fit_rows]
            scored += by_class[c][fit_rows:fit_rows + score_rows]
        parts = groups(class_order(None, data.spec.num_labels, seed), n_groups)
        result = identification(features(clf, fit, task), torch.tensor([r["label"] for r in fit]),
                                features(clf, scored, task), torch.tensor([r["label"] for r in scored]), parts)
        write_json(run_dir.path / "class_routing.json", {"settings": settings_of(params), "groups": parts,
                                                         "fit_rows": len(fit), "scored_rows": len(scored),
                                                         "rules": result})
        for rule, shares in result.items():
            click.echo(f"{rule:<22}" + "  ".join(f"{k} {100 * v:.1f}%" for k, v in shares.items()))


if __name__ == "__main__":
    main()
