"""RanPAC's first-session adaptation as graft's router encoder (issue 54, item 3's lever): does the grafted model
of the first experience give a class-incremental router better features than θ_pre?

A saved ``cl-graft run --scenario class`` run with graft's state is rebuilt (:func:`.class_answers.rebuild`). For
each encoder, θ_pre and the first task's grafted model (θ_pre with task 0's region, what RanPAC's first session
would adapt), every training row's unit-length head input goes into RanPAC's sums
(:class:`cl_graft.heads.RandomProjectionRidge`, graft's router width and projection seed,
:mod:`cl_graft.strategies.routing.class_heads`); each ridge of the router's candidates answers the dev and test
rows over every class of the stream. Per encoder: the ridge that sends the most dev rows to their experience (the
router's rule), then on dev and test rows the share sent to their experience ("routed") and the share whose class
is right ("head"), over every experience and over experiences 2 onwards (the first experience's rows trained the
adapted encoder). Test rows are scored only after the ridge is chosen.

    python -m cl_graft.benchmarks.experiments.probes.first_session --run RUN --data-dir ../shared/data \\
        --out runs/first_session
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

ENCODERS = {"θ_pre": -1, "first task's grafted model": 0}
"""Encoder name → the owner map's state (``rollback_patch(k)``: -1 θ_pre, 0 task 0's grafted model)."""


def features(clf, owners, head: str, rows: list[dict], state: int) -> torch.Tensor:
    """Unit-length head inputs ``(n, d)`` of ``rows`` with the model in ``state``."""
    return torch.nn.functional.normalize(state_passes(clf, owners, head, rows, state)[0].float(), dim=-1)


def shares(scores: torch.Tensor, labels: torch.Tensor, experience_of: torch.Tensor, tasks: torch.Tensor) -> dict:
    """Rows sent to their experience and rows whose class is right, over all rows and from experience 2 on."""
    pick = scores.argmax(1)
    routed, right, later = experience_of[pick] == tasks, pick == labels, tasks > 0
    return {"routed": float(routed.float().mean()), "head": float(right.float().mean()),
            "routed_later": float(routed[later].float().mean()), "head_later": float(right[later].float().mean()),
            "rows": len(labels)}


@click.command()
@run_options
def main(run_dir, data_dir, out, overwrite) -> None:
    params = click.get_current_context().params
    with claimed("first_session", params) as out_dir:
        clf, owners, splits, head = rebuild(Path(run_dir), data_dir)
        experience_of = torch.zeros(max(r["label"] for s in splits for r in s.train) + 1, dtype=torch.long)
        for k, s in enumerate(splits):
            experience_of[torch.tensor(sorted({r["label"] for r in s.train}))] = k
        rows = {w: [r for s in splits for r in getattr(s, w)] for w in ("train", "dev", "test")}
        tasks = {w: torch.tensor([k for k, s in enumerate(splits) for _ in getattr(s, w)]) for w in ("dev", "test")}
        labels = {w: torch.tensor([r["label"] for r in rows[w]]) for w in rows}
        result = {}
        for name, state in ENCODERS.items():
            feats = {w: features(clf, owners, head, rows[w], state) for w in rows}
            ranpac = RandomProjectionRidge(dim=feats["train"].shape[1], width=WIDTH, ridge=RIDGES[0],
                                           seed=PROJECTION_SEED)
            ranpac.add_(feats["train"], labels["train"])
            dev = {r: shares(ranpac.scores(feats["dev"], ridge=r), labels["dev"], experience_of, tasks["dev"])
                   for r in RIDGES}
            ridge = max(RIDGES, key=lambda r: (dev[r]["routed"], -RIDGES.index(r)))
            test = shares(ranpac.scores(feats["test"], ridge=ridge), labels["test"], experience_of, tasks["test"])
            result[name] = {"dev": {str(r): v for r, v in dev.items()}, "ridge": ridge, "test": test}
            click.echo(f"{name:<28} ridge {ridge:g}  dev routed {100 * dev[ridge]['routed']:.2f}%  test routed "
                       f"{100 * test['routed']:.2f}% (from exp 2: {100 * test['routed_later']:.2f}%)  test head "
                       f"{100 * test['head']:.2f}% (from exp 2: {100 * test['head_later']:.2f}%)")
        write_json(out_dir.path / "first_session.json", {"settings": settings_of(params), "encoders": result,
                                                          "train_rows": len(rows["train"])})


if __name__ == "__main__":
    main()
