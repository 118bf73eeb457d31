"""Who answers a row best once it reaches its own experience (issue 54, item 3: the grafted models must answer
better than the head within an experience to be worth asking)?

A saved ``cl-graft run --scenario class`` run with graft's state is rebuilt (:func:`.class_answers.rebuild`).
Every dev and test row is given its own experience (no routing) and answered, from that experience's classes only:

- ``grafted model``: the experience's grafted model's own classifier (graft's routed answer when routing is right);
- ``θ_pre head``: RanPAC's head over θ_pre's features fitted on every training row of the stream (graft's router
  head, :mod:`cl_graft.strategies.routing.class_heads`);
- ``head on the grafted model's features``: a RanPAC head per experience, fitted on that experience's training rows
  with the features of its grafted model (a closed-form head over each grafted model's own features).

Each head's ridge (one of the router's candidates) is chosen on dev rows; test rows are scored after.

    python -m cl_graft.benchmarks.experiments.probes.within_experience --run RUN --data-dir ../shared/data \\
        --out runs/within_experience
"""
from __future__ import annotations

from pathlib import Path

import click
import torch

from cl_graft.files import write_json
from cl_graft.heads import RandomProjectionRidge
from cl_graft.strategies.routing.class_heads import PROJECTION_SEED, RIDGES, WIDTH

from ..script_out import claimed, settings_of
from .class_answers import rebuild, run_options, state_passes

RULES = ("grafted model", "θ_pre head", "head on the grafted model's features")


def passes(clf, owners, head: str, rows: list[dict], state: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-length head inputs ``(n, d)`` and logits ``(n, C)`` of ``rows`` with the model in ``state``."""
    feats, logits = state_passes(clf, owners, head, rows, state)
    return torch.nn.functional.normalize(feats.float(), dim=-1), logits


def ranpac(feats: torch.Tensor, labels: torch.Tensor) -> RandomProjectionRidge:
    """RanPAC's sums (the router's width and projection seed) over ``feats`` with columns ``labels``."""
    head = RandomProjectionRidge(dim=feats.shape[1], width=WIDTH, ridge=RIDGES[0], seed=PROJECTION_SEED)
    head.add_(feats, labels)
    return head


def in_classes(scores: torch.Tensor, classes: list[int]) -> torch.Tensor:
    """The best of ``classes`` per row of ``scores`` ``(n, C)``."""
    keep = torch.tensor(classes)
    return keep[scores[:, keep].argmax(1)]


@click.command()
@run_options
def main(run_dir, data_dir, out, overwrite) -> None:
    params = click.get_current_context().params
    with claimed("within_experience", params) as out_dir:
        clf, owners, splits, head = rebuild(Path(run_dir), data_dir)
        pre = {w: passes(clf, owners, head, [r for s in splits for r in getattr(s, w)], -1)[0]
               for w in ("train", "dev", "test")}
        labels = {w: torch.tensor([r["label"] for s in splits for r in getattr(s, w)]) for w in pre}
        shared = ranpac(pre["train"], labels["train"])
        right = {w: {rule: {r: 0 for r in RIDGES} for rule in RULES} for w in ("dev", "test")}
        start = {w: 0 for w in pre}
        for k, split in enumerate(splits):
            classes = sorted({r["label"] for r in split.train})
            train_feats, _ = passes(clf, owners, head, split.train, k)
            own = ranpac(train_feats, torch.tensor([classes.index(r["label"]) for r in split.train]))   # local
            for w in ("dev", "test"):
                rows = getattr(split, w)
                y = labels[w][start[w]:start[w] + len(rows)]
                feats, logits = passes(clf, owners, head, rows, k)
                for r in RIDGES:
                    picks = {"grafted model": in_classes(logits, classes),
                             "θ_pre head": in_classes(shared.scores(pre[w][start[w]:start[w] + len(rows)], ridge=r),
                                                      classes),
                             "head on the grafted model's features":
                                 torch.tensor(classes)[own.scores(feats, ridge=r).argmax(1)]}
                    for rule, pick in picks.items():
                        right[w][rule][r] += int((pick == y).sum())
                start[w] += len(rows)
        result = {}
        for rule in RULES:
            ridge = max(RIDGES, key=lambda r: (right["dev"][rule][r], -RIDGES.index(r)))
            result[rule] = {"ridge": None if rule == "grafted model" else ridge,
                            "dev": right["dev"][rule][ridge] / start["dev"],
                            "test": right["test"][rule][ridge] / start["test"]}
            click.echo(f"{rule:<40} dev {100 * result[rule]['dev']:.2f}%  test {100 * result[rule]['test']:.2f}%")
        write_json(out_dir.path / "within_experience.json",
                   {"settings": settings_of(params), "rules": result, "rows": {w: start[w] for w in ("dev", "test")}})


if __name__ == "__main__":
    main()
