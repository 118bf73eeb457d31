"""What the closed-form baselines (``slda``, ``ranpac``) share: a template that trains nothing and answers from a
head of :mod:`cl_graft.heads` fed θ_pre's sentence features. It declares no entry.

Each experience is one pass over its training rows after the (empty) training epoch, as ``ncm``'s: the pooled
sentence embedding the run's head would read (:class:`~..head_inputs.HeadInputs`), normalised to unit length,
goes into the head's sums with the row's *column*: its class in its head, numbered as classes arrive
(:class:`Columns`; in the task-incremental scenario each task's classes are columns of their own, the head
and its covariance or Gram matrix shared by all). In evaluation the template's output is the head's scores
for the columns of the rows' head (other columns below every score), so Avalanche's metrics and the runner read
it as any model's logits; routed without task labels (``--task-inference features``) it is the scores of every
column, each row's target its own (:mod:`.all_columns`). The encoder and its heads are never changed, so a row's
features are computed once (:class:`~..head_inputs.SeenRows`; Avalanche evaluates every test row after every
experience).

Text streams only: a digits model is trained from scratch, so θ_pre's features would be a random network's
(the refusal of the entry's :func:`.common.text_rows` check).

State (``--resume``, :class:`HeadState`): after every experience the head's sums, its columns and the
experiences it holds are written to ``state/head.safetensors`` (atomically); a resumed run reads them back
and continues with the next experience.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from cl_graft.errors import UserError
from cl_graft.files import read_safetensors, write_safetensors

from ..head_inputs import HeadInputs, SeenRows
from ..interface.entry import BuildContext, SavedState
from .all_columns import AllColumns, head_of

HEAD_FILE = "head.safetensors"


class Columns:
    """Each (head, class) seen, numbered in order of arrival: the columns of a closed-form head.

    Args:
        heads: the classifier's head names (a key stores its head's place among them).
        keys: ``(head place, class)`` of each column so far.
    """

    def __init__(self, *, heads: list[str], keys: list[tuple[int, int]] | None = None) -> None:
        self.heads = heads
        self.index = {key: i for i, key in enumerate(keys or [])}

    def __len__(self) -> int:
        return len(self.index)

    def of_(self, head: str, labels: Tensor) -> Tensor:
        """The columns ``(N,)`` of ``labels`` (N,) of ``head``, numbering the classes not seen before."""
        place = self.heads.index(head)
        return torch.tensor([self.index.setdefault((place, c), len(self.index)) for c in labels.tolist()],
                            dtype=torch.long)

    def seen(self, head: str) -> tuple[list[int], list[int]]:
        """The classes of ``head`` seen so far and their columns."""
        place = self.heads.index(head)
        pairs = [(c, i) for (p, c), i in self.index.items() if p == place]
        return [c for c, _ in pairs], [i for _, i in pairs]

    def tensor(self) -> Tensor:
        """``(K, 2)`` int64: each column's head place and class."""
        return torch.tensor(list(self.index), dtype=torch.int64).reshape(-1, 2)


def features(model: torch.nn.Module, x: Tensor, labels: Tensor, seen: SeenRows | None = None, *, unit: bool = True
             ) -> list[tuple[str, Tensor, Tensor]]:
    """θ_pre's sentence features of ``x`` (B, 2, L) with task labels ``labels`` (B,), unit-length unless ``unit``
    is False (then as the head reads them): per head of the batch, ``(head name, row mask (B,), features (n, d))``;
    those of rows ``seen`` before read back."""
    from avalanche.models.utils import avalanche_forward

    out = []
    for label in torch.unique(labels).tolist():
        rows = labels == label
        name, module = head_of(model, label)

        def computed(part: Tensor, label: int = label, module: torch.nn.Module = module) -> Tensor:
            with HeadInputs(module) as rec:
                avalanche_forward(model, part, torch.full((len(part),), label, dtype=torch.long, device=part.device))
            return rec.take(len(part))

        feats = computed(x[rows]) if seen is None else seen.get(x[rows], computed, tag=name)
        out.append((name, rows, torch.nn.functional.normalize(feats, dim=-1) if unit else feats))
    return out


class SeenFeatures:
    """Mixin for a template that evaluates on θ_pre's features: ``seen`` (:class:`~..head_inputs.SeenRows`) keeps
    the features of rows evaluated before, checked again at the start of each evaluation."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen = SeenRows()

    def _before_eval(self, **kwargs):
        self.seen.begin_()
        super()._before_eval(**kwargs)


def template(ctx: BuildContext, name: str, head: Any):
    """The template of closed-form baseline ``name`` (see the module docstring) over ``head`` (a head of
    :mod:`cl_graft.heads`, empty or resumed), restoring its columns from ``ctx.resumed``."""
    from avalanche.training import Naive

    from ..adapter import MASK_VALUE

    heads = list(ctx.model.clf.heads)
    if ctx.resumed is None:
        columns, experiences = Columns(heads=heads), 0
    else:
        keys = [(int(p), int(c)) for p, c in ctx.resumed["columns"].tolist()]
        columns, experiences = Columns(heads=heads, keys=keys), int(ctx.resumed["experiences"])

    class ClosedForm(SeenFeatures, AllColumns, Naive):
        def __init__(self, **kwargs) -> None:
            super().__init__(**kwargs)
            self.head, self.columns, self.experiences = head, columns, experiences

        def column_keys(self) -> Tensor:
            return self.columns.tensor()

        def column_scores(self, x: Tensor) -> Tensor:
            (_, _, feats), = features(self.model, x, torch.zeros(len(x), dtype=torch.long, device=x.device), self.seen)
            return self.head.scores(feats)

        def training_epoch(self, **kwargs):
            """No optimizer step: the head's sums grow once per experience, after it."""

        @torch.no_grad()
        def _after_training_exp(self, **kwargs):
            self.model.eval()
            for self.mbatch in self.dataloader:
                self._unpack_minibatch()
                for head_name, rows, feats in features(self.model, self.mb_x, self.mb_task_id):
                    self.head.add_(feats, self.columns.of_(head_name, self.mb_y[rows]))
            self.experiences += 1
            super()._after_training_exp(**kwargs)

        @torch.no_grad()
        def forward(self):
            """Training: the model's logits (never read); evaluation: the head's scores (B, C), routed: every
            column's (B, K)."""
            if self.is_training:
                return super().forward()
            if self.routed is not None:
                return self.answer_all()
            out = None
            for head_name, rows, feats in features(self.model, self.mb_x, self.mb_task_id, self.seen):
                classes, cols = self.columns.seen(head_name)
                scores = self.head.scores(feats)[:, cols] if cols else torch.zeros(len(feats), 0)
                width = self.model.clf.tasks[head_name].num_labels
                below = min(MASK_VALUE, float(scores.min()) - 1) if cols else MASK_VALUE
                part = torch.full((len(feats), width), below)
                part[:, classes] = scores
                if out is None:
                    out = torch.full((len(self.mb_x), output_width(self.model)), MASK_VALUE)
                out[rows.cpu(), :width] = part
            return out.to(self.mb_x.device)

    return ClosedForm(**ctx.template, plugins=ctx.plugins)


def output_width(model: torch.nn.Module) -> int:
    """Columns of the model's output: its widest task (a :class:`TaskAdapter`) or its head's classes."""
    return getattr(model, "max_class_label", None) or model.clf.tasks[model.head].num_labels


def kept(strategy, model) -> tuple[int, dict]:
    """The head's sums and solution, by part (the encoder and its heads are θ_pre's, unchanged)."""
    parts = strategy.head.nbytes()
    return sum(parts.values()), {"kept": parts, **strategy.seen.info()}


class HeadState:
    """A closed-form baseline's state between experiences (see the module docstring); ``load_`` hands the
    builder the file's tensors (the head's, ``columns`` and ``experiences``)."""

    def save(self, strategy, directory: Path) -> dict:
        directory.mkdir(parents=True, exist_ok=True)
        write_safetensors(directory / HEAD_FILE, {**strategy.head.tensors(), "columns": strategy.columns.tensor(),
                                                  "experiences": torch.tensor(strategy.experiences)})
        return {"experiences": strategy.experiences}

    def load_(self, directory: Path, model: torch.nn.Module, *, committed: int, record: dict) -> SavedState:
        """The saved tensors (``model`` is not changed: the head is the state)."""
        path = directory / HEAD_FILE
        tensors = read_safetensors(path)
        for key, shape in (("columns", 2), ("experiences", 0)):
            if key not in tensors or tensors[key].dim() != shape or tensors[key].is_floating_point():
                raise UserError(f"{path}: no integer tensor {key!r} of {shape} dimensions")
        if record.get("experiences") != committed:
            raise UserError(f"{directory}: the progress file's field 'state.experiences' is "
                            f"{record.get('experiences')!r}, its field 'rows' commits {committed}")
        return SavedState(tensors, int(tensors["experiences"]))


def feature_width(ctx: BuildContext, name: str) -> int:
    """The width ``d`` of the sentence features the run's linear heads read.

    Raises:
        UserError: a classifier without linear heads (one line naming ``name``).
    """
    clf = ctx.model.clf
    if clf.head_kind != "linear":
        raise UserError(f"{name} reads the input of a linear head; this classifier's heads are {clf.head_kind!r}")
    return clf.backbone.config.hidden_size
