"""Split text streams, ``split-TASK:N``: one many-class task (``clinc150``, ``banking77``, any task with a
``meta.json``) cut into N experiences of disjoint label groups, the classes arriving in groups. The task is found as
every command finds one (:func:`~cl_graft.benchmarks.data.load_task`): in the data folder, else, for the registered
``clinc150`` and ``banking77``, on the Hub (``benchmarks/tasks.py``), with the data folder's label indices.

The class order is a permutation of the task's labels, seeded by the run's seed (or ``--class-order``), recorded in
the run record; group ``g`` holds the ``g``-th of N slices of it, their sizes as even as possible (``15 × 10`` for
``split-clinc150:15``, ``7 × 11`` for ``split-banking77:7``). Each class of an experience gives its dev rows
first, at most the preset's ``dev_k`` and at most an eighth of its rows (clinc150's 120 rows per intent give 15
dev rows; the preset's 64 would take more than half), and then at most ``k`` training rows from the rest (seeded
shuffles). Test rows: the group's, capped by
``eval_cap`` (seeded).

Scenarios:

- ``task``: experience ``g`` is the task ``TASK-g`` with its own labels (0..n_g−1) and its own head; the task
  label at test picks it;
- ``class``: every experience keeps the task's label ids and one head over all of them answers; no task label
  at test. The harness masks the classes not trained yet.
"""
from __future__ import annotations

import dataclasses
import random
import re

import numpy as np

from cl_graft.errors import UserError
from cl_graft.task import TaskRows, TaskSpec

from . import StreamFamily, StreamRequest, StreamSetup
from .text import text_setup

_SPEC = re.compile(r"split-(?P<task>[A-Za-z0-9_-]+?)(?::(?P<n>.*))?")
DEV_SHARE = 8
"""Dev rows of a class are at most a 1/DEV_SHARE share of its training rows."""


def class_order(text: str | None, n_labels: int, seed: int) -> list[int]:
    """The class order: ``text`` (comma-separated label indices, a permutation of 0..n_labels−1), else a
    permutation seeded by ``seed``.

    Raises:
        UserError: ``text`` is not such a permutation (one line naming ``--class-order``).
    """
    if text is None:
        return [int(c) for c in np.random.default_rng(seed).permutation(n_labels)]
    try:
        order = [int(c) for c in text.split(",")]
    except ValueError:
        raise UserError(f"--class-order {text!r}: give comma-separated label indices") from None
    if sorted(order) != list(range(n_labels)):
        raise UserError(f"--class-order must list each of the task's {n_labels} label indices 0..{n_labels - 1} "
                        f"once; got {len(order)} items")
    return order


def groups(order: list[int], n: int) -> list[list[int]]:
    """``order`` cut into ``n`` consecutive groups whose sizes differ by at most one (larger ones first)."""
    return [[int(c) for c in part] for part in np.array_split(np.array(order), n)]


def group_rows(spec: TaskSpec, train: list[dict], test: list[dict], members: list[int], name: str, *,
               request: StreamRequest, local: bool) -> TaskRows:
    """Experience ``name``: the rows of the classes ``members``, sampled as the module docstring says.

    Args:
        local: relabel to 0..len(members)−1 under a spec of the group's own labels (the task scenario); else
            keep the task's label ids and labels (the class scenario).
    """
    from ..data import cap

    index = {c: i for i, c in enumerate(members)}
    rng = random.Random(request.seed)
    tr, dev = [], []
    for c in members:
        rows = [dict(r, label=index[c]) for r in train if r["label"] == c]
        rng.shuffle(rows)
        n_dev = max(1, min(request.data.dev_k, len(rows) // DEV_SHARE)) if len(rows) > 1 else 0
        dev += rows[:n_dev]
        tr += rows[n_dev:n_dev + request.data.k]
    if not tr:
        raise UserError(f"{name}: its classes have no training rows")
    rng.shuffle(tr)
    rng.shuffle(dev)
    te = cap([dict(r, label=index[r["label"]]) for r in test if r["label"] in index], request.data.eval_cap,
             seed=request.seed)
    if local:
        return TaskRows(dataclasses.replace(spec, name=name, labels=tuple(spec.labels[c] for c in members),
                                            label_words=()), tr, dev, te)
    back = [dict(r, label=members[r["label"]]) for r in tr], [dict(r, label=members[r["label"]]) for r in dev]
    return TaskRows(dataclasses.replace(spec, name=name), *back, [dict(r, label=members[r["label"]]) for r in te])


def _setup(request: StreamRequest) -> StreamSetup:
    from ..data import load_task

    match = _SPEC.fullmatch(request.spec.strip())
    task, count = match["task"], match["n"]
    data = load_task(task, request.data_dir)
    n_labels = data.spec.num_labels
    if count is None or not count.isdigit() or not 1 <= int(count) <= n_labels:
        raise UserError(f"--stream {request.spec!r}: write split-{task}:N with N experiences, "
                        f"1 <= N <= {n_labels} (its labels)")
    order = class_order(request.class_order, n_labels, request.seed)
    parts = groups(order, int(count))
    width = len(str(len(parts) - 1))
    local = request.scenario == "task"
    splits = [group_rows(data.spec, data.train, data.test, members, f"{task}-{g:0{width}d}", request=request,
                         local=local) for g, members in enumerate(parts)]
    head = None if local else dataclasses.replace(data.spec, label_words=())
    return text_setup(request, splits, data_tasks=[task], head=head,
                      record={"stream": request.spec, "class_order": order, "groups": parts})


FAMILY = StreamFamily(name="split text", grammar="split-TASK:N, one task's labels in N groups, an experience each "
                      "(split-clinc150:15, split-banking77:7; --scenario task or class)",
                      claims=lambda spec: _SPEC.fullmatch(spec) is not None, setup=_setup, priority=10)
