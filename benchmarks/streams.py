"""Task names → an Avalanche task-incremental benchmark of text classification (one experience per task).

Continual learning with grafting (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600) runs on
a stream such as ``qnli → agnews → sst2``. Each experience holds one task's rows, pre-tokenised with the
model's own ``encode`` (so pair tasks, prompts and heads are handled as in single-task fine-tuning), task
label ``i`` for the ``i``-th task, and a collate function that pads to the model's ``max_length`` and returns
Avalanche's ``[x, y, t]`` with ``x`` a LongTensor ``(B, 2, L)`` (input ids and attention mask stacked). One width
for every batch lets batches drawn by different loaders be concatenated (GEM's memory, ER-ACE's replay batches);
the models cut each batch to its longest row, so the padding costs no compute.
A tensor input and task labels are what Avalanche's stock strategies (Naive, EWC, LwF, Replay, Cumulative,
JointTraining) need, so they run on these benchmarks unchanged.

Items are plain dicts (the row's text fields, ``label``, ``input_ids``, and the ``targets_task_labels`` key
Avalanche adds), so code that needs the rows back (region finding) reads them with :func:`experience_rows`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset

from cl_graft.errors import UserError
from cl_graft.task import TaskRows
from cl_graft.training.models import TextClassifier

from .tasks import get_task

_ENCODE_CHUNK = 256


def parse_stream(stream: str | Sequence[str], data_dir=None) -> list[str]:
    """Validated task names of a stream given as ``"qnli,agnews,sst2"`` or a list.

    Raises:
        UserError: an empty stream or item, a repeated task, or an unknown one (one line each).
    """
    parts = stream.split(",") if isinstance(stream, str) else stream
    names = [str(s).strip() for s in parts]
    if not any(names):
        raise UserError("--stream is empty; give task names such as qnli,agnews,sst2")
    if not all(names):
        raise UserError(f"--stream {','.join(names)!r} has an empty item")
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise UserError(f"task {n!r} appears twice in --stream; each task is one experience")
        seen.add(n)
        get_task(n, data_dir)
    if len(names) > 254:
        raise UserError(f"a stream holds at most 254 tasks, got {len(names)}")
    return names


class _Rows(Dataset):
    """A list of dict rows as a map-style dataset (items are shallow copies, so callers may add keys)."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return dict(self.rows[i])


class TextCollate:
    """Dict rows with ``input_ids`` → ``[x, y, t]``: ``x`` (B, 2, L) long, right-padded to ``width`` (the
    model's ``max_length``, which tokenisation never exceeds)."""

    def __init__(self, pad_id: int, width: int) -> None:
        self.pad_id, self.width = pad_id, width

    def length(self, row: dict) -> int:
        """A row's tokens (the model cuts a batch to its longest row, so passes batch rows of similar length)."""
        return len(row["input_ids"])

    def __call__(self, rows: list[dict]) -> list[torch.Tensor]:
        width = max(self.width, *(len(r["input_ids"]) for r in rows))
        x = torch.zeros((len(rows), 2, width), dtype=torch.long)              # (B, 2, L)
        x[:, 0] = self.pad_id
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            x[i, 0, :n] = torch.tensor(r["input_ids"], dtype=torch.long)
            x[i, 1, :n] = 1
        y = torch.tensor([r["label"] for r in rows], dtype=torch.long)        # (B,)
        t = torch.tensor([r["targets_task_labels"] for r in rows], dtype=torch.long)  # (B,)
        return [x, y, t]


def tokenize_rows(model: TextClassifier, rows: list[dict], task: str) -> list[dict]:
    """Copies of ``rows`` with ``input_ids`` (unpadded list of ints) from ``model.encode``."""
    out = []
    for s in range(0, len(rows), _ENCODE_CHUNK):
        chunk = rows[s:s + _ENCODE_CHUNK]
        enc = model.encode(chunk, task)
        lengths = enc["attention_mask"].sum(1).tolist()
        for row, ids, n in zip(chunk, enc["input_ids"].tolist(), lengths, strict=True):
            out.append({**row, "input_ids": ids[:n]})
    return out


def _dataset(rows: list[dict], task_label: int, collate: TextCollate):
    from avalanche.benchmarks.utils import DataAttribute, TaskAwareSupervisedClassificationDataset
    from avalanche.benchmarks.utils.data_attribute import TaskLabels
    from avalanche.benchmarks.utils.flat_data import ConstantSequence

    labels = [r["label"] for r in rows]
    return TaskAwareSupervisedClassificationDataset(
        [_Rows(rows)], data_attributes=[DataAttribute(labels, "targets"),
                                        TaskLabels(ConstantSequence(task_label, len(rows)))],
        collate_fn=collate)


def make_benchmark(tasks: Sequence[TaskRows], model: TextClassifier, *, head: str | None = None):
    """A task-incremental Avalanche benchmark: experience ``i`` = task ``i`` with task label ``i``.

    Args:
        tasks: the stream, in order; every task must already be registered on ``model`` (its head), unless
            ``head`` is given.
        model: the classifier whose ``encode`` tokenises the rows.
        head: the one task of ``model`` whose head answers every experience (a class-incremental stream: the
            rows keep that task's label ids); None: each experience has its own head.

    Returns:
        A ``CLScenario`` with ``train_stream`` and ``test_stream`` (and ``valid_stream`` when every task has
        dev rows), task labels and classes timeline, ready for any ``SupervisedTemplate``.
    """
    from avalanche.benchmarks.scenarios import benchmark_from_datasets, with_classes_timeline
    from avalanche.benchmarks.scenarios.task_aware import with_task_labels

    if not tasks:
        raise UserError("the stream is empty")
    for t in tasks:
        if (head or t.spec.name) not in model.tasks:
            raise UserError(f"model has no head for task {head or t.spec.name!r}; call add_task first")
        if not t.train or not t.test:
            raise UserError(f"task {t.spec.name!r} has no {'training' if not t.train else 'test'} rows")
    collate = TextCollate(model.tokenizer.pad_token_id, model.max_length)
    splits = ("train", "test", "valid") if all(t.dev for t in tasks) else ("train", "test")
    streams: dict[str, list] = {s: [] for s in splits}
    for i, t in enumerate(tasks):
        for split, rows in zip(splits, (t.train, t.test, t.dev)):
            streams[split].append(_dataset(tokenize_rows(model, rows, head or t.spec.name), i, collate))
    bm = benchmark_from_datasets(**streams)
    return with_classes_timeline(with_task_labels(bm))


@dataclass(frozen=True)
class Stream:
    """One text stream: each experience's rows and the Avalanche benchmark made from them (experience ``i`` =
    ``splits[i]``, task label ``i``).

    Attributes:
        splits: each experience's train, dev and test rows, in stream order (its task's name names it).
        benchmark: :func:`make_benchmark` of ``splits`` (``train_stream``, ``test_stream``, ``valid_stream``
            when every task has dev rows).
        name: the ``--stream`` spec it was made from.
        scenario: ``task`` (a head per experience, the task label at test) or ``class`` (one head, ``head``,
            over every class; no task label at test).
        head: in the class scenario, the classifier's one task whose head answers every experience.
    """

    splits: tuple[TaskRows, ...]
    benchmark: Any
    name: str = ""
    scenario: str = "task"
    head: str | None = None

    @classmethod
    def make(cls, splits: Sequence[TaskRows], model: TextClassifier, *, name: str = "", scenario: str = "task",
             head: str | None = None) -> Stream:
        """The stream of ``splits``, tokenised by ``model`` (every task, or ``head``, already registered on it)."""
        return cls(tuple(splits), make_benchmark(splits, model, head=head), name or ",".join(
            s.spec.name for s in splits), scenario, head)

    @property
    def tasks(self) -> list[str]:
        """Task names in stream order."""
        return [s.spec.name for s in self.splits]


def experience_rows(dataset) -> list[dict]:
    """The dict rows of an experience's dataset (or any dataset of dict items), in order."""
    return [dataset[i] for i in range(len(dataset))]
