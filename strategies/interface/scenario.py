"""The model every strategy of a run starts from, by scenario (``cl-graft run --scenario task|class``).

- ``task`` (task-incremental): every strategy gets the task label at test. A multi-head model (a text stream's
  :class:`~..adapter.TaskAdapter`, ``mtmlp``, ``cnn``) picks its head by it already. A single-head model
  (``mlp``) would ignore it in a baseline's hands while methods that keep a region or a model per task use it,
  so **every**
  strategy runs on the same *multi-head copy* (:func:`scenario_model`: Avalanche's ``as_multitask``, the output
  layer becomes one head per task, each initialised from it): the same model and the same information for all,
  made here by the harness, not by each method.
- ``class`` (class-incremental): no task label at test; the model runs as it is.

The result's ``info["task_aware"]`` says which model ran (:func:`scenario_model`'s second value).
"""
from __future__ import annotations

import copy

import torch

from cl_graft.errors import UserError
from cl_graft.task import SCENARIOS

MULTI_HEAD_COPY = "multi-head copy (avalanche.models.as_multitask): one output layer per task, picked by its label"
OWN_HEADS = "its own heads, picked by the task label"
SINGLE_HEAD = "none (single head)"


def is_multi_head(model: torch.nn.Module) -> bool:
    """Whether ``model`` picks its output by the task label (an Avalanche ``MultiTaskModule``)."""
    from avalanche.models import MultiTaskModule

    return isinstance(model, MultiTaskModule)


def last_linear(model: torch.nn.Module, name: str) -> str:
    """The attribute name of ``model``'s last child, which must be its linear output layer.

    Raises:
        UserError: the last child is not an ``nn.Linear`` (``name`` says who needs it).
    """
    children = list(model.named_children())
    if not children or not isinstance(children[-1][1], torch.nn.Linear):
        raise UserError(f"{name} needs a model whose last layer is a linear classifier; "
                        f"{type(model).__name__} ends in {type(children[-1][1]).__name__ if children else 'nothing'}")
    return children[-1][0]


def scenario_model(model: torch.nn.Module, experiences, scenario: str, seed: int
                   ) -> tuple[torch.nn.Module, str]:
    """The model a strategy trains in ``scenario``, and how it uses the task label.

    In the task-incremental scenario a single-head ``model`` becomes its multi-head copy (Avalanche's
    ``as_multitask`` on its last linear layer; ``model`` itself is not changed). Every task's head is made
    here, seeded by ``seed`` (Avalanche would make a head when its task is first trained or evaluated, from
    whatever state the strategy left torch's random generator in: a penalty's importance pass draws from it,
    so a penalty of weight 0 would not equal plain fine-tuning). Each head masks the units of classes its task
    does not have (Avalanche's default), except when every experience has every output class
    (``permuted-digits``): there masking hides nothing, and Avalanche's masking fails on the class sets of its
    newer benchmarks (an IndexError in ``MultiHeadClassifier.adaptation``), so it is off.

    Args:
        model: the strategy's own copy of the run's model.
        experiences: the stream's training experiences (their classes and task labels).
        scenario: one of :data:`cl_graft.task.SCENARIOS`.
        seed: the run's seed.

    Returns:
        ``(model, how)``: ``model`` itself (class scenario, or already multi-head) or its multi-head copy; ``how``
        one of :data:`MULTI_HEAD_COPY`, :data:`OWN_HEADS`, :data:`SINGLE_HEAD` (``info["task_aware"]``).
    """
    if scenario not in SCENARIOS:
        raise UserError(f"scenario is one of {', '.join(SCENARIOS)}, got {scenario!r}")
    if is_multi_head(model):
        return model, OWN_HEADS
    if scenario != "task":
        return model, SINGLE_HEAD
    from avalanche.models import as_multitask
    from avalanche.models.utils import avalanche_model_adaptation

    layer = last_linear(model, "the task-incremental scenario's multi-head copy")
    out_features = getattr(model, layer).out_features
    multi = as_multitask(copy.deepcopy(model), layer)
    experiences = list(experiences)
    getattr(multi, layer).masking = not all(len(e.classes_in_this_experience) == out_features for e in experiences)
    with torch.random.fork_rng():              # every strategy gets the same heads, whatever it draws later
        torch.manual_seed(seed)
        for experience in experiences:
            avalanche_model_adaptation(multi, experience)
    return multi, MULTI_HEAD_COPY
