"""Does combining the head's experience posterior with the grafted models' class posteriors answer better than
either alone (issue 54, item 3: "the routed grafted model, the head alone, or a combination")?

A saved ``cl-graft run --scenario class`` run with graft's state is rebuilt (:func:`.class_answers.rebuild`). RanPAC's
head over θ_pre's unit-length features (graft's router head: its width and projection seed,
:mod:`cl_graft.strategies.routing.class_heads`) is fitted on every training row of the stream; each row after the
last experience gets, from the head's scores ``S`` (one column per class seen):

- ``head``: the best column (one forward pass per row, at θ_pre);
- ``routed``: the experience of the best column, whose grafted model answers (graft's routed answer: 2 passes);
- ``combined``: an experience posterior ``p(t | x) = Σ_{c ∈ t} softmax(S / τ)_c``; over the ``k`` experiences of
  highest ``p``, the answer maximises ``log p(t | x) + log q_t(c | x)``, ``q_t`` the softmax of experience ``t``'s
  grafted model's logits over its own classes (1 + k passes).

The ridge (one of the router's :data:`~cl_graft.strategies.routing.class_heads.RIDGES`), ``τ`` and ``k`` are
chosen on dev rows per rule (ties: the first); test rows are scored after. Reported per rule: accuracy, rows whose
answer lies in their own experience, forward passes per row and milliseconds per row (passes × the measured time of
one pass over the test rows, batch 64, this machine's threads).

    python -m cl_graft.benchmarks.experiments.probes.combined_answer --run RUN --data-dir ../shared/data \\
        --out runs/combined_answer
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path

import click
import torch

from cl_graft.files import write_json
from cl_graft.strategies.routing.class_heads import RIDGES

from ..script_out import claimed, settings_of
from .class_answers import rebuild, run_options, state_passes
from .within_experience import ranpac

TEMPERATURES = (0.01, 0.03, 0.1, 0.3)
"""``τ`` tried for the experience posterior (the head's scores are ridge outputs near 0 and 1)."""
TOP = (2, 3)
"""``k``, the experiences whose grafted models are asked."""


def combined(scores: torch.Tensor, owner: torch.Tensor, logits: torch.Tensor, own: torch.Tensor, tau: float,
             k: int) -> torch.Tensor:
    """The combined rule's class per row.

    Args:
        scores: the head's scores ``(n, C)``, one column per class.
        owner: each class's experience ``(C,)``.
        logits: each experience's grafted logits ``(T, n, C)``.
        own: ``(T, C)``, True where the class belongs to the experience.
        tau: the posterior's temperature; k: the experiences asked.
    """
    p = torch.softmax(scores / tau, dim=1)                                            # (n, C)
    task_p = torch.zeros(len(scores), len(own)).index_add_(1, owner, p)               # (n, T)
    top = task_p.topk(min(k, len(own)), dim=1).indices                                # (n, k)
    rows = torch.arange(len(scores))[:, None]
    z = logits[top, rows].masked_fill(~own[top], -torch.inf)                          # (n, k, C)
    joint = torch.log(task_p.gather(1, top)).unsqueeze(-1) + torch.log_softmax(z, dim=-1)
    return joint.flatten(1).argmax(1) % scores.shape[1]


def rules(scores, owner, logits, own) -> dict[tuple, torch.Tensor]:
    """Every rule's classes per row: ``("head",)``, ``("routed",)`` and ``("combined", τ, k)``."""
    best = scores.argmax(1)
    out = {("head",): best, ("routed",): logits[owner[best], torch.arange(len(scores))].argmax(1)}
    for tau, k in itertools.product(TEMPERATURES, TOP):
        out[("combined", tau, k)] = combined(scores, owner, logits, own, tau, k)
    return out


@click.command()
@run_options
def main(run_dir, data_dir, out, overwrite) -> None:
    params = click.get_current_context().params
    with claimed("combined_answer", params) as out_dir:
        clf, owners, splits, head = rebuild(Path(run_dir), data_dir)
        rows = {w: [r for s in splits for r in getattr(s, w)] for w in ("train", "dev", "test")}
        labels = {w: torch.tensor([r["label"] for r in rows[w]]) for w in rows}
        classes = sorted({r["label"] for r in rows["train"]})
        owner = torch.tensor([next(t for t, s in enumerate(splits) if c in {r["label"] for r in s.train})
                              for c in classes])
        own = torch.zeros(len(splits), len(classes), dtype=torch.bool)
        own[owner, torch.arange(len(classes))] = True
        seconds, feats, logits = {}, {}, {}
        for w in rows:
            start = time.perf_counter()
            f, _ = state_passes(clf, owners, head, rows[w], -1)
            seconds[("pre", w)] = time.perf_counter() - start
            feats[w] = torch.nn.functional.normalize(f.float(), dim=-1)
        fitted = ranpac(feats["train"], torch.tensor([classes.index(int(y)) for y in labels["train"]]))
        for w in ("dev", "test"):
            start = time.perf_counter()
            per_task = [state_passes(clf, owners, head, rows[w], t)[1][:, classes] for t in range(len(splits))]
            seconds[("grafted", w)] = (time.perf_counter() - start) / len(splits)
            logits[w] = torch.stack(per_task)                                            # (T, n, C)
        right = {}
        for ridge in RIDGES:
            for w in ("dev", "test"):
                scores = fitted.scores(feats[w], ridge=ridge)
                y = torch.tensor([classes.index(int(c)) for c in labels[w]])
                home = owner[y]
                for rule, pick in rules(scores, owner, logits[w], own).items():
                    right[(rule, ridge, w)] = (int((pick == y).sum()), int((owner[pick] == home).sum()))
        ms = {what: 1000 * seconds[(what, "test")] / len(rows["test"]) for what in ("pre", "grafted")}
        result = {}
        for name in ("head", "routed", "combined"):
            keys = [(rule, ridge) for rule, ridge, w in right if rule[0] == name and w == "dev"]
            rule, ridge = max(keys, key=lambda key: (right[(*key, "dev")][0], -keys.index(key)))
            passes = 1 if name == "head" else 2 if name == "routed" else 1 + rule[2]
            result[name] = {
                "ridge": ridge, "tau": rule[1] if name == "combined" else None,
                "k": rule[2] if name == "combined" else None,
                **{f"{w}_accuracy": right[(rule, ridge, w)][0] / len(rows[w]) for w in ("dev", "test")},
                **{f"{w}_own_experience": right[(rule, ridge, w)][1] / len(rows[w]) for w in ("dev", "test")},
                "passes_per_row": passes, "ms_per_row": ms["pre"] + (passes - 1) * ms["grafted"]}
            click.echo(f"{name:<9} dev {100 * result[name]['dev_accuracy']:.2f}%  "
                       f"test {100 * result[name]['test_accuracy']:.2f}%  own experience "
                       f"{100 * result[name]['test_own_experience']:.2f}%  {passes} passes "
                       f"{result[name]['ms_per_row']:.1f} ms/row  (ridge {ridge:g}, τ {result[name]['tau']}, "
                       f"k {result[name]['k']})")
        write_json(out_dir.path / "combined_answer.json",
                   {"settings": settings_of(params), "rules": result,
                    "rows": {w: len(rows[w]) for w in ("dev", "test")},
                    "threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
