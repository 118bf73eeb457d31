"""Closed-form classifier heads on fixed features (pure torch): what they learn is kept as per-class sums, so
they train nothing by gradient, keep no rows, and nothing they learned is forgotten.

- :class:`StreamingLDA`: streaming linear discriminant analysis (Hayes & Kanan, CLVision 2020) by Avalanche's
  rule (``avalanche.training.StreamingLDA``: ``fit`` one row at a time, ``predict``): a running mean per class
  and one shared covariance, shrunk towards the identity and inverted; a row's score for class ``k`` is
  ``x·Λμ_k − ½ μ_k·Λμ_k``.
- :class:`RandomProjectionRidge`: RanPAC's head (McDonnell et al., NeurIPS 2023) without its first-session
  adaptation: a fixed random projection of the features to ``width`` dimensions, a ReLU, and ridge regression
  onto one-hot targets from the accumulated Gram matrix ``G = Σ h hᵀ`` and ``C = Σ h yᵀ``; sums, so the head
  after a stream does not depend on the order its classes came in.

A head answers *columns* (the classes it has seen, numbered in order of arrival): ``add_`` takes features
``(N, d)`` and each row's column ``(N,)`` (a new column is one past the last), ``scores`` gives ``(N, K)``
for the ``K`` columns seen so far. ``tensors`` and ``from_tensors`` keep a head as named tensors (a
safetensors file) and read it back.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import torch
from torch import Tensor

from cl_graft.errors import UserError


def _new_columns(columns: Tensor, known: int) -> int:
    """How many columns ``columns`` (N,) adds to the ``known`` ones: new ones continue the numbering.

    Raises:
        ValueError: a negative column, or new ones that skip a number.
    """
    new = sorted({c for c in columns.tolist() if c >= known})
    if bool((columns < 0).any()) or new != list(range(known, known + len(new))):
        raise ValueError(f"columns are numbered in order of arrival: got {new} after {known}")
    return len(new)


def _checked(tensors: Mapping[str, Tensor], shapes: Mapping[str, tuple[int | None, ...]], what: str) -> None:
    """Refuses ``tensors`` without one of ``shapes``'s names or of another shape (None: any length).

    Raises:
        UserError: one line naming the tensor.
    """
    for name, shape in shapes.items():
        t = tensors.get(name)
        if t is None:
            raise UserError(f"{what}: no tensor {name!r}")
        if t.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, t.shape)):
            raise UserError(f"{what}: tensor {name!r} has shape {tuple(t.shape)}, expected {shape}")


class StreamingLDA:
    """Streaming LDA by Avalanche's rule (see the module docstring).

    Args:
        dim: the features' width ``d``.
        shrinkage: ``s`` in ``Λ = pinv((1 − s) Σ + s I)`` (Avalanche's ``shrinkage_param``, default ``1e-4``).

    Attributes:
        means: ``(K, d)`` each column's running mean.
        counts: ``(K,)`` rows per column.
        sigma: ``(d, d)`` the shared covariance, updated with every row (Avalanche starts it at all ones;
            the first row replaces it).
        updates: rows seen.
    """

    def __init__(self, *, dim: int, shrinkage: float = 1e-4) -> None:
        if not 0 < shrinkage <= 1:
            raise UserError(f"slda_shrinkage must be in (0, 1], got {shrinkage}")
        self.shrinkage = shrinkage
        self.means = torch.zeros(0, dim)
        self.counts = torch.zeros(0)
        self.sigma = torch.ones(dim, dim)
        self.updates = 0
        self._solved: tuple[Tensor, Tensor] | None = None

    @torch.no_grad()
    def add_(self, features: Tensor, columns: Tensor) -> None:
        """Adds rows ``features`` (N, d) of ``columns`` (N,), one at a time in order (Avalanche's ``fit``)."""
        grow = _new_columns(columns, len(self.counts))
        self.means = torch.cat([self.means, self.means.new_zeros(grow, self.means.shape[1])])
        self.counts = torch.cat([self.counts, self.counts.new_zeros(grow)])
        for x, k in zip(features.float().cpu(), columns.tolist()):
            deviation = (x - self.means[k]).unsqueeze(0)                    # (1, d)
            n = self.updates
            self.sigma = (n * self.sigma + deviation.T @ deviation * n / (n + 1)) / (n + 1)
            self.means[k] += (x - self.means[k]) / (self.counts[k] + 1)
            self.counts[k] += 1
            self.updates += 1
        self._solved = None

    def _weights(self) -> tuple[Tensor, Tensor]:
        """``W = Λ M`` (d, K) and ``c = ½ diag(Mᵀ Λ M)`` (K,), ``M`` the means as columns (cached)."""
        if self._solved is None:
            eye = torch.eye(self.sigma.shape[0])
            precision = torch.linalg.pinv((1 - self.shrinkage) * self.sigma + self.shrinkage * eye)
            weights = precision @ self.means.T
            self._solved = weights, 0.5 * (self.means.T * weights).sum(0)
        return self._solved

    @torch.no_grad()
    def scores(self, features: Tensor) -> Tensor:
        """``(N, K)`` scores of ``features`` (N, d) for the columns seen so far (Avalanche's ``predict``)."""
        weights, offsets = self._weights()
        return features.float().cpu() @ weights - offsets

    def tensors(self) -> dict[str, Tensor]:
        """What it learned, by name (``updates`` as a 0-d int64 tensor)."""
        return {"means": self.means, "counts": self.counts, "sigma": self.sigma,
                "updates": torch.tensor(self.updates, dtype=torch.int64)}

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Tensor], *, dim: int, shrinkage: float, what: str) -> Self:
        """A head holding ``tensors`` (:meth:`tensors`); ``what`` names their file in errors.

        Raises:
            UserError: a tensor missing or of another shape (one line).
        """
        _checked(tensors, {"means": (None, dim), "counts": (None,), "sigma": (dim, dim), "updates": ()}, what)
        if len(tensors["means"]) != len(tensors["counts"]):
            raise UserError(f"{what}: {len(tensors['means'])} means for {len(tensors['counts'])} counts")
        head = cls(dim=dim, shrinkage=shrinkage)
        head.means, head.counts = tensors["means"].float(), tensors["counts"].float()
        head.sigma, head.updates = tensors["sigma"].float(), int(tensors["updates"])
        return head

    def nbytes(self) -> dict[str, int]:
        """Bytes it keeps, by part: the class means and counts, the covariance and its cached inverse."""
        solved = 0 if self._solved is None else sum(t.numel() * t.element_size() for t in self._solved)
        return {"class_means": _bytes(self.means) + _bytes(self.counts), "covariance": _bytes(self.sigma),
                "solved": solved}


class RandomProjectionRidge:
    """RanPAC's head (see the module docstring).

    Args:
        dim: the features' width ``d``.
        width: the projection's width ``M``.
        ridge: ``r`` in ``(G + r · tr(G)/M · I) W = C``: the ridge relative to the Gram matrix's mean eigenvalue,
            so one value means the same on streams of any size.
        seed: draws the projection ``(d, M)`` (standard normal entries, as RanPAC's).

    Attributes:
        projection: ``(d, M)``.
        gram: ``(M, M)`` ``Σ h hᵀ`` over every row added, ``h = relu(x P)``.
        targets: ``(M, K)`` ``Σ h`` of each column's rows.
    """

    def __init__(self, *, dim: int, width: int, ridge: float, seed: int) -> None:
        if width < 1:
            raise UserError(f"ranpac_width must be >= 1, got {width}")
        if not ridge > 0:
            raise UserError(f"ranpac_ridge must be > 0, got {ridge}")
        self.ridge = ridge
        self.projection = torch.randn(dim, width, generator=torch.Generator().manual_seed(seed))
        self.gram = torch.zeros(width, width)
        self.targets = torch.zeros(width, 0)
        self._solved: dict[float, Tensor] = {}

    def expand(self, features: Tensor) -> Tensor:
        """``relu(features P)``: (N, d) → (N, M)."""
        return torch.relu(features.float().cpu() @ self.projection)

    @torch.no_grad()
    def add_(self, features: Tensor, columns: Tensor) -> None:
        """Adds rows ``features`` (N, d) of ``columns`` (N,) to the sums."""
        grow = _new_columns(columns, self.targets.shape[1])
        self.targets = torch.cat([self.targets, self.targets.new_zeros(self.targets.shape[0], grow)], dim=1)
        h = self.expand(features)                                           # (N, M)
        self.gram += h.T @ h
        self.targets.index_add_(1, columns.cpu(), h.T)
        self._solved = {}

    def _weights(self, ridge: float | None = None) -> Tensor:
        """The ridge solution ``W`` (M, K) at ``ridge`` (default: the head's), solved in float64 (cached per
        ridge until the sums grow)."""
        ridge = self.ridge if ridge is None else ridge
        if ridge not in self._solved:
            gram = self.gram.double()
            width = gram.shape[0]
            lam = ridge * max(float(gram.diagonal().sum()) / width, torch.finfo(torch.float32).tiny)
            gram.diagonal().add_(lam)
            self._solved[ridge] = torch.linalg.solve(gram, self.targets.double()).float()
        return self._solved[ridge]

    @torch.no_grad()
    def scores(self, features: Tensor, *, ridge: float | None = None) -> Tensor:
        """``(N, K)`` scores of ``features`` (N, d) for the columns seen so far, at ``ridge`` (default: the
        head's; any other value is solved from the same sums)."""
        return self.expand(features) @ self._weights(ridge)

    def tensors(self) -> dict[str, Tensor]:
        """What it learned, by name (the projection is drawn again from the seed)."""
        return {"gram": self.gram, "targets": self.targets}

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Tensor], *, dim: int, width: int, ridge: float, seed: int,
                     what: str) -> Self:
        """A head holding ``tensors`` (:meth:`tensors`); ``what`` names their file in errors.

        Raises:
            UserError: a tensor missing or of another shape (one line).
        """
        _checked(tensors, {"gram": (width, width), "targets": (width, None)}, what)
        head = cls(dim=dim, width=width, ridge=ridge, seed=seed)
        head.gram, head.targets = tensors["gram"].float(), tensors["targets"].float()
        return head

    def nbytes(self) -> dict[str, int]:
        """Bytes it keeps, by part: the projection, the Gram matrix, the targets' sums and the cached solution."""
        return {"projection": _bytes(self.projection), "gram": _bytes(self.gram), "targets": _bytes(self.targets),
                "solved": sum(_bytes(w) for w in self._solved.values())}


def _bytes(t: Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()
