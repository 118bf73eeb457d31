"""What grafting touches in a model an Avalanche strategy trains: graftable tensors, per-task heads, task names.

Any ``torch.nn.Module`` works (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600, apply to any
parameter set):

- :class:`~cl_graft.strategies.adapter.TaskAdapter` (cl-graft's text classifier): tensors are named inside its classifier
  (``adapter.clf``), the graftable default is the transformer layers (:data:`DEFAULT_GRAFTABLE`, as in the paper),
  heads are the classifier's per-task heads and task label ``i`` is ``task_names[i]``;
- :class:`~cl_graft.strategies.adapter.SharedHead` (a class-incremental text stream): the same, except that its one
  head, which every task trains, is graftable like a single-head model's output layer (no task heads): a task's
  region holds the head elements it needs, and later tasks change only the others;
- any other module (an Avalanche ``MultiTaskModule`` such as ``MTSimpleMLP``, a plain single-head module, a
  Hugging Face model in a small wrapper): the graftable default is every trainable parameter except per-task
  heads. Heads are found for Avalanche's ``MultiHeadClassifier`` (``<prefix>.classifiers.<label>.*``) and through
  a hook: a model method ``graft_head_names(task_label) -> [names]`` or the ``heads=(model, task_label) -> [names]``
  argument, where ``task_label=None`` asks for every task's head tensors. Task label ``i`` is the task ``"i"``.

``graftable`` overrides the default: a regex (``re.search`` on parameter names) or a callable
``(name, parameter) -> bool``; heads are never graftable.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from avalanche.models import MultiHeadClassifier
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.region import DEFAULT_GRAFTABLE

from ..adapter import SharedHead, TaskAdapter

Graftable = str | Callable[[str, Tensor], bool] | None
HeadNames = Callable[[nn.Module, int | None], list[str]]


@dataclass
class GraftTarget:
    """The grafted part of a strategy's model.

    Attributes:
        root: the module whose ``named_parameters()`` names the owner map uses (``adapter.clf`` for a
            :class:`TaskAdapter`, else the model itself).
        model: what the strategy calls (``avalanche_forward(model, x, task_labels)``).
        graftable: decides which tensors are graftable (see the module docstring).
        heads: task label → its head tensors (names in ``root``); None → every task's head tensors.
        task_names: task label → task name, for a :class:`TaskAdapter` or :class:`SharedHead`; None =
            ``str(label)``.
        shared_head: the classifier's task whose head answers every task (a :class:`SharedHead`); None: each
            task answers with its own head.
    """

    root: nn.Module
    model: nn.Module
    graftable: Callable[[str, Tensor], bool]
    heads: Callable[[int | None], list[str]]
    task_names: list[str] | None = None
    shared_head: str | None = None

    def names(self) -> list[str]:
        """The graftable tensors of ``root`` now (in parameter order).

        Raises:
            UserError: the selection is empty.
        """
        heads = set(self.heads(None))
        names = [n for n, p in self.root.named_parameters() if n not in heads and self.graftable(n, p)]
        if not names:
            raise UserError(f"{type(self.model).__name__} has no graftable tensors (every trainable parameter is a "
                            f"task head, or graftable= matches nothing)")
        return names

    def task(self, label: int) -> str:
        """The task name of a task label."""
        if self.task_names is None:
            return str(int(label))
        if not 0 <= label < len(self.task_names):
            raise UserError(f"task label {label} outside the model's {len(self.task_names)} tasks")
        return self.task_names[int(label)]

    def label(self, task: str) -> int:
        """The task label of a task name (inverse of :meth:`task`)."""
        return self.task_names.index(task) if self.task_names is not None else int(task)


def _selector(graftable: Graftable, default: Callable[[str, Tensor], bool]) -> Callable[[str, Tensor], bool]:
    if graftable is None:
        return default
    if callable(graftable):
        return graftable
    try:
        pattern = re.compile(graftable)
    except re.error as e:
        raise UserError(f"bad graftable-parameter regex: {e}") from None
    return lambda n, p: bool(pattern.search(n))


def graft_target(model: nn.Module, *, graftable: Graftable = None, heads: HeadNames | None = None) -> GraftTarget:
    """The :class:`GraftTarget` of ``model`` (unwrapping ``DataParallel``/``DistributedDataParallel``)."""
    wrapped = isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel))
    inner = model.module if wrapped else model
    if isinstance(inner, TaskAdapter):
        clf = inner.clf
        return GraftTarget(clf, model, _selector(graftable, lambda n, p: bool(re.search(DEFAULT_GRAFTABLE, n))),
                           lambda label: (clf.head_parameter_names() if label is None
                                          else clf.task_head_names(inner.task_names[label])),
                           list(inner.task_names))
    if isinstance(inner, SharedHead):                   # one output layer, graftable as a single-head model's is
        clf = inner.clf
        head = set(clf.task_head_names(inner.head))
        default = lambda n, p: n in head or bool(re.search(DEFAULT_GRAFTABLE, n))  # noqa: E731
        return GraftTarget(clf, model, _selector(graftable, default), lambda label: [], list(inner.task_names),
                           inner.head)
    prefixes = tuple(f"{name}.classifiers." if name else "classifiers."
                     for name, m in inner.named_modules() if isinstance(m, MultiHeadClassifier))
    hook = getattr(inner, "graft_head_names", None)

    def head_names(label: int | None) -> list[str]:
        if heads is not None:
            return list(heads(inner, label))
        if hook is not None:
            return list(hook(label))
        start = prefixes if label is None else tuple(f"{pre}{int(label)}." for pre in prefixes)
        return [n for n, _ in inner.named_parameters() if start and n.startswith(start)]

    return GraftTarget(inner, model, _selector(graftable, lambda n, p: p.requires_grad), head_names)
