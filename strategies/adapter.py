"""A :class:`~cl_graft.training.models.TextClassifier` as an Avalanche model: a ``MultiTaskModule`` with one linear
head per task (:class:`TaskAdapter`), or one head over every class of a class-incremental stream (:class:`SharedHead`).

Avalanche's templates, stock strategies (Naive, EWC, LwF, Replay, Cumulative, JointTraining) and metrics pass
a tensor ``x`` and the per-sample task labels to the model. :class:`TaskAdapter` takes ``x`` = LongTensor
``(B, 2, L)`` (input ids and attention mask stacked, as built by ``cl_graft.benchmarks.streams``) and routes
each sample to its task's head: task label ``i`` = ``task_names[i]``. Mixed-task mini-batches (replay, joint
training) are split by task; each part is trimmed to its own longest row, so a sample's logits do not depend
on the other tasks in its batch. Outputs have one column per label of the widest task; a narrower task's
extra columns hold :data:`MASK_VALUE` (softmax weight 0, never the argmax).

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600) use QNLI (2 labels), AG News (4) and SST-2 (2).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from avalanche.models import DynamicModule, MultiTaskModule
from torch import Tensor

from cl_graft.errors import UserError
from cl_graft.training.models import TextClassifier

MASK_VALUE = -1000.0
"""Logit of the columns a task does not have (Avalanche's ``MultiHeadClassifier`` uses the same value)."""


class TaskAdapter(MultiTaskModule):
    """Avalanche-facing wrapper: ``forward(x (B, 2, L), task_labels (B,)) → logits (B, C_max)``.

    Args:
        clf: the classifier; every name in ``task_names`` must be registered on it (``add_task``).
        task_names: task label ``i`` ↦ ``task_names[i]``.

    Attributes:
        clf: the wrapped classifier (parameter names inside it are ``clf.<name>``).
        task_names: as given.
    """

    def __init__(self, clf: TextClassifier, task_names: Sequence[str]) -> None:
        super().__init__()
        missing = [t for t in task_names if t not in clf.tasks]
        if not task_names or missing:
            raise UserError(f"classifier has no head for task {missing[0]!r}" if missing else "no tasks given")
        self.clf = clf
        self.task_names = list(task_names)
        self.max_class_label = max(clf.tasks[t].num_labels for t in self.task_names)

    def adaptation(self, experience) -> None:
        """Records the experience's task labels; the output width is fixed by the task list (no growth)."""
        if self.training:
            self.known_train_tasks_labels |= set(experience.task_labels)

    def forward(self, x: Tensor, task_labels: Tensor | int | None) -> Tensor | dict[int, Tensor]:
        """Logits (B, C_max); columns beyond a task's labels are :data:`MASK_VALUE`. With ``task_labels=None``
        (LwF's distillation): ``{label: (B, C_label)}`` for every task trained so far."""
        if task_labels is None:
            return self.forward_all_tasks(x)
        if isinstance(task_labels, int):
            task_labels = torch.full((x.shape[0],), task_labels, dtype=torch.long, device=x.device)
        parts = [(int(t), task_labels == t) for t in torch.unique(task_labels)]
        outs = [(mask, self.forward_single_task(x[mask], t)) for t, mask in parts]
        out = torch.full((x.shape[0], self.max_class_label), MASK_VALUE, dtype=outs[0][1].dtype,
                         device=x.device)                                    # (B, C_max)
        for mask, logits in outs:
            out[mask, :logits.shape[1]] = logits
        return out

    def forward_single_task(self, x: Tensor, task_label: int) -> Tensor:
        """Logits (B, C_task) of one task for ``x`` (B, 2, L)."""
        if not 0 <= task_label < len(self.task_names):
            raise UserError(f"task label {task_label} outside the adapter's {len(self.task_names)} tasks")
        width = int(x[:, 1].sum(1).max())                                    # longest row of this task
        ids, mask = x[:, 0, :width], x[:, 1, :width]                         # (B, L'), (B, L')
        return self.clf(ids, mask, task=self.task_names[task_label])



class SharedHead(DynamicModule):
    """One head of a classifier answering every experience, with no task label (the class-incremental scenario of
    a split text stream): ``forward(x (B, 2, L)) → logits (B, C)`` over the head's C classes. A fixed head: it
    trains over all C classes (an experience pushes every other class down, as a single-head model's output layer
    does), and in evaluation the classes no training experience has shown yet hold :data:`MASK_VALUE` (masked
    to the classes seen). Masking in training too, as Avalanche's ``IncrementalClassifier`` does, would leave an
    earlier task's model unable to rank its classes above those it never saw (a grafted task's state).

    Args:
        clf: the classifier; ``head`` must be registered on it.
        task_names: the stream's experiences, in order (experience ``i`` has task label ``i``; they name the
            experiences, they pick no head).
        head: the task of ``clf`` whose head answers.

    Attributes:
        clf, task_names, head: as given.
        seen: ``(C,)`` bool buffer, the classes of the experiences trained so far.
    """

    def __init__(self, clf: TextClassifier, task_names: Sequence[str], *, head: str) -> None:
        super().__init__()
        if head not in clf.tasks:
            raise UserError(f"classifier has no head for task {head!r}")
        self.clf, self.task_names, self.head = clf, list(task_names), head
        self.register_buffer("seen", torch.zeros(clf.tasks[head].num_labels, dtype=torch.bool,
                                                 device=next(clf.parameters()).device))

    def adaptation(self, experience) -> None:
        """Adds a training experience's classes to ``seen``."""
        if self.training:
            self.seen[list(experience.classes_in_this_experience)] = True

    def forward(self, x: Tensor) -> Tensor:
        """Logits (B, C) of ``x`` (B, 2, L); in evaluation, unseen classes' columns are :data:`MASK_VALUE`."""
        width = int(x[:, 1].sum(1).max())
        logits = self.clf(x[:, 0, :width], x[:, 1, :width], task=self.head)
        return logits if self.training else logits.masked_fill(~self.seen, MASK_VALUE)
