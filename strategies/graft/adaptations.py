"""Avalanche's head adaptations of a run, recorded and replayed, so a saved run's dynamic heads come back.

Avalanche's dynamic modules (``MultiHeadClassifier``, ``IncrementalClassifier``) grow heads when the template adapts
the model to an experience (``avalanche_model_adaptation``). :func:`adaptation_record` keeps what that adaptation
read (the experience's task labels and classes, as JSON); :func:`replay_adaptation_` replays the records on a model
fresh from its constructor, which then has the same heads (:meth:`~.owner_map.OwnerMap.apply_`, :mod:`.saved_run`);
:func:`classes_seen` reads from them which classes a class-incremental model had seen when it learned a task.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from avalanche.models import DynamicModule
from avalanche.models.dynamic_modules import avalanche_model_adaptation
from torch import nn

from cl_graft.errors import UserError


def adaptation_record(model: nn.Module, experience, *, training: bool) -> dict | None:
    """What Avalanche's head adaptation read from ``experience`` (JSON), or None when ``model`` has no dynamic
    module or the experience carries no classes and task labels."""
    inner = getattr(model, "module", model)
    if not any(isinstance(m, DynamicModule) for m in inner.modules()):
        return None
    classes = getattr(experience, "classes_in_this_experience", None)
    labels = getattr(experience, "task_labels", None)
    if classes is None or labels is None:
        return None
    return {"training": training, "task_labels": sorted({int(t) for t in labels}),
            "classes": sorted({int(c) for c in classes})}


@dataclass
class _Adapted:
    """The two attributes of an experience that Avalanche's head adaptation reads."""

    classes_in_this_experience: list[int]
    task_labels: list[int]
    dataset: object = field(default=None)


def replay_adaptation_(model: nn.Module, records: list[dict]) -> None:
    """Runs Avalanche's head adaptation (``avalanche_model_adaptation``) IN PLACE on ``model`` for each record of
    :func:`adaptation_record`, in train or eval mode as it was recorded; the model's mode is put back."""
    was_training = model.training
    try:
        for r in records:
            model.train(bool(r["training"]))
            avalanche_model_adaptation(model, _Adapted(list(r["classes"]), list(r["task_labels"])))
    finally:
        model.train(was_training)


def classes_seen(records: list[dict], task_label: int) -> list[int]:
    """The classes (sorted) of the training experiences a model was adapted to up to and including the first of
    task label ``task_label``: what a class-incremental model had seen when it learned that task.

    Raises:
        UserError: no training adaptation of ``task_label`` was recorded.
    """
    seen: set[int] = set()
    for r in records:
        if r["training"]:
            seen |= set(r["classes"])
            if task_label in r["task_labels"]:
                return sorted(seen)
    raise UserError(f"no training experience of task label {task_label} in the run's recorded head adaptations; "
                    f"the classes its model had seen are unknown")
