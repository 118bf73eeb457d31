"""Serving grafted tasks at evaluation: task-aware reconstruction and task-agnostic inference, by patch switching.

After a grafting stream (Panigrahi et al. 2023, §5.2) one model holds every task's region; task ``k`` is served
by the regions of tasks ``≤ k`` with θ_pre on later tasks' elements. :class:`TaskRouter` puts the model into
task ``k``'s state in place (a rollback :class:`~cl_graft.grafting.graft.SkillPatch`: O(|later regions|), well
under a millisecond on MiniLM) and back, never copying the model.

- **Task-aware**: a mini-batch is split by task label; each part runs with its task's state. A task not learned
  yet (not trained, or training now) runs on the model as it is — the current shared weights and its own head,
  untrained or in training, what Avalanche's Naive would score.
- **During training** (periodic evaluation, early stopping): a learned task's state also puts θ_pre back on the
  free elements the training task is changing, so it is exactly that task's model at every moment.
- **Task-agnostic** (beyond the paper; SupSup, Wortsman et al. 2020, https://arxiv.org/abs/2006.14769, route by
  output entropy): every input runs through each of the T learned tasks' models (T forward passes per input,
  plus T patch switches per mini-batch); it goes to the task whose model is the most confident — lowest entropy
  of the softmax (``"entropy"``) or highest top probability (``"max-softmax"``) — and gets that task's logits.
  With ``"features"`` the task is chosen on the input side instead: one forward pass at θ_pre (every region
  rolled back) gives the input of the head (of a single-head model: of its output layer, every task's), the task
  whose feature statistics score it highest (:class:`~.features.FeatureRouter`, a linear discriminant) is
  chosen, and one more pass in that task's state gives the logits (2 forward passes per input instead of T).
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
from avalanche.models.utils import avalanche_forward
from torch import Tensor

from cl_graft.errors import UserError
from cl_graft.grafting.graft import Stash, patch_, restore_

from ..adapter import MASK_VALUE
from ..eval_rows import eval_batches, eval_view
from ..head_inputs import HeadInputs, SeenRows
from .features import FeatureRouter, feature_layer
from .rules import TASK_INFERENCE



class ModelStates(Protocol):
    """What a router reads of the tasks' states (graft's and PackNet's :class:`~..graft.owner_map.OwnerMap`):
    ``tasks`` in the learning order, ``index(task)``, ``rollback_patch(k, free=)`` (θ_pre back on what tasks after
    the ``k``-th own), ``features`` (task → :class:`~.features.FeatureStats`) and ``class_heads``
    (:class:`~.class_heads.ClassHeads` or None)."""

    tasks: list[str]
    features: dict

    def index(self, task: str) -> int | None: ...

    def rollback_patch(self, k: int, *, free: bool = False) -> Any: ...


class TaskModel(Protocol):
    """What a router reads of the model (graft's :class:`~..graft.targets.GraftTarget`): the Avalanche ``model``,
    its ``root`` module, ``task(label)`` / ``label(task)`` and ``heads(label)`` (a task's head tensor names)."""

    model: torch.nn.Module
    root: torch.nn.Module

    def task(self, label: int) -> str: ...

    def label(self, task: str) -> int: ...

    def heads(self, label: int) -> list[str]: ...


def confidence(logits: Tensor, how: str) -> Tensor:
    """Confidence of each row of ``logits`` (B, C): −entropy or the top softmax probability, ``(B,)``."""
    p = torch.softmax(logits.float(), dim=-1)
    if how == "entropy":
        return torch.special.xlogy(p, p).sum(-1)                            # −H(p); masked columns: 0·log 0 = 0
    return p.max(-1).values


def _head_answer(width: int, placed: Tensor) -> Tensor:
    """Logits ``(B, width)`` that answer as the router's head: its scores ``placed`` ``(B, C')`` of each row's chosen
    task's classes (:meth:`~.class_heads.ClassHeads.best`; ``-inf`` elsewhere, written as :data:`MASK_VALUE`, as is
    every column beyond ``C'``). No grafted model runs: one forward pass per row (the features') instead of two."""
    out = torch.full((placed.shape[0], max(width, placed.shape[-1])), MASK_VALUE, device=placed.device)
    out[:, :placed.shape[-1]] = torch.where(torch.isfinite(placed), placed, out[:, :placed.shape[-1]])
    return out


def _pad(parts: list[Tensor], width: int) -> list[Tensor]:
    """Logit blocks padded on the right with :data:`MASK_VALUE` to ``width`` columns."""
    return [torch.nn.functional.pad(p, (0, width - p.shape[-1]), value=MASK_VALUE) for p in parts]


class TaskRouter:
    """Task states of a grafted model, switched in place.

    Args:
        target: the model's :class:`~.targets.GraftTarget`.
        owners: the owner map of the stream (the model holds every learned region).
        training: a task is training now (its free elements hold its training values; see the module docstring).
        seen: θ_pre features of rows routed before, kept across evaluations by whoever builds a router for each
            (the router starts its check, :meth:`~..head_inputs.SeenRows.begin_`).
    """

    def __init__(self, target: TaskModel, owners: ModelStates, *, training: bool = False,
                 seen: SeenRows | None = None) -> None:
        self.target, self.owners, self.training, self.seen = target, owners, training, seen
        if seen is not None:
            seen.begin_()
        self._patches: dict[int, object] = {}
        self._stash: Stash | None = None
        self._state: int | None = None                                   # None: every region (as trained)
        self._layer: torch.nn.Module | None = None
        self._features: FeatureRouter | None = None
        self._columns: int | None = None                                # the output's width (head answers)

    def order(self, label: int) -> int | None:
        """Position of the label's task in the learning order; None for a task not learned yet (the model as
        it is)."""
        return self.owners.index(self.target.task(label))

    def switch_(self, k: int | None) -> None:
        """Puts the model IN PLACE into task ``k``'s state (``None``: back to the model as it is; ``-1``: θ_pre,
        every region rolled back)."""
        if k == self._state:
            return
        if self._stash is not None:
            restore_(self.target.root, self._stash)
            self._stash = None
        self._state = k
        if k is None:
            return
        if k not in self._patches:
            self._patches[k] = self.owners.rollback_patch(k, free=self.training)
        if self._patches[k] is not None:
            self._stash = patch_(self.target.root, self._patches[k])

    def forward(self, x: Tensor, labels: Tensor, order: Tensor | None = None) -> Tensor:
        """Task-aware logits ``(B, C)``: each task's rows through its own state (rows keep their batch order);
        ``order`` ``(B,)``: the rows' positions in the learning order when known (default: from ``labels``)."""
        parts = []
        for t in torch.unique(labels).tolist():
            mask = labels == t
            self.switch_(self.order(int(t)) if order is None else int(order[mask][0]))
            parts.append((mask, avalanche_forward(self.target.model, x[mask], labels[mask])))
        width = max(p.shape[-1] for _, p in parts)
        out = torch.full((x.shape[0], width), MASK_VALUE, dtype=parts[0][1].dtype, device=parts[0][1].device)
        for mask, logits in parts:
            out[mask, :logits.shape[-1]] = logits
        return out

    def check(self, how: str) -> None:
        """Refuses a routing rule the learned tasks cannot serve (before any input runs).

        Raises:
            UserError: no task learned yet, or ``"features"`` with a task that has no feature statistics.
        """
        if not self.owners.tasks:
            raise UserError("task inference needs at least one learned task")
        missing = [t for t in self.owners.tasks if t not in self.owners.features]
        if how == "features" and missing:
            raise UserError(f"task {missing[0]!r} has no feature statistics (not collected: train with "
                            f"task_inference='features' or feature_stats=True; or heads with no module of their "
                            f"own); use task inference entropy or max-softmax")

    def feature_layer(self, x: Tensor) -> torch.nn.Module:
        """The module whose input is the routing features (:func:`~.features.feature_layer`): the first
        learned task's head module, every task's in a multi-head model, or a single-head model's output layer
        (found once, by a forward pass of ``x[:1]``).

        Raises:
            UserError: the first task's head tensors sit in no module of their own (e.g. prompt heads).
        """
        if self._layer is None:
            label = self.target.label(self.owners.tasks[0])
            module = feature_layer(self.target.root, self.target.heads(label),
                                   lambda: avalanche_forward(self.target.model, x[:1], label))
            if module is None:
                raise UserError(f"task {self.owners.tasks[0]!r} has no head module of its own; feature routing "
                                f"needs one")
            self._layer = module
        return self._layer

    def features(self, x: Tensor) -> Tensor:
        """Features ``(B, d)`` of ``x`` at θ_pre (the space of the tasks' feature statistics): the input of
        :meth:`feature_layer` (those of rows ``seen`` before read back, not computed)."""
        self.switch_(-1)
        layer, label = self.feature_layer(x), self.target.label(self.owners.tasks[0])

        def computed(rows: Tensor) -> Tensor:
            with HeadInputs(layer) as rec:
                avalanche_forward(self.target.model, rows, label)
            return rec.take(rows.shape[0])

        return computed(x) if self.seen is None else self.seen.get(x, computed)

    def infer(self, x: Tensor, how: str) -> tuple[Tensor, Tensor]:
        """Task-agnostic logits ``(B, C)`` and the chosen task labels ``(B,)`` (T forward passes per input; 2 for
        ``"features"``).

        Raises:
            UserError: see :meth:`check`.
        """
        self.check(how)
        labels = [self.target.label(t) for t in self.owners.tasks]
        if how == "features":
            feats = self.features(x)
            heads = getattr(self.owners, "class_heads", None)
            if heads is None:
                pick, placed = self.lda().scores(feats).argmax(0), None                 # (B,) task positions
            else:
                name, answer = heads.choice()
                pick, _, placed = heads.best(name, feats, self.lda())
                placed = placed if answer == "head" else None
            pick = pick.to(x.device)
            chosen = torch.tensor(labels, device=pick.device)[pick]
            if placed is None:
                return self.forward(x, chosen, pick), chosen
            return _head_answer(self._width(x, labels[0]), placed.to(x.device)), chosen
        outs, scores = [], []
        for k, label in enumerate(labels):
            self.switch_(k)
            logits = avalanche_forward(self.target.model, x, label)          # (B, C_k)
            outs.append(logits)
            scores.append(confidence(logits, how))
        pick = torch.stack(scores).argmax(0)                                 # (B,) position among the tasks
        stacked = torch.stack(_pad(outs, max(o.shape[-1] for o in outs)))   # (T, B, C)
        rows = torch.arange(x.shape[0], device=pick.device)
        chosen = torch.tensor(labels, device=pick.device)[pick]
        return stacked[pick, rows], chosen

    def foreign_answers(self, logits: Tensor, chosen: Tensor, own: Tensor) -> Tensor:
        """Routed ``logits`` ``(B, C)`` scored against the rows' own task labels ``own`` ``(B,)`` (known in
        evaluation, never used to route): a row sent to another task (``chosen`` ``(B,)``) whose head is not its
        own task's answers in that task's classes, which are not its own, so it gets one more column, "another
        task's answer", as its top score (``(B, C + 1)``; the column stays :data:`MASK_VALUE` for every other row).
        Without it Avalanche's accuracy would count a wrong task's answer right whenever its class index equals the
        row's label (every task list numbers its classes from 0). Tasks that share one head (the class scenario's
        one label space) answer in the row's own classes: nothing changes for them."""
        heads = {}
        for t in torch.unique(torch.cat([chosen, own])).tolist():
            heads[t] = tuple(self.target.heads(int(t)))
        foreign = torch.tensor([c != o and heads[c] != heads[o] for c, o in zip(chosen.tolist(), own.tolist())],
                               dtype=torch.bool, device=logits.device)
        if not bool(foreign.any()):
            return logits
        extra = torch.full((logits.shape[0], 1), MASK_VALUE, dtype=logits.dtype, device=logits.device)
        extra[foreign] = logits.max() + 1
        return torch.cat([logits, extra], dim=1)

    def _width(self, x: Tensor, label: int) -> int:
        """Columns of the model's output for task ``label`` (one row of ``x`` run once per router, no gradients):
        what the head's answer must span so that any row's label indexes it."""
        if self._columns is None:
            with torch.no_grad():
                self._columns = avalanche_forward(self.target.model, x[:1], label).shape[-1]
        return self._columns

    def lda(self) -> FeatureRouter | None:
        """The linear discriminant of the learned tasks' feature statistics (None when a task has none; built
        once)."""
        if self._features is None and all(t in self.owners.features for t in self.owners.tasks):
            self._features = FeatureRouter([self.owners.features[t] for t in self.owners.tasks])
        return self._features

    @torch.no_grad()
    def answers(self, dataset, k: int, rows: Tensor, *, device) -> Tensor:
        """The class ``(n,)`` task position ``k``'s model gives the rows ``rows`` ``(n,)`` of ``dataset`` (an
        Avalanche dataset; eval mode, the model's mode kept)."""
        model = self.target.model
        was_training = model.training
        model.eval()
        self.switch_(k)
        label = self.target.label(self.owners.tasks[k])
        out = torch.empty(len(rows), dtype=torch.long)
        try:
            for pos, (x, *_) in eval_batches(eval_view(dataset), rows.tolist()):
                out[pos] = avalanche_forward(model, x.to(device), label).argmax(-1).cpu()
        finally:
            model.train(was_training)
        return out

    def close_(self) -> None:
        """Back to every region and drops the cached patches (the owner map may change after this)."""
        self.switch_(None)
        self._patches, self._features, self._columns = {}, None, None
