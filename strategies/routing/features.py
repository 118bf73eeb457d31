"""Per-task statistics of head-input features in θ_pre's feature space, for task-agnostic inference.

Output confidence (:func:`~.states.confidence`, SupSup-style) fails to identify tasks whose heads are confident
on every input (``benchmarks/results/task_inference.md``). The input side carries the task: the features that
enter the output layer, ``f(x)`` = the input of the first task's head module (every head of a multi-head model
sees the same input) or, for a model without per-task heads, of its shared output layer (:func:`feature_layer`),
flattened to ``(B, d)`` and computed in **one shared feature space**, the model at θ_pre (every learned region
rolled back; θ_pre never changes, so statistics fitted when task ``k`` ends stay valid for the rest of the
stream; for a model trained from scratch θ_pre is its random initialisation, whose hidden layer still separates
the tasks' inputs). Each task ``k`` keeps the mean ``μ_k`` ``(d,)`` and its within-task covariance ``C_k`` of
``f`` over its experience's training examples (plus its ``valid_stream`` examples when given; never test rows),
in one of :data:`FORMS`, and the mean of each of its classes; an unlabeled input goes to the task with the
highest linear-discriminant score (:class:`FeatureRouter`: Gaussians with one pooled, shrunk covariance, equal
priors; over the tasks' classes when every task keeps its class means).

Why θ_pre's space and a pooled covariance: measured on qnli → agnews → sst2 (MiniLM, ``benchmarks/results/
task_inference.md``), per-task diagonal Gaussians fitted on each task's *own* grafted state identify 49% of the
tasks (scores from different task states are not comparable: agnews' state spreads every input more, so no
agnews input is ever picked), while the same rule in θ_pre's space identifies 88% and a pooled full covariance
(linear discriminant) 96%. Cost: one forward pass at θ_pre per input to route, then one in the chosen task's
state (2 instead of T).

Why the default form :data:`DEFAULT_FORM` (``lowrank:32``: the mean, the 32 leading eigen-directions of C_k
scaled by their spread, and the diagonal they leave, ``34·d`` floats per task instead of ``d² + d``): measured
with ``benchmarks/experiments/probes/feature_forms.py`` (``benchmarks/results/task_inference.md``, section "Forms of
the feature statistics"), task identification over 3 seeds, full → lowrank:32 → lowrank:16 → diagonal → mean:
split digits, single-head MLP 64-256-10 at its random initialisation (d = 256), 97.2 → 97.3 → 96.0 → 83.9 →
82.1% (1316 → 174 → 92 → 10 → 5 kB for 5 tasks); permuted digits (5 or 20 tasks) 100% in every form; the text
stream (MiniLM, d = 384, quick preset) 96.6 → 95.6 → 95.8 → 92.2 → 92.0% (1774 → 157 → 83 → 9 → 5 kB for
3 tasks). ``lowrank:32`` stays within about a point of ``full`` everywhere at 9–13% of its bytes; the diagonal
and the mean alone lose 4–15 points where the tasks differ along directions their features also spread in
(split digits, text).

Pure torch (no Avalanche): :class:`FeatureAccumulator` (streaming mean and covariance), :class:`FeatureStats`
(one task's statistics in a form, :meth:`FeatureStats.reduce`), :class:`FeatureRouter` (the scores),
:func:`feature_layer` (where the features are read: :func:`head_module`, :func:`output_layer`; they are
recorded by :class:`~cl_graft.strategies.head_inputs.HeadInputs`), and the safetensors storage used by
:class:`~..graft.owner_map.OwnerMap` is :mod:`.feature_store` (exactly the tensors a form keeps).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cl_graft.errors import UserError

SHRINK = 0.1
"""Weight of ``mean(diag C)·I`` in the pooled covariance (see :class:`FeatureRouter`)."""
EPS = 1e-6
FORMS = ("full", "lowrank:R", "diagonal", "mean")
"""What a task's statistics keep besides the mean (:meth:`FeatureStats.reduce`); ``R`` a rank below d."""
DEFAULT_FORM = "lowrank:32"
"""The form every task keeps unless told otherwise (see the module docstring for why)."""
FORM_TENSORS = {"full": ("mean", "cov"), "lowrank": ("mean", "basis", "var"), "diagonal": ("mean", "var"),
            "mean": ("mean",)}
CLASS_TENSORS = ("class_means", "class_counts", "class_labels")
"""Kept beside any form when the rows' labels were given."""


def parse_form(form: str) -> tuple[str, int]:
    """``(kind, rank)`` of a form name: ``("lowrank", R)`` for ``lowrank:R``, ``(form, 0)`` for the others.

    Raises:
        UserError: not one of :data:`FORMS` (R a whole number ≥ 1).
    """
    kind, _, rank = str(form).partition(":")
    if kind == "lowrank" and rank.isdigit() and int(rank) >= 1:
        return kind, int(rank)
    if kind in FORM_TENSORS and kind != "lowrank" and not rank:
        return kind, 0
    raise UserError(f"feature statistics form {form!r} is not one of {', '.join(FORMS)} (R ≥ 1)")


@dataclass
class FeatureStats:
    """One task's head-input features at θ_pre, in one of :data:`FORMS` (which tensors are set says which).

    Attributes:
        mean: ``(d,)`` float32, μ_k.
        cov: ``(d, d)`` float32, the (population) covariance C_k of the features around μ_k (form ``full``).
        count: examples it was fitted on.
        basis: ``(r, d)`` float32, rows ``√λ_i·u_i`` for the top r eigenpairs of C_k (form ``lowrank:r``).
        var: ``(d,)`` float32: ``diag C_k`` (form ``diagonal``), or what the basis leaves of it (``lowrank``),
            so the diagonal is kept exactly.
        class_means: ``(m, d)`` float32, the mean of each of the task's m classes (sorted by label), when the
            rows' labels were given (in every form; :class:`FeatureRouter` then scores classes).
        class_counts: ``(m,)`` float32, the rows of each class.
        class_labels: ``(m,)`` float32, the label of each class (integers, ascending): the class each row of
            ``class_means`` is (:attr:`FeatureRouter.classes`).
    """

    mean: Tensor
    cov: Tensor | None
    count: int
    basis: Tensor | None = None
    var: Tensor | None = None
    class_means: Tensor | None = None
    class_counts: Tensor | None = None
    class_labels: Tensor | None = None

    @property
    def form(self) -> str:
        """``full``, ``lowrank:r``, ``diagonal`` or ``mean``."""
        if self.cov is not None:
            return "full"
        if self.basis is not None:
            return f"lowrank:{self.basis.shape[0]}"
        return "diagonal" if self.var is not None else "mean"

    def tensors(self) -> dict[str, Tensor]:
        """What is kept (name → tensor): exactly what :func:`~.feature_store.save_stats` writes and :meth:`nbytes` counts."""
        names = FORM_TENSORS[parse_form(self.form)[0]] + (CLASS_TENSORS if self.class_means is not None else ())
        return {n: getattr(self, n) for n in names}

    def nbytes(self) -> int:
        """Bytes of the kept tensors (float32: 4 per number)."""
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def covariance(self) -> Tensor | None:
        """The covariance these statistics describe, ``(d, d)`` float64 (``basisᵀ·basis + diag(var)`` for
        ``lowrank``), None for ``mean``."""
        if self.cov is not None:
            return self.cov.double()
        if self.var is None:
            return None
        low = self.basis.double().T @ self.basis.double() if self.basis is not None else 0.0
        return low + torch.diag(self.var.double())

    def reduce(self, form: str) -> FeatureStats:
        """These statistics kept in ``form`` (the same mean and count). ``lowrank:R`` keeps the R largest
        eigenpairs of the covariance and the diagonal it leaves (``full`` when R ≥ d, which is no smaller).

        Raises:
            UserError: an unknown form, or a covariance asked of ``mean`` statistics.
        """
        kind, rank = parse_form(form)
        classes = {n: getattr(self, n) for n in CLASS_TENSORS}
        if kind == "mean":
            return FeatureStats(self.mean, None, self.count, **classes)
        cov = self.covariance()
        if cov is None:
            raise UserError(f"statistics of form 'mean' cannot give form {form!r} (they keep no covariance)")
        d = cov.shape[0]
        if kind == "full" or (kind == "lowrank" and rank >= d):
            return FeatureStats(self.mean, cov.float(), self.count, **classes)
        if kind == "diagonal":
            return FeatureStats(self.mean, None, self.count, var=cov.diagonal().float().clone(), **classes)
        values, vectors = torch.linalg.eigh(cov)                          # ascending
        basis = (vectors[:, -rank:] * values[-rank:].clamp_min(0).sqrt()).T.flip(0)      # (r, d), largest first
        basis = basis * basis.gather(1, basis.abs().argmax(1, keepdim=True)).sign()     # signs: one answer
        var = (cov.diagonal() - (basis ** 2).sum(0)).clamp_min(0)
        return FeatureStats(self.mean, None, self.count, basis=basis.float().contiguous(), var=var.float(), **classes)


class FeatureAccumulator:
    """Streaming mean and (population) covariance of ``(B, d)`` batches, in float64 (Chan et al.'s merge)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean: Tensor | None = None          # (d,) float64
        self.m2: Tensor | None = None            # (d, d) float64, sum of outer products of deviations
        self.sums: dict[int, Tensor] = {}        # label → (d,) float64 sum of its rows
        self.counts: dict[int, int] = {}

    def update(self, f: Tensor, labels: Tensor | None = None) -> None:
        """Adds the rows of ``f`` ``(B, d)``, with their class ``labels`` ``(B,)`` when known (every update of
        one accumulator gives them, or none does)."""
        f = f.detach().to(torch.float64).cpu()
        if f.dim() != 2:
            raise UserError(f"features must be (B, d), got shape {tuple(f.shape)}")
        n = f.shape[0]
        if n == 0:
            return
        if labels is not None:
            labels = torch.as_tensor(labels).cpu()
            for c in torch.unique(labels).tolist():
                self.sums[c] = self.sums.get(c, 0) + f[labels == c].sum(0)
                self.counts[c] = self.counts.get(c, 0) + int((labels == c).sum())
        mean = f.mean(0)
        dev = f - mean
        m2 = dev.T @ dev
        if self.mean is None:
            self.count, self.mean, self.m2 = n, mean, m2
            return
        if mean.shape != self.mean.shape:
            raise UserError(f"feature width changed from {self.mean.shape[0]} to {mean.shape[0]}")
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + torch.outer(delta, delta) * (self.count * n / total)
        self.count = total

    def finish(self, form: str = DEFAULT_FORM) -> FeatureStats:
        """The fitted :class:`FeatureStats`, kept in ``form`` (:meth:`FeatureStats.reduce`).

        Raises:
            UserError: no rows were added, or an unknown form.
        """
        if self.mean is None:
            raise UserError("no features to fit statistics on")
        parse_form(form)
        classes = {}
        if self.counts:
            labels = sorted(self.counts)
            classes = {"class_means": torch.stack([self.sums[c] / self.counts[c] for c in labels]).float(),
                       "class_counts": torch.tensor([float(self.counts[c]) for c in labels]),
                       "class_labels": torch.tensor([float(c) for c in labels])}
        full = FeatureStats(self.mean.float(), (self.m2 / self.count).float(), self.count, **classes)
        return full if form == "full" else full.reduce(form)


class FeatureRouter:
    """Linear-discriminant task scores of features from the tasks' :class:`FeatureStats` (any forms).

    The pooled covariance ``C = Σ_k n_k C_k / Σ_k n_k`` over the tasks that keep one (:meth:`FeatureStats.
    covariance`; the identity when none does, i.e. the nearest mean) is shrunk toward its average variance,
    ``Σ = (1 − shrink)·C + shrink·mean(diag C)·I + EPS·(mean(diag C) + 1)·I``, which keeps it invertible with
    fewer examples than dimensions; its Cholesky factor is computed once.

    When every task keeps its class means (the rows' labels were known), the discriminant is over classes: each
    task's covariance less the scatter of its class means (the within-class covariance) is pooled, every class is a
    Gaussian of its own, and a task scores as its best class. A task of many unrelated classes (ten intents of
    CLINC150) is no compact Gaussian; its classes are: on ``split-clinc150:15`` at MiniLM's θ_pre, training rows
    only, tasks were identified for 80.1% of the rows by task and 94.2% by class (``lowrank:32``;
    ``benchmarks/results/class_text/routing_clinc150/``, :mod:`cl_graft.benchmarks.experiments.probes.class_routing`).

    Args:
        stats: one :class:`FeatureStats` per task, in the learning order (the same d).
        shrink: see above.

    Attributes:
        classes: with class means, each task's labels ``(m_k,)`` (long), in the order of its means (the class
            a row's best mean names); None otherwise.
    """

    def __init__(self, stats: Sequence[FeatureStats], shrink: float = SHRINK) -> None:
        if not stats:
            raise UserError("feature routing needs the statistics of at least one task")
        widths = {s.mean.shape[0] for s in stats}
        if len(widths) != 1:
            raise UserError(f"tasks' head inputs have different widths {sorted(widths)}; feature routing needs one")
        d = widths.pop()
        classes = all(s.class_means is not None for s in stats)
        kept = [(float(s.count), c - (_between(s) if classes else 0.0)) for s in stats
                if (c := s.covariance()) is not None]
        if kept:
            pooled = sum(c * n for n, c in kept) / sum(n for n, _ in kept)
            values, vectors = torch.linalg.eigh(pooled)                     # PSD again after the subtraction
            pooled = (vectors * values.clamp_min(0)) @ vectors.T
        else:
            pooled = torch.eye(d, dtype=torch.float64)
        avg = pooled.diagonal().mean()
        sigma = (1 - shrink) * pooled + (shrink * avg + EPS * (avg + 1)) * torch.eye(d, dtype=torch.float64)
        self.chol = torch.linalg.cholesky(sigma)                             # (d, d) lower, float64
        parts = [s.class_means if classes else s.mean[None] for s in stats]
        self.means = torch.cat([p.double() for p in parts])                 # (M, d): classes, or tasks
        self.owner = torch.cat([torch.full((len(p),), k) for k, p in enumerate(parts)])   # (M,) task of each
        self.tasks = len(stats)
        self.classes = [s.class_labels.long() for s in stats] if classes else None   # each task's labels

    def mean_scores(self, f: Tensor) -> Tensor:
        """``(M, B)`` float64: ``−½ ‖L⁻¹(f − μ_m)‖² / d`` for features ``f`` ``(B, d)`` and each of the M means
        (the classes' when every task keeps them, else the tasks'): the Gaussian log-likelihood up to a constant
        shared by every mean, per dimension.

        Raises:
            UserError: ``f`` does not have d columns.
        """
        d = self.means.shape[1]
        if f.dim() != 2 or f.shape[1] != d:
            raise UserError(f"features of shape {tuple(f.shape)} do not match statistics of width {d}")
        dev = f.detach().double().cpu()[None] - self.means[:, None]          # (M, B, d)
        z = torch.linalg.solve_triangular(self.chol, dev.reshape(-1, d).T, upper=False)   # (d, M·B)
        return (-0.5 * (z ** 2).sum(0) / d).reshape(dev.shape[0], dev.shape[1])

    def scores(self, f: Tensor) -> Tensor:
        """``(T, B)``: each task's best :meth:`mean_scores` for features ``f`` ``(B, d)``.

        Raises:
            UserError: ``f`` does not have d columns.
        """
        score = self.mean_scores(f)                                          # (M, B)
        best = torch.full((self.tasks, score.shape[1]), -torch.inf, dtype=score.dtype)
        best = best.scatter_reduce(0, self.owner[:, None].expand_as(score), score, reduce="amax")
        return best.float().to(f.device)                                     # (T, B): each task's best


def _between(stats: FeatureStats) -> Tensor:
    """``(d, d)`` float64: the scatter of a task's class means around its mean, weighted by their rows (what its
    covariance holds beyond the within-class covariance)."""
    w = stats.class_counts.double() / stats.class_counts.double().sum()
    dev = stats.class_means.double() - stats.mean.double()
    return (dev * w[:, None]).T @ dev


def head_module(root: nn.Module, names: Sequence[str]) -> nn.Module | None:
    """The smallest submodule of ``root`` holding every parameter in ``names`` (a task's head tensors), or None
    when there are none or only ``root`` itself holds them all (no head module of its own)."""
    parts = [n.split(".")[:-1] for n in names]
    if not parts:
        return None
    prefix = parts[0]
    for p in parts[1:]:
        i = 0
        while i < min(len(prefix), len(p)) and prefix[i] == p[i]:
            i += 1
        prefix = prefix[:i]
    return root.get_submodule(".".join(prefix)) if prefix else None


def output_layer(root: nn.Module, run: Callable[[], object]) -> nn.Module:
    """The output layer of a model without per-task head modules (a single-head model): the last module with
    parameters of its own that one forward pass ``run()`` calls (for ``Sequential(Linear, ReLU, Linear)`` the
    second ``Linear``). Its input at θ_pre is the features every task shares.

    Raises:
        UserError: the forward pass calls no module with parameters.
    """
    called: list[nn.Module] = []
    hooks = [m.register_forward_hook(lambda m, args, out: called.append(m)) for m in root.modules()
             if next(m.parameters(recurse=False), None) is not None]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    if not called:
        raise UserError(f"{type(root).__name__}'s forward pass calls no module with parameters; feature routing "
                        f"reads the input of its output layer")
    return called[-1]


def feature_layer(root: nn.Module, head_names: Sequence[str], run: Callable[[], object]) -> nn.Module | None:
    """The module whose input is the routing features: the smallest module holding the first task's head tensors
    ``head_names`` (:func:`head_module`; None when only ``root`` holds them, e.g. prompt heads), or for a model
    with no per-task heads (a single-head model, ``head_names`` empty) its :func:`output_layer`, found by the
    forward pass ``run()``."""
    return head_module(root, head_names) if head_names else output_layer(root, run)


# ----- storage ---------------------------------------------------------------------------------------
