"""Rows without task labels for the frozen-encoder heads (``slda``, ``ranpac``, ``ncm``) on a task list: one head
over every task's columns (``cl-graft run --task-inference features``). It declares no entry.

Each of these keeps a column per (task head, class) over θ_pre's sentence features (:mod:`.closed_form`,
:mod:`.ncm`); with the task label a row is answered by its own head's columns. Routed (:class:`ColumnRouting`),
a row's features are read once without its label (every linear head reads the same pooled embedding of θ_pre)
and its answer is the argmax over every column of every task. The rule is the head's own score of θ_pre's
features, so it goes by graft's rule name ``features`` (graft too picks the task from θ_pre's features alone; a
run of both with ``--task-inference features`` scores them side by side).

Counting: while routed, a row's target (the template's ``mb_y``) is its own (task, class) column, so Avalanche's
accuracy counts it right only when the argmax column is that one: another task's column is wrong even where its
class index equals the row's label. A class without a column (never trained) gets :data:`NO_COLUMN` (the
criterion's ignore index, never an argmax): its rows count wrong. "Task identified" (:meth:`ColumnRouting.identified`)
is each test experience's share of rows whose argmax column is one of its own task's.
"""
from __future__ import annotations

import torch
from torch import Tensor

from cl_graft.errors import UserError

NO_COLUMN = -100
"""The target of a row whose (task, class) has no column: ``CrossEntropyLoss``'s ignore index."""


def head_of(model: torch.nn.Module, label: int) -> tuple[str, torch.nn.Module]:
    """The name and module of the head that answers task label ``label`` (a :class:`TaskAdapter`'s task head or
    the shared head)."""
    name = getattr(model, "head", None) or model.task_names[label]
    return name, model.clf.heads[name]


def own_columns(keys: Tensor, places: Tensor, labels: Tensor) -> Tensor:
    """The column ``(B,)`` of each row's own (head place, class), :data:`NO_COLUMN` where there is none.

    Args:
        keys: ``(K, 2)`` each column's head place and class.
        places: ``(B,)`` each row's head place.
        labels: ``(B,)`` each row's class in its head.
    """
    index = {(p, c): i for i, (p, c) in enumerate(keys.tolist())}
    return torch.tensor([index.get(pc, NO_COLUMN) for pc in zip(places.tolist(), labels.tolist())],
                        dtype=torch.long)


class AllColumns:
    """Mixin for the Avalanche template of a frozen-encoder head (first among its bases): while :attr:`routed`
    is set, an evaluated row's target is its own column and :meth:`answer_all` answers it over every column.

    A subclass defines :meth:`column_keys` and :meth:`column_scores` and calls :meth:`answer_all` from its
    ``forward`` while routed. Reads ``model``, ``experience``, ``mb_x``, ``mb_y``, ``mb_task_id`` (the true task
    labels: only to score, never to answer); writes ``mbatch[1]`` of routed evaluation batches.

    Attributes:
        routed: a rule of :class:`ColumnRouting` while a routed evaluation runs, else None.
        task_id: experience → ``[rows whose argmax column is their task's, rows]`` of the last routed evaluation.
    """

    routed: str | None = None
    task_id: dict[int, list[int]] | None = None

    def column_keys(self) -> Tensor:
        """``(K, 2)`` int64: each column's head place (in ``model.clf.heads``) and class."""
        raise NotImplementedError

    def column_scores(self, x: Tensor) -> Tensor:
        """``(B, K)`` scores of every column for ``x`` (B, 2, L), read without the rows' task labels."""
        raise NotImplementedError

    def row_places(self) -> Tensor:
        """``(B,)`` each row's head place, from its task label."""
        heads = list(self.model.clf.heads)
        return torch.tensor([heads.index(head_of(self.model, t)[0]) for t in self.mb_task_id.tolist()])

    def _unpack_minibatch(self) -> None:
        super()._unpack_minibatch()
        if self.routed is not None and not self.is_training:
            y = own_columns(self.column_keys(), self.row_places(), self.mb_y.cpu())
            self.mbatch[1] = y.to(self.mb_y.device)

    def answer_all(self) -> Tensor:
        """The scores ``(B, K)`` of every column for the batch (the argmax is the answer), counting in
        :attr:`task_id` the rows whose argmax column is their own task's.

        Raises:
            UserError: no column learned yet.
        """
        keys = self.column_keys()
        if not len(keys):
            raise UserError("task inference needs at least one learned class")
        scores = self.column_scores(self.mb_x)                                  # (B, K)
        chosen = keys[scores.argmax(1).cpu(), 0]                                # (B,) head place of the answer
        counts = self.task_id.setdefault(self.experience.current_experience, [0, 0])
        counts[0] += int((chosen == self.row_places()).sum())
        counts[1] += len(chosen)
        return scores.to(self.mb_x.device)


class ColumnRouting:
    """Serves test rows without task labels by the argmax over every task's columns (see the module docstring);
    the strategy is an :class:`AllColumns` template."""

    rules = ("features",)
    strict = True                                     # a row counts right only in its own task's column

    def route(self, strategy: AllColumns, rule: str | None) -> None:
        if rule is not None and rule not in self.rules:
            raise UserError(f"the closed-form heads route by {', '.join(self.rules)}, not {rule!r}")
        if rule is not None:
            strategy.task_id = {}
        strategy.routed = rule

    def identified(self, strategy: AllColumns, n_tasks: int) -> list[float] | None:
        """Each task's share of its test rows answered from its own columns in the last routed evaluation; None
        when none ran (the class scenario's single head answers every class without routing)."""
        if not strategy.task_id:
            return None
        return [strategy.task_id[j][0] / strategy.task_id[j][1] for j in range(n_tasks)]
