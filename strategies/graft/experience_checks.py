"""What an experience must hold before a grafting strategy trains on it, checked with one line naming the
experience and the bad value instead of a bare ``IndexError`` from Avalanche or torch, or a silently wrong
validation score.

- :func:`check_experiences`: an experience without examples is refused before anything runs.
- :func:`check_labels`: every training label is a class the model outputs (checked on each mini-batch, before
  the loss: nothing has trained yet when the first bad label is met).
- :func:`check_held_out`: the held-out rows a task's region is chosen on (its ``valid_stream`` experience) have
  labels the model outputs and finite inputs; checked once per experience, before its first update.
- :func:`check_eval_batch`: a test mini-batch whose input holds NaN or an infinity, or whose output holds NaN, is
  refused, naming the experience, instead of a silent ``Loss nan`` and a meaningless accuracy.
- :func:`failed_experience`: the error of an experience that failed, naming it (and its non-finite inputs, the
  usual cause of a loss that turns NaN at once).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import default_collate

from cl_graft.errors import UserError

BATCH = 256


def experience_name(exp) -> str:
    """``experience 1 (task labels [1])``: an experience as messages name it."""
    return f"experience {getattr(exp, 'current_experience', '?')} (task labels {list(getattr(exp, 'task_labels', []))})"


def check_experiences(experiences) -> None:
    """Refuses an experience with no examples (Avalanche fails on it with a bare ``IndexError``).

    Raises:
        UserError: naming the experience (its index in the stream and its task labels).
    """
    for exp in [experiences] if hasattr(experiences, "dataset") else experiences:
        if len(exp.dataset) == 0:
            raise UserError(f"{experience_name(exp)} has no examples; nothing to train")


def check_labels(labels: Tensor, classes: int, where: str) -> None:
    """Refuses a label outside ``[0, classes)``, the classes the model's output ``(B, classes)`` scores.

    Raises:
        UserError: ``<where>: label 50 is not a class of the model's 10 outputs (0-9)``.
    """
    bad = labels[(labels < 0) | (labels >= classes)]
    if bad.numel():
        raise UserError(f"{where}: label {int(bad[0])} is not a class of the model's {classes} outputs "
                        f"(0-{classes - 1})")


def check_held_out(dataset, classes: int, where: str) -> None:
    """Refuses held-out rows (items ``[x, y, …]``) whose label the model cannot output or whose input is NaN or
    infinite; one pass over the rows.

    Raises:
        UserError: naming ``where``, the row and the bad value.
    """
    for start, x, y in _batches(dataset):
        row = _non_finite(x)
        if row is not None:
            raise UserError(f"{where}: row {start + row}'s input holds NaN or infinite values")
        check_labels(torch.as_tensor(y), classes, where)


def check_eval_batch(x, output: Tensor, where: str) -> None:
    """Refuses an evaluation mini-batch whose float input ``(B, …)`` holds NaN or an infinity, or whose output
    ``(B, classes)`` holds NaN (a routed output may hold -inf for other tasks' classes; NaN is never a score).

    Raises:
        UserError: ``<where>: row i of a test mini-batch holds NaN or infinite values`` (or the output named).
    """
    row = _non_finite(x)
    if row is not None:
        raise UserError(f"{where}: row {row} of a test mini-batch holds NaN or infinite values; its scores would "
                        f"be NaN")
    if bool(output.isnan().any()):
        raise UserError(f"{where}: the model's output holds NaN on finite test inputs")


def failed_experience(error: UserError, exp) -> UserError:
    """``error`` of a failed experience as one line naming ``exp``; a divergence on inputs that hold NaN or
    infinite values says so instead of blaming the learning rate."""
    text = str(error)
    if text.startswith("experience "):
        return error
    name = experience_name(exp)
    if "diverged" in text:
        row = _non_finite_row(exp.dataset)
        if row is not None:
            return UserError(f"{name}: row {row}'s input holds NaN or infinite values, so training diverged")
    return UserError(f"{name}: {text}")


def _non_finite_row(dataset) -> int | None:
    """The first row of ``dataset`` whose input holds NaN or an infinity, or None."""
    for start, x, _ in _batches(dataset):
        row = _non_finite(x)
        if row is not None:
            return start + row
    return None


def _batches(dataset):
    """``(first row, inputs, labels)`` of ``dataset`` in collated batches of :data:`BATCH` rows."""
    collate = getattr(dataset, "collate_fn", None) or default_collate
    for start in range(0, len(dataset), BATCH):
        batch = collate([dataset[i] for i in range(start, min(start + BATCH, len(dataset)))])
        yield start, batch[0], batch[1]


def _non_finite(x) -> int | None:
    """The first row of a float input batch ``(B, …)`` holding NaN or an infinity (None: none, or not floats)."""
    if not isinstance(x, Tensor) or not x.is_floating_point():
        return None
    finite = x.reshape(len(x), -1).isfinite().all(dim=1)
    return None if bool(finite.all()) else int((~finite).nonzero()[0])
