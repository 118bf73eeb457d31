"""Per-task statistics of head-input features in θ_pre's feature space, for task-agnostic inference.

Output confidence (:func:`~.routing.confidence`, SupSup-style) fails to identify tasks whose heads are confident
on every input (``benchmarks/results/task_inference.md``). The input side carries the task: the features that
enter a task's head, ``f(x)`` = the input of the head module flattened to ``(B, d)``, computed in **one shared
feature space**, the model at θ_pre (every learned region rolled back; θ_pre never changes, so statistics fitted
when task ``k`` ends stay valid for the rest of the stream). Each task ``k`` keeps the mean ``μ_k`` ``(d,)``
and the within-task covariance ``C_k`` ``(d, d)`` of ``f`` over its experience's training examples (plus its
``valid_stream`` examples when given; never test rows); an unlabeled input goes to the task with the highest
linear-discriminant score (:class:`FeatureRouter`: Gaussians with one pooled, shrunk covariance, equal priors).

Why θ_pre's space and a pooled covariance: measured on qnli → agnews → sst2 (MiniLM, ``benchmarks/results/
task_inference.md``), per-task diagonal Gaussians fitted on each task's *own* grafted state identify 49% of the
tasks (scores from different task states are not comparable: agnews' state spreads every input more, so no
agnews input is ever picked), while the same rule in θ_pre's space identifies 88% and a pooled full covariance
(linear discriminant) 96%. Cost: one forward pass at θ_pre per input to route, then one in the chosen task's
state (2 instead of T); storage d² + d floats per task (590 KB for MiniLM's d = 384).

Pure torch (no Avalanche): :class:`FeatureAccumulator` (streaming mean and covariance), :class:`FeatureStats`,
:class:`FeatureRouter` (the scores), :func:`head_module` (a task's head module from its parameter names),
:class:`HeadInputs` (a forward pre-hook that records a module's input) and the safetensors + JSON storage used
by :class:`~.owner_map.OwnerMap`.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.files import atomic_write, read_safetensors

SHRINK = 0.1
"""Weight of ``mean(diag C)·I`` in the pooled covariance (see :class:`FeatureRouter`)."""
EPS = 1e-6
FEATURES_FILE = "features.safetensors"


@dataclass
class FeatureStats:
    """One task's head-input features at θ_pre.

    Attributes:
        mean: ``(d,)`` float32, μ_k.
        cov: ``(d, d)`` float32, the (population) covariance of the task's features around μ_k.
        count: examples it was fitted on.
    """

    mean: Tensor
    cov: Tensor
    count: int


class FeatureAccumulator:
    """Streaming mean and (population) covariance of ``(B, d)`` batches, in float64 (Chan et al.'s merge)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean: Tensor | None = None          # (d,) float64
        self.m2: Tensor | None = None            # (d, d) float64, sum of outer products of deviations

    def update(self, f: Tensor) -> None:
        """Adds the rows of ``f`` ``(B, d)``."""
        f = f.detach().to(torch.float64).cpu()
        if f.dim() != 2:
            raise UserError(f"features must be (B, d), got shape {tuple(f.shape)}")
        n = f.shape[0]
        if n == 0:
            return
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

    def finish(self) -> FeatureStats:
        """The fitted :class:`FeatureStats`.

        Raises:
            UserError: no rows were added.
        """
        if self.mean is None:
            raise UserError("no features to fit statistics on")
        return FeatureStats(self.mean.float(), (self.m2 / self.count).float(), self.count)


class FeatureRouter:
    """Linear-discriminant task scores of features from the tasks' :class:`FeatureStats`.

    The pooled covariance ``C = Σ_k n_k C_k / Σ_k n_k`` is shrunk toward its average variance,
    ``Σ = (1 − shrink)·C + shrink·mean(diag C)·I + EPS·(mean(diag C) + 1)·I``, which keeps it invertible with
    fewer examples than dimensions; its Cholesky factor is computed once.

    Args:
        stats: one :class:`FeatureStats` per task, in the learning order (the same d).
        shrink: see above.
    """

    def __init__(self, stats: Sequence[FeatureStats], shrink: float = SHRINK) -> None:
        if not stats:
            raise UserError("feature routing needs the statistics of at least one task")
        widths = {s.mean.shape[0] for s in stats}
        if len(widths) != 1:
            raise UserError(f"tasks' head inputs have different widths {sorted(widths)}; feature routing needs one")
        counts = torch.tensor([float(s.count) for s in stats], dtype=torch.float64)
        pooled = sum(s.cov.double() * c for s, c in zip(stats, counts, strict=True)) / counts.sum()
        avg = pooled.diagonal().mean()
        d = pooled.shape[0]
        sigma = (1 - shrink) * pooled + (shrink * avg + EPS * (avg + 1)) * torch.eye(d, dtype=torch.float64)
        self.chol = torch.linalg.cholesky(sigma)                             # (d, d) lower, float64
        self.means = torch.stack([s.mean.double() for s in stats])          # (T, d)

    def scores(self, f: Tensor) -> Tensor:
        """``(T, B)``: ``−½ ‖L⁻¹(f − μ_k)‖² / d`` for features ``f`` ``(B, d)`` (the Gaussian log-likelihood up to
        a constant shared by every task, per dimension).

        Raises:
            UserError: ``f`` does not have d columns.
        """
        d = self.means.shape[1]
        if f.dim() != 2 or f.shape[1] != d:
            raise UserError(f"features of shape {tuple(f.shape)} do not match statistics of width {d}")
        dev = f.detach().double().cpu()[None] - self.means[:, None]          # (T, B, d)
        z = torch.linalg.solve_triangular(self.chol, dev.reshape(-1, d).T, upper=False)   # (d, T·B)
        return (-0.5 * (z ** 2).sum(0) / d).reshape(dev.shape[0], dev.shape[1]).float().to(f.device)


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


class HeadInputs:
    """Records the input of ``module``'s forward calls while active (``with HeadInputs(m) as rec:``): the first
    positional tensor argument (else the first tensor keyword argument), flattened to ``(B, d)``."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.parts: list[Tensor] = []
        self._handle = None

    def __enter__(self) -> Self:
        self.parts = []
        self._handle = self.module.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
        self._handle = None

    def _hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
        if x is None:
            raise UserError(f"head {type(module).__name__} was called without a tensor input")
        self.parts.append(x.detach().reshape(x.shape[0], -1))

    def take(self, rows: int) -> Tensor:
        """The recorded features ``(rows, d)`` since the last call (calls concatenated in order); clears them.

        Raises:
            UserError: the head saw another number of rows (it was not called once per input).
        """
        parts, self.parts = self.parts, []
        f = torch.cat(parts) if parts else None
        if f is None or f.shape[0] != rows:
            raise UserError(f"the task's head saw {0 if f is None else f.shape[0]} rows for {rows} inputs; feature "
                            f"routing needs a head module called once per input")
        return f


# ----- storage ---------------------------------------------------------------------------------------
def save_stats(directory: str | os.PathLike, stats: Sequence[FeatureStats | None]) -> list[int | None]:
    """Writes ``features.safetensors`` (tensors ``<k>.mean``, ``<k>.cov`` for each task position ``k`` with
    statistics; removed when there are none) and returns the counts for the map's JSON (None: no statistics)."""
    path = Path(directory) / FEATURES_FILE
    tensors = {}
    for k, s in enumerate(stats):
        if s is not None:
            tensors[f"{k}.mean"] = s.mean.detach().cpu().float().contiguous()
            tensors[f"{k}.cov"] = s.cov.detach().cpu().float().contiguous()
    if tensors:
        atomic_write(path, lambda p: save_file(tensors, p, metadata={"format": "pt"}))
    else:
        path.unlink(missing_ok=True)
    return [None if s is None else int(s.count) for s in stats]


def load_stats(directory: str | os.PathLike, counts: Sequence[int | None]) -> list[FeatureStats | None]:
    """Reads what :func:`save_stats` wrote, for the counts recorded in the map's JSON.

    Raises:
        UserError: the file is missing, unreadable, lacks a task's tensors, or holds NaN, an infinity or a
            matrix that is no covariance.
    """
    if not any(c is not None for c in counts):
        return [None] * len(counts)
    path = Path(directory) / FEATURES_FILE
    tensors: Mapping[str, Tensor] = read_safetensors(path)
    out: list[FeatureStats | None] = []
    for k, c in enumerate(counts):
        if c is None:
            out.append(None)
            continue
        mean, cov = tensors.get(f"{k}.mean"), tensors.get(f"{k}.cov")
        if mean is None or cov is None or mean.dim() != 1 or cov.shape != (mean.shape[0], mean.shape[0]):
            raise UserError(f"{path}: statistics of task {k} are missing or malformed")
        if c < 1 or not torch.allclose(cov, cov.T) or bool((cov.diagonal() < 0).any()):
            raise UserError(f"{path}: statistics of task {k} are not a covariance of {c} rows (tensor '{k}.cov')")
        out.append(FeatureStats(mean, cov, int(c)))
    return out
