"""What a baseline sees of the task label, by scenario (``cl-graft run --scenario task|class``).

- ``task`` (task-incremental): every strategy gets the task label at test. A multi-head model (a text
  stream's :class:`~..adapter.TaskAdapter`, ``mtmlp``, ``cnn``) picks its head by it already. A single-head
  model (``mlp``) would ignore it, so a baseline runs on its *multi-head copy* (:func:`task_aware_model`:
  Avalanche's ``as_multitask``, the output layer becomes one head per task, the first initialised from it),
  the task-aware variant that stores a head per task as graft does. This is automatic under ``--scenario
  task``; the result's ``info["task_aware"]`` says which model ran.
- ``class`` (class-incremental): no task label at test; the single-head model runs as it is.

Methods built for one scenario declare it (their entry's ``scenarios``; a run in the other is refused before any
strategy trains): ER-ACE, DER, iCaRL and BiC are class-incremental methods (one output layer shared by every
class; Avalanche's BiC asserts a single head), ``single`` a task-incremental one; iCaRL and BiC also need each experience to bring classes not seen before (split digits), and a
model whose last layer is a linear classifier.
"""
from __future__ import annotations

import copy

import torch

from cl_graft.errors import UserError

from ..comparison.entry import BuildContext


def check_new_classes(name: str, stream) -> None:
    """Refuses a stream whose experiences share classes (``permuted-digits``): iCaRL's exemplar sets and BiC's
    old/new split of the output layer count on each experience bringing classes not seen before.

    Raises:
        UserError: two experiences with a class in common.
    """
    seen: set[int] = set()
    for exp in stream.benchmark.train_stream:
        classes = {int(c) for c in exp.classes_in_this_experience}
        if classes & seen:
            raise UserError(f"{name} needs new classes in every experience (split-digits); {stream.name} "
                            f"repeats classes")
        seen |= classes


def is_multi_head(model: torch.nn.Module) -> bool:
    """Whether ``model`` picks its output by the task label (an Avalanche ``MultiTaskModule``)."""
    from avalanche.models import MultiTaskModule

    return isinstance(model, MultiTaskModule)


def last_linear(model: torch.nn.Module, name: str) -> str:
    """The attribute name of ``model``'s last child, which must be its linear output layer.

    Raises:
        UserError: the last child is not an ``nn.Linear``.
    """
    children = list(model.named_children())
    if not children or not isinstance(children[-1][1], torch.nn.Linear):
        raise UserError(f"{name} needs a model whose last layer is a linear classifier; "
                        f"{type(model).__name__} ends in {type(children[-1][1]).__name__ if children else 'nothing'}")
    return children[-1][0]


def task_aware_model(ctx: BuildContext, name: str) -> torch.nn.Module:
    """The model a baseline trains in the run's scenario: in the task-incremental one, a multi-head copy of a
    single-head ``ctx.model`` (Avalanche's ``as_multitask`` on its last linear layer; ``ctx.model`` itself is
    not changed); else ``ctx.model``.

    Every task's head is made here, seeded by the run's seed (Avalanche would make a head when its task is first
    trained or evaluated, from whatever state the strategy left torch's random generator in: EWC's Fisher pass
    draws from it, so EWC at λ = 0 would not equal Naive). Each head masks the units of classes its task does
    not have (Avalanche's default), except when every experience has every output class (``permuted-digits``):
    there masking hides nothing, and Avalanche's masking fails on the class sets of its newer benchmarks (an
    IndexError in ``MultiHeadClassifier.adaptation``), so it is off.
    """
    model = ctx.model
    if ctx.scenario != "task" or is_multi_head(model):
        return model
    from avalanche.models import as_multitask
    from avalanche.models.utils import avalanche_model_adaptation

    layer = last_linear(model, name)
    out_features = getattr(model, layer).out_features
    multi = as_multitask(copy.deepcopy(model), layer)
    experiences = list(ctx.stream.benchmark.train_stream)
    getattr(multi, layer).masking = not all(len(e.classes_in_this_experience) == out_features for e in experiences)
    with torch.random.fork_rng():              # every strategy gets the same heads, whatever it draws later
        torch.manual_seed(ctx.cfg.recipe.seed)
        for experience in experiences:
            avalanche_model_adaptation(multi, experience)
    return multi


def variant(model: torch.nn.Module, trained: torch.nn.Module) -> str:
    """How ``trained`` (the model a strategy trained, starting from ``model``) uses the task label, for
    ``info["task_aware"]``."""
    if is_multi_head(trained):
        return "its own heads, picked by the task label" if is_multi_head(model) else \
            "multi-head copy (avalanche.models.as_multitask): one output layer per task, picked by its label"
    return "none (single head)"
