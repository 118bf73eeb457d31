"""Closed-form heads over θ_pre's features as routers, and the rule that answers a routed row, chosen on dev rows.

Measured in issue 54 (``benchmarks/results/class_text/``): in the class scenario graft's accuracy is its router's,
and RanPAC's head (McDonnell et al. 2023: a fixed random projection, a ReLU, ridge regression from accumulated Gram
sums; :class:`cl_graft.heads.RandomProjectionRidge`) over the same frozen features routes more rows to their own
experience than the class-level linear discriminant graft kept (:class:`~.features.FeatureRouter`): 93.2 against
87.9% on split-banking77:7, 97.2 against 95.1% on split-clinc150:15 (seed 0, a probe of saved runs). Neither wins
everywhere, so :class:`ClassHeads` keeps both and lets dev rows choose:

- **Sums.** Every training row of a learned task (never its dev rows) adds its unit-length θ_pre feature to the
  RanPAC head's Gram sums under its column ``(task position, class)``; the discriminant's class means live in the
  tasks' :class:`~.features.FeatureStats` as before.
- **Candidates** (:func:`candidates`): ``lda`` (the discriminant) and ``ranpac:R`` for each ridge of :data:`RIDGES`
  (relative to the Gram matrix's mean eigenvalue; solved from the same sums). ``router="lda"`` or ``"ranpac"``
  restricts them; ``"auto"`` on a model whose graftable weights are fewer than the Gram matrix's floats is
  ``"lda"`` (:func:`sized_router`).
- **Tallies** (:meth:`ClassHeads.judge_`): when a task has been learned, each candidate scores that task's dev
  rows against every task learned so far: rows sent to their own task, rows whose best column is their class (the
  head's own answer) and rows the grafted model of the chosen task answers right (the routed answer). The tallies
  add up over the stream (each experience judged when it ends, against the tasks learned by then: later tasks
  never compete for an earlier task's dev rows, so the tallies are a prequential estimate).
- **Choice** (:meth:`ClassHeads.choice`): the router is the candidate that sent the most dev rows to their own
  task (ties: the first in :func:`candidates`' order); the answer is the head's class when that router's head
  answered more dev rows right than the grafted models did (``answer="auto"``), else the grafted model's
  (``"routed"``; ``"head"`` always the head's).

Dev rows come from the experience's ``valid_stream`` rows or the size search's held-out split; without any, nothing
is tallied and ``lda`` routes with the routed answer (graft's rule before this module). Serving a row costs one
forward pass at θ_pre (its features) and, for the routed answer, one more in the chosen task's state; the head's
answer needs no second pass (``passes_per_row`` in :meth:`ClassHeads.record`). Cost: one forward pass at
θ_pre over every training row (instead of at most 512 per dataset) and one over the dev rows, plus the dev rows'
grafted answers; a solve of the ``WIDTH × WIDTH`` Gram system per ridge when a task ends. Bytes: the Gram matrix and
the class sums (``WIDTH²`` + ``WIDTH·K`` float32; the projection is drawn again from :data:`PROJECTION_SEED`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from cl_graft.errors import UserError
from cl_graft.heads import RandomProjectionRidge

from .features import FeatureRouter

WIDTH = 2048
"""The projection's width (RanPAC's M; ``ranpac``'s default)."""
RIDGES = (1e-1, 1e-2, 1e-3)
"""The ridges tried, relative to the Gram matrix's mean eigenvalue."""
PROJECTION_SEED = 0
ROUTERS = ("auto", "lda", "ranpac")
ANSWERS = ("auto", "routed", "head")
COUNTS = ("task", "head", "routed", "rows")
"""What a candidate's tally counts: rows sent to their task, answered right by the head, by the routed grafted
model, and rows judged."""


def candidates(router: str) -> tuple[str, ...]:
    """The candidate routers ``router`` allows (see the module docstring).

    Raises:
        UserError: ``router`` is not one of :data:`ROUTERS`.
    """
    if router not in ROUTERS:
        raise UserError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    ranpac = tuple(f"ranpac:{r:g}" for r in RIDGES)
    return {"auto": ("lda", *ranpac), "lda": ("lda",), "ranpac": ranpac}[router]


def sized_router(router: str, graftable: int) -> str:
    """The router setting a model of ``graftable`` elements gets: ``"auto"`` keeps RanPAC's candidates only when
    their Gram matrix (``WIDTH²`` = 4.2 M floats) is no larger than the graftable weights (all-MiniLM-L6-v2's 10.7 M
    graftable elements keep them; a digits MLP of 70 k, whose θ_pre features are a random network's anyway, routes
    by ``lda`` instead of keeping 17 MB of sums); other settings are kept as given."""
    return "lda" if router == "auto" and WIDTH * WIDTH > graftable else router


def check_answer(answer: str) -> str:
    """``answer`` when it is one of :data:`ANSWERS`.

    Raises:
        UserError: it is not.
    """
    if answer not in ANSWERS:
        raise UserError(f"answer must be one of {', '.join(ANSWERS)}, got {answer!r}")
    return answer


class ClassHeads:
    """The RanPAC sums over every learned task's columns and each candidate's dev tallies.

    Args:
        dim: the features' width ``d``.
        router: one of :data:`ROUTERS`.
        answer: one of :data:`ANSWERS`.

    Attributes:
        head: the :class:`~cl_graft.heads.RandomProjectionRidge` (None when only ``lda`` is a candidate).
        columns: ``(task position, class)`` of each column, in order of arrival.
        tally: candidate → counts named by :data:`COUNTS`.
    """

    def __init__(self, *, dim: int, router: str = "auto", answer: str = "auto") -> None:
        check_answer(answer)
        self.names = candidates(router)
        self.dim, self.router, self.answer = dim, router, answer
        self.head = (RandomProjectionRidge(dim=dim, width=WIDTH, ridge=RIDGES[0], seed=PROJECTION_SEED)
                     if router != "lda" else None)
        self.columns: list[tuple[int, int]] = []
        self.tally: dict[str, list[int]] = {n: [0] * len(COUNTS) for n in self.names}

    # ----- fitting -------------------------------------------------------------------------------
    def add_(self, features: Tensor, task: int, labels: Tensor) -> None:
        """Adds training rows ``features`` (N, d) of task position ``task`` with classes ``labels`` (N,)."""
        if self.head is None or not len(features):
            return
        index = {key: i for i, key in enumerate(self.columns)}
        cols = []
        for c in labels.tolist():
            key = (task, int(c))
            if key not in index:
                index[key] = len(self.columns)
                self.columns.append(key)
            cols.append(index[key])
        self.head.add_(torch.nn.functional.normalize(features.float(), dim=-1), torch.tensor(cols))

    # ----- scoring -------------------------------------------------------------------------------
    def column_scores(self, name: str, features: Tensor, lda: FeatureRouter | None) -> tuple[Tensor, Tensor, Tensor]:
        """Candidate ``name``'s scores ``(B, K)`` of ``features`` (B, d), each column's task position ``(K,)`` and
        class ``(K,)``.

        Raises:
            UserError: ``lda`` without class means, or a RanPAC candidate with no rows added yet.
        """
        if name == "lda":
            if lda is None or lda.classes is None:
                raise UserError("the lda router needs every task's class means (features collected with labels)")
            return lda.mean_scores(features).T.float(), lda.owner.clone(), torch.cat(lda.classes)
        if self.head is None or not self.columns:
            raise UserError(f"router {name!r} has no rows yet")
        ridge = float(name.partition(":")[2])
        scores = self.head.scores(torch.nn.functional.normalize(features.float(), dim=-1), ridge=ridge)
        keys = torch.tensor(self.columns, dtype=torch.long)
        return scores, keys[:, 0], keys[:, 1]

    def best(self, name: str, features: Tensor, lda: FeatureRouter | None) -> tuple[Tensor, Tensor, Tensor]:
        """Candidate ``name``'s best column for each row: its task position ``(B,)``, its class ``(B,)`` and the row's
        scores of that task's columns placed at their classes ``(B, C)`` (C = the largest class + 1; other
        entries ``-inf``), for the head's answer."""
        scores, owner, classes = self.column_scores(name, features, lda)
        top = scores.argmax(1)
        task, label = owner[top], classes[top]
        own = owner[None, :] == task[:, None]                                      # (B, K): the chosen task's
        placed = torch.full((len(features), int(classes.max()) + 1), -torch.inf)
        masked = torch.where(own, scores, torch.full_like(scores, -torch.inf))
        placed.scatter_reduce_(1, classes[None].expand_as(masked), masked, reduce="amax")
        return task, label, placed

    # ----- choosing on dev rows ------------------------------------------------------------------
    def judge_(self, features: Tensor, task: int, labels: Tensor, lda: FeatureRouter | None,
               answers: Callable[[int, Tensor], Tensor]) -> None:
        """Adds task position ``task``'s dev rows (features ``(N, d)``, classes ``(N,)``) to every candidate's
        tally; ``answers(k, rows)`` gives the grafted model of task position ``k``'s class for the dev rows
        ``rows`` ``(n,)`` (positions into ``features``), called once per task some candidate chose."""
        if not len(features):
            return
        picks = {}
        for name in self.names:
            if name != "lda" and (self.head is None or not self.columns):
                continue
            chosen, label, _ = self.best(name, features, lda)
            picks[name] = (chosen, label)
        got_by_task: dict[int, Tensor] = {}
        for k in sorted({int(k) for chosen, _ in picks.values() for k in chosen.tolist()}):
            rows = torch.cat([(chosen == k).nonzero().flatten() for chosen, _ in picks.values()]).unique()
            got_by_task[k] = torch.full((len(features),), -1, dtype=torch.long)
            got_by_task[k][rows] = answers(k, rows).long().cpu()
        for name, (chosen, label) in picks.items():
            right = chosen == task
            got = torch.stack([got_by_task[int(k)][i] for i, k in enumerate(chosen.tolist())])
            counts = (int(right.sum()), int((right & (label == labels)).sum()), int((right & (got == labels)).sum()),
                      len(features))
            self.tally[name] = [a + b for a, b in zip(self.tally[name], counts)]

    def choice(self) -> tuple[str, str]:
        """``(router, answer)`` the tallies choose (see the module docstring): ``("lda", "routed")`` before any
        dev row."""
        judged = [n for n in self.names if self.tally[n][3]]
        if not judged:
            return ("lda" if "lda" in self.names else self.names[0]), ("head" if self.answer == "head" else "routed")
        name = max(judged, key=lambda n: (self.tally[n][0], -self.names.index(n)))
        if self.answer != "auto":
            return name, self.answer
        head, routed = self.tally[name][1], self.tally[name][2]
        return name, "head" if head > routed else "routed"

    def record(self) -> dict:
        """The choice and every candidate's tallies (JSON), for the run's results."""
        router, answer = self.choice()
        return {"router": router, "answer": answer, "setting": {"router": self.router, "answer": self.answer},
                "candidates": list(self.names), "passes_per_row": 1 if answer == "head" else 2,
                "tally": {n: dict(zip(COUNTS, t)) for n, t in self.tally.items()}}

    # ----- storage -------------------------------------------------------------------------------
    def tensors(self) -> dict[str, Tensor]:
        """The RanPAC sums and the columns (empty when only ``lda`` is a candidate)."""
        if self.head is None:
            return {}
        return {**self.head.tensors(), "columns": torch.tensor(self.columns, dtype=torch.int64).reshape(-1, 2)}

    def meta(self) -> dict:
        """What the JSON keeps: the settings, the width and the tallies."""
        return {"dim": self.dim, "router": self.router, "answer": self.answer, "width": WIDTH,
                "tally": {n: list(t) for n, t in self.tally.items()}}

    @classmethod
    def restore(cls, meta: Mapping, tensors: Mapping[str, Tensor], *, what: str) -> ClassHeads:
        """The router :meth:`meta` and :meth:`tensors` describe; ``what`` names their file in errors.

        Raises:
            UserError: another width, a tally of another candidate set, or tensors of other shapes (one line).
        """
        missing = [k for k in ("dim", "router", "answer") if k not in meta]
        if missing:
            raise UserError(f"{what}: the router's record lacks field {missing[0]!r}")
        if meta.get("width") != WIDTH:
            raise UserError(f"{what}: router width {meta.get('width')!r}, this version uses {WIDTH}")
        heads = cls(dim=int(meta["dim"]), router=str(meta["router"]), answer=str(meta["answer"]))
        tally = meta.get("tally") or {}
        if sorted(tally) != sorted(heads.names) or any(len(t) != len(COUNTS) for t in tally.values()):
            raise UserError(f"{what}: tallies of {sorted(tally)}, router {heads.router!r} has {list(heads.names)}")
        heads.tally = {n: [int(v) for v in tally[n]] for n in heads.names}
        if heads.head is not None:
            columns = tensors.get("columns")
            if columns is None or columns.dim() != 2 or columns.shape[1] != 2:
                raise UserError(f"{what}: no (K, 2) tensor 'columns'")
            heads.head = RandomProjectionRidge.from_tensors(
                {k: v for k, v in tensors.items() if k != "columns"}, dim=heads.dim, width=WIDTH, ridge=RIDGES[0],
                seed=PROJECTION_SEED, what=what)
            if heads.head.targets.shape[1] != len(columns):
                raise UserError(f"{what}: {len(columns)} columns for {heads.head.targets.shape[1]} class sums")
            heads.columns = [(int(a), int(b)) for a, b in columns.tolist()]
        return heads

    def nbytes(self) -> int:
        """Bytes kept: the Gram matrix and the class sums (the projection is drawn again from its seed)."""
        if self.head is None:
            return 0
        parts = self.head.nbytes()
        return parts["gram"] + parts["targets"]
