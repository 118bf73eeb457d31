"""Per-task statistics of the features entering a task's head, for task-agnostic inference by feature likelihood.

Output confidence (:func:`~.routing.confidence`, SupSup-style) fails to identify tasks whose heads are confident
on every input (``benchmarks/results/task_inference.md``). The input side carries the task: each task ``k``
keeps a diagonal Gaussian of the features its head sees, ``f_k(x)`` = the input of task ``k``'s head module
under task ``k``'s grafted state, flattened to ``(B, d)``, fitted on its experience's training examples (plus
its ``valid_stream`` examples when given; never test rows) at the end of the experience. An unlabeled input
goes to ``argmax_k`` of the per-dimension log-likelihood (:meth:`FeatureStats.log_likelihood`).

Everything here is pure torch (no Avalanche): :class:`FeatureAccumulator` (streaming mean and variance),
:class:`FeatureStats` (the fitted Gaussian and its score), :func:`head_module` (a task's head module from its
parameter names), :class:`HeadInputs` (a forward pre-hook that records a module's input) and the
safetensors + JSON storage used by :class:`~.owner_map.OwnerMap`.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.io import atomic_write, read_safetensors

SHRINK = 0.1
"""Weight of the average variance in each dimension's variance (see :meth:`FeatureAccumulator.finish`)."""
EPS = 1e-6
FEATURES_FILE = "features.safetensors"


@dataclass
class FeatureStats:
    """A diagonal Gaussian over one task's head-input features.

    Attributes:
        mean: ``(d,)`` float32, μ_k.
        var: ``(d,)`` float32, σ²_k (shrunk and floored, > 0).
        count: examples it was fitted on.
    """

    mean: Tensor
    var: Tensor
    count: int

    def log_likelihood(self, f: Tensor) -> Tensor:
        """Per-dimension average log-density of ``f`` ``(B, d)``: ``−½ mean_i[(f_i − μ_i)²/σ²_i + log σ²_i +
        log 2π]``, shape ``(B,)``.

        Dividing by d leaves the argmax over tasks unchanged when every task's features have the same d (one
        shared encoder, as here) and keeps scores of heads with different input widths on one scale.

        Raises:
            UserError: ``f`` does not have d columns.
        """
        if f.dim() != 2 or f.shape[1] != self.mean.shape[0]:
            raise UserError(f"features of shape {tuple(f.shape)} do not match statistics of width {self.mean.shape[0]}")
        mean, var = self.mean.to(f.device), self.var.to(f.device)
        z = (f.float() - mean) ** 2 / var + var.log() + math.log(2 * math.pi)   # (B, d)
        return -0.5 * z.mean(1)


class FeatureAccumulator:
    """Streaming mean and (population) variance of ``(B, d)`` batches, in float64 (Chan et al.'s merge)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean: Tensor | None = None          # (d,) float64
        self.m2: Tensor | None = None            # (d,) float64, sum of squared deviations

    def update(self, f: Tensor) -> None:
        """Adds the rows of ``f`` ``(B, d)``."""
        f = f.detach().to(torch.float64).cpu()
        if f.dim() != 2:
            raise UserError(f"features must be (B, d), got shape {tuple(f.shape)}")
        n = f.shape[0]
        if n == 0:
            return
        mean, m2 = f.mean(0), ((f - f.mean(0)) ** 2).sum(0)
        if self.mean is None:
            self.count, self.mean, self.m2 = n, mean, m2
            return
        if mean.shape != self.mean.shape:
            raise UserError(f"feature width changed from {self.mean.shape[0]} to {mean.shape[0]}")
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta ** 2 * (self.count * n / total)
        self.count = total

    def finish(self, shrink: float = SHRINK) -> FeatureStats:
        """The fitted :class:`FeatureStats`: ``σ² = (1 − shrink)·v + shrink·mean(v) + EPS·(mean(v) + 1)``, ``v`` the
        per-dimension variance; shrinking toward the average variance keeps near-constant dimensions (and
        few examples) from dominating the score, the floor keeps σ² > 0.

        Raises:
            UserError: no rows were added.
        """
        if self.mean is None:
            raise UserError("no features to fit statistics on")
        v = self.m2 / self.count
        avg = v.mean()
        var = (1 - shrink) * v + shrink * avg + EPS * (avg + 1)
        return FeatureStats(self.mean.float(), var.float(), self.count)


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
    """Writes ``features.safetensors`` (tensors ``<k>.mean``, ``<k>.var`` for each task position ``k`` with
    statistics; removed when there are none) and returns the counts for the map's JSON (None: no statistics)."""
    path = Path(directory) / FEATURES_FILE
    tensors = {}
    for k, s in enumerate(stats):
        if s is not None:
            tensors[f"{k}.mean"] = s.mean.detach().cpu().float().contiguous()
            tensors[f"{k}.var"] = s.var.detach().cpu().float().contiguous()
    if tensors:
        atomic_write(path, lambda p: save_file(tensors, p, metadata={"format": "pt"}))
    else:
        path.unlink(missing_ok=True)
    return [None if s is None else int(s.count) for s in stats]


def load_stats(directory: str | os.PathLike, counts: Sequence[int | None]) -> list[FeatureStats | None]:
    """Reads what :func:`save_stats` wrote, for the counts recorded in the map's JSON.

    Raises:
        UserError: the file is missing, unreadable or lacks a task's tensors.
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
        mean, var = tensors.get(f"{k}.mean"), tensors.get(f"{k}.var")
        if mean is None or var is None or mean.shape != var.shape or mean.dim() != 1 or not bool((var > 0).all()):
            raise UserError(f"{path}: statistics of task {k} are missing or malformed")
        out.append(FeatureStats(mean, var, int(c)))
    return out
