"""The safetensors storage of the tasks' feature statistics (:mod:`.features`) that
:class:`~..graft.owner_map.OwnerMap` saves with the skills: ``features.safetensors``, exactly the tensors each task's form
keeps (:meth:`~.features.FeatureStats.tensors`), checked on load.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from cl_graft.errors import UserError
from cl_graft.files import atomic_write, read_safetensors

from .features import FORM_TENSORS, CLASS_TENSORS, FeatureStats

FEATURES_FILE = "features.safetensors"


def save_stats(directory: str | os.PathLike, stats: Sequence[FeatureStats | None]) -> list[int | None]:
    """Writes ``features.safetensors`` (tensors ``<k>.<name>`` for each task position ``k`` with statistics and
    each tensor its form keeps, :meth:`FeatureStats.tensors`; removed when there are none) and returns the counts
    for the map's JSON (None: no statistics)."""
    path = Path(directory) / FEATURES_FILE
    tensors = {f"{k}.{name}": t.detach().cpu().float().contiguous()
               for k, s in enumerate(stats) if s is not None for name, t in s.tensors().items()}
    if tensors:
        atomic_write(path, lambda p: save_file(tensors, p, metadata={"format": "pt"}))
    else:
        path.unlink(missing_ok=True)
    return [None if s is None else int(s.count) for s in stats]


def _checked(path: Path, k: int, count: int, parts: Mapping[str, Tensor]) -> FeatureStats:
    """Task ``k``'s statistics from its tensors (name → tensor), their form told by which names are there."""
    classes = {n: parts[n] for n in CLASS_TENSORS if n in parts}
    names = tuple(sorted(n for n in parts if n not in classes))
    kind = next((kind for kind, want in FORM_TENSORS.items() if tuple(sorted(want)) == names), None)
    mean = parts.get("mean")
    if kind is None or mean is None or mean.dim() != 1:
        raise UserError(f"{path}: statistics of task {k} are missing or malformed (tensors {list(names)})")
    d = mean.shape[0]
    cov, basis, var = parts.get("cov"), parts.get("basis"), parts.get("var")
    shapes_ok = ((cov is None or cov.shape == (d, d)) and (var is None or var.shape == (d,))
                 and (basis is None or (basis.dim() == 2 and 1 <= basis.shape[0] < d and basis.shape[1] == d)))
    means, counts, labels = (classes.get(n) for n in CLASS_TENSORS)
    if classes and (means is None or counts is None or labels is None or means.dim() != 2 or means.shape[1] != d
                    or counts.shape != (means.shape[0],) or labels.shape != counts.shape
                    or bool((counts < 1).any()) or bool((labels < 0).any()) or bool((labels != labels.round()).any())
                    or bool((labels.diff() <= 0).any())):
        shapes_ok = False
    if not shapes_ok:
        raise UserError(f"{path}: statistics of task {k} have shapes that do not fit a mean of width {d} "
                        f"(or class labels that are not ascending integers ≥ 0)")
    negative = var is not None and bool((var < 0).any())
    if (count < 1 or negative or (cov is not None and (not torch.allclose(cov, cov.T)
                                                          or bool((cov.diagonal() < 0).any())))):
        raise UserError(f"{path}: statistics of task {k} are not a covariance of {count} rows "
                        f"(tensor '{k}.{'cov' if cov is not None else 'var'}')")
    return FeatureStats(mean, cov, int(count), basis=basis, var=var, class_means=means, class_counts=counts,
                        class_labels=labels)


def load_stats(directory: str | os.PathLike, counts: Sequence[int | None]) -> list[FeatureStats | None]:
    """Reads what :func:`save_stats` wrote, for the counts recorded in the map's JSON.

    Raises:
        UserError: the file is missing or unreadable, lacks a task's tensors, holds a tensor of no task with
            statistics, NaN, an infinity, or a matrix that is no covariance.
    """
    if not any(c is not None for c in counts):
        return [None] * len(counts)
    path = Path(directory) / FEATURES_FILE
    tensors: Mapping[str, Tensor] = read_safetensors(path)
    by_task: dict[int, dict[str, Tensor]] = {}
    for key, t in tensors.items():
        k, _, name = key.partition(".")
        if not k.isdigit() or int(k) >= len(counts) or counts[int(k)] is None:
            raise UserError(f"{path}: tensor {key!r} belongs to no task with statistics in the map")
        by_task.setdefault(int(k), {})[name] = t
    return [None if c is None else _checked(path, k, c, by_task.get(k, {})) for k, c in enumerate(counts)]
