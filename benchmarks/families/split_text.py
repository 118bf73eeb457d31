"""Split text streams, ``split-TASK:N``: one many-class task (``clinc150``, ``banking77``, any task with a
``meta.json``) cut into N experiences of disjoint label groups, the classes arriving in groups. The task is found as
every command finds one (:func:`~cl_graft.benchmarks.data.load_task`): in the data folder, else, for the registered
``clinc150`` and ``banking77``, on the Hub (``benchmarks/tasks.py``), with the data folder's label indices.

The class order is a permutation of the task's labels, seeded by the run's seed (or ``--class-order``), recorded in
the run record; group ``g`` holds the ``g``-th of N slices of it, their sizes as even as possible (``15 × 10`` for
``split-clinc150:15``, ``7 × 11`` for ``split-banking77:7``). Each class of an experience gives its dev rows
first, at most the preset's ``dev_k`` and at most an eighth of its rows (clinc150's 120 rows per intent give 15
dev rows; the preset's 64 would take more than half), and then at most ``k`` training rows from the rest (seeded
shuffles); the run record's ``dev_k`` is the most dev rows a class gave (what a run with that ``dev_k`` takes again).
Test rows: the group's, capped by ``eval_cap`` (seeded).

A class of an experience without training rows (it can never be learned) or without test rows (it is never scored)
is a :class:`~cl_graft.errors.DataWarning` naming the class and the experience, as a task list's class without rows
is (:func:`~cl_graft.benchmarks.data.kshot`); experiences of one class (the class scenario; the task scenario refuses a
task of one label) are one warning for the stream.

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
import warnings
from collections import Counter

import numpy as np

from cl_graft.errors import DataWarning, UserError
from cl_graft.task import TaskRows, TaskSpec

from . import StreamFamily, StreamRequest, StreamSetup
from .text import refuse_digits_model, text_setup

_SPEC = re.compile(r"split-(?P<task>[A-Za-z0-9_-]+?):(?P<n>.*)")  # the ":" sets it apart from a task folder "split-…"
_COUNT = re.compile(r"[0-9]+")
"""N of ``split-TASK:N``: ASCII digits only (``str.isdigit`` takes ``²`` and ``３``)."""
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
               request: StreamRequest, local: bool, source: str = "") -> TaskRows:
    """Experience ``name``: the rows of the classes ``members``, sampled as the module docstring says; a
    :class:`~cl_graft.errors.DataWarning` for each class without training or without test rows.

    Args:
        local: relabel to 0..len(members)−1 under a spec of the group's own labels (the task scenario); else
            keep the task's label ids and labels (the class scenario).
        source: where the task's rows come from (a folder, ``hub:<id>``), for the warnings.
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
    _warn_missing(members, train, f"{source}/train", f"experience {name} cannot learn it")
    _warn_missing(members, test, f"{source}/test", f"experience {name} never scores it")
    rng.shuffle(tr)
    rng.shuffle(dev)
    te = cap([dict(r, label=index[r["label"]]) for r in test if r["label"] in index], request.data.eval_cap,
             seed=request.seed)
    if local:
        return TaskRows(dataclasses.replace(spec, name=name, labels=tuple(spec.labels[c] for c in members),
                                            label_words=()), tr, dev, te)
    back = [dict(r, label=members[r["label"]]) for r in tr], [dict(r, label=members[r["label"]]) for r in dev]
    return TaskRows(dataclasses.replace(spec, name=name), *back, [dict(r, label=members[r["label"]]) for r in te])


def _warn_missing(members: list[int], rows: list[dict], where: str, why: str) -> None:
    """A :class:`~cl_graft.errors.DataWarning` for each class of ``members`` without a row in ``rows``."""
    present = {r["label"] for r in rows}
    for c in members:
        if c not in present:
            warnings.warn(f"{where}: class {c} has 0 rows ({why})", DataWarning, stacklevel=3)


def _warn_one_class(spec: str, names: list[str], parts: list[list[int]]) -> None:
    """One :class:`~cl_graft.errors.DataWarning` for the experiences of ``names`` holding one class (``parts``; in
    the class scenario: the task scenario refuses a task of one label)."""
    single = [n for n, members in zip(names, parts) if len(members) == 1]
    if single:
        warnings.warn(f"--stream {spec}: {len(single)} of {len(names)} experiences hold one class "
                      f"({', '.join(single[:3])}{', ...' if len(single) > 3 else ''}): training on one class "
                      f"teaches nothing that tells classes apart (a method that trains on an experience's own "
                      f"classes alone learns nothing from it)", DataWarning, stacklevel=3)


def _setup(request: StreamRequest) -> StreamSetup:
    from ..data import load_task

    refuse_digits_model(request)
    match = _SPEC.fullmatch(request.spec.strip())
    task, count = match["task"], match["n"]
    data = load_task(task, request.data_dir)
    n_labels = data.spec.num_labels
    if not _COUNT.fullmatch(count) or not 1 <= int(count) <= n_labels:
        raise UserError(f"--stream {request.spec!r}: write split-{task}:N with N experiences, "
                        f"1 <= N <= {n_labels} (its labels)")
    order = class_order(request.class_order, n_labels, request.seed)
    parts = groups(order, int(count))
    width = len(str(len(parts) - 1))
    local = request.scenario == "task"
    names = [f"{task}-{g:0{width}d}" for g in range(len(parts))]
    splits = [group_rows(data.spec, data.train, data.test, members, name, request=request, local=local,
                         source=data.source) for name, members in zip(names, parts)]
    _warn_one_class(request.spec, names, parts)
    head = None if local else dataclasses.replace(data.spec, label_words=())
    dev_k = max((max(Counter(r["label"] for r in s.dev).values()) for s in splits if s.dev), default=0)
    return text_setup(request, splits, data_tasks=[task], head=head,
                      record={"stream": request.spec, "class_order": order, "groups": parts, "dev_k": dev_k})


FAMILY = StreamFamily(name="split text", grammar="split-TASK:N, one task's labels in N groups, an experience each "
                      "(split-clinc150:15, split-banking77:7; --scenario task or class)",
                      claims=lambda spec: _SPEC.fullmatch(spec) is not None, setup=_setup, priority=10)
