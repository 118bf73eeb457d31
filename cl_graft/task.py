"""What the model code needs to know about a text-classification task.

A :class:`TaskSpec` is pure description; where the rows come from (local JSONL or the Hugging Face Hub) is the
business of ``cl_graft.benchmarks``. Rows are plain dicts: ``{"text": str, "label": int}`` for single-sentence
tasks, ``{"text_a": str, "text_b": str, "label": int}`` for sentence pairs. :class:`TaskRows` is the one
container of a task's sampled rows that every command, experiment and stream takes.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import UserError

METRICS = ("accuracy", "f1")
SCENARIOS = {"task": "task-incremental", "class": "class-incremental"}
"""The scenarios of a continual run (``cl-graft run --scenario``), short name → what it is called: ``task``, every
strategy gets the task label at test; ``class``, none does. :data:`SCENARIO_MEANING` says what its accuracies
mean."""
SCENARIO_MEANING = {"task": "every strategy gets the task label at test",
                    "class": "no strategy gets a task label at test (one that keeps a model per task routes each "
                             "row to one of them by its own rule: `cl-graft run --help`)"}
MASK = "{mask}"
_NAME = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class TaskSpec:
    """A classification task.

    Attributes:
        name: short id, e.g. ``"sst2"``.
        labels: label names in index order (``row["label"]`` indexes this).
        pair: True for sentence-pair tasks (``text_a``/``text_b``), False for ``text``.
        metric: headline metric, ``"accuracy"`` or ``"f1"`` (binary F1 of label 1).
        template: prompt for masked-LM heads; placeholders ``{x}`` (or ``{a}``, ``{b}``) and ``{mask}``.
        label_words: one word per label, scored at the ``{mask}`` position by prompt-based heads.
        causal_template: prompt for causal-LM heads; must end with ``{mask}`` (the next-token slot).
    """

    name: str
    labels: tuple[str, ...]
    pair: bool = False
    metric: str = "accuracy"
    template: str = "{x} It was {mask} ."
    label_words: tuple[str, ...] = ()
    causal_template: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise UserError(f"task name {self.name!r}: use letters, digits, '_' and '-' only (it names a head)")
        if len(self.labels) < 2:
            raise UserError(f"task {self.name!r} needs at least two labels, got {list(self.labels)}")
        if self.metric not in METRICS:
            raise UserError(f"task {self.name!r}: metric must be one of {METRICS}, got {self.metric!r}")
        if self.label_words and len(self.label_words) != len(self.labels):
            raise UserError(f"task {self.name!r}: {len(self.label_words)} label words for {len(self.labels)} labels")
        if MASK not in self.template:
            raise UserError(f"task {self.name!r}: template {self.template!r} has no {MASK}")
        if self.causal_template and not self.causal_template.rstrip().endswith(MASK):
            raise UserError(f"task {self.name!r}: causal template must end with {MASK}")

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @property
    def words(self) -> tuple[str, ...]:
        """Label words, defaulting to the label names themselves."""
        return self.label_words or self.labels

    @property
    def prompt_for_causal(self) -> str:
        """The causal-LM prompt: the explicit one, else the masked-LM template with the mask moved to the end."""
        if self.causal_template:
            return self.causal_template
        return " ".join(self.template.replace(MASK, "").split()) + " " + MASK

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["labels"] = list(self.labels)
        out["label_words"] = list(self.label_words)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TaskSpec:
        d = dict(d)
        d["labels"] = tuple(d["labels"])
        d["label_words"] = tuple(d.get("label_words", ()))
        return cls(**d)


@dataclass(frozen=True)
class TaskRows:
    """A task with its rows: ``train`` (k per class), ``dev`` (checkpoint and region selection, never test
    rows) and ``test`` (capped)."""

    spec: TaskSpec
    train: list[dict]
    dev: list[dict]
    test: list[dict]


OOD_ALIASES = {"contradiction": "not_entailment"}
"""OOD label names that mean an in-distribution label (QNLI → MNLI/SNLI, paper §4.2); others are dropped."""


def ood_rows(rows: list[dict], ood: TaskSpec, spec: TaskSpec) -> list[dict]:
    """``rows`` of task ``ood`` relabelled into ``spec``'s label space (same name or :data:`OOD_ALIASES`).

    Rows whose label has no counterpart (e.g. MNLI's neutral for QNLI) are left out.

    Raises:
        UserError: different input kinds (pair vs single) or no shared label at all.
    """
    if ood.pair != spec.pair:
        kinds = {True: "sentence pairs", False: "single sentences"}
        raise UserError(f"OOD task {ood.name!r} has {kinds[ood.pair]}, {spec.name!r} has {kinds[spec.pair]}")
    index = {}
    for i, name in enumerate(ood.labels):
        target = name if name in spec.labels else OOD_ALIASES.get(name)
        if target in spec.labels:
            index[i] = spec.labels.index(target)
    if not index:
        raise UserError(f"OOD task {ood.name!r}: none of its labels {list(ood.labels)} is a label of {spec.name!r}")
    return [{**r, "label": index[r["label"]]} for r in rows if r["label"] in index]
