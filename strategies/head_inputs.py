"""A forward pre-hook that records what a module is given: the features a head reads (pure torch).

Graft routes test rows by the statistics of its heads' inputs (:mod:`cl_graft.strategies.routing.features`)
and the ``ncm`` baseline sets each class's mean of them (:mod:`cl_graft.strategies.baselines.ncm`); both record
them with :class:`HeadInputs`. :class:`SeenRows` keeps the θ_pre features of rows evaluated before.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Self

import torch
from torch import Tensor, nn

from cl_graft.errors import UserError


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


SEEN_LIMIT = 256 * 10**6
"""Bytes of features :class:`SeenRows` keeps at most (about 170,000 rows of 384 float32 features)."""


class SeenRows:
    """The features a function gave rows it saw before, found by each row's bytes: Avalanche evaluates every test
    row after every experience, and θ_pre's features of a row do not change, so its encoder pass runs once. Rows
    are told apart by a 16-byte BLAKE2b digest of their tensor (with its padding: the same rows batched alike, as
    an evaluation loop batches them each time, are found again).

    Whether they still hold is checked, not assumed: after :meth:`begin_` (each evaluation) the first batch
    holding kept rows is computed whole and compared with what was kept; where they differ (the model they were
    computed with has changed) every kept row is forgotten.

    Args:
        limit: bytes of features kept at most; rows beyond it are computed every time.
        tolerance: the relative and absolute difference a check allows (float noise of another kernel order).

    Attributes:
        computed, reused: rows whose features were computed, and rows answered from what was kept.
        checks, forgotten: checks made, and those that found the kept rows changed.
    """

    def __init__(self, *, limit: int = SEEN_LIMIT, tolerance: float = 1e-5) -> None:
        self.limit, self.tolerance = limit, tolerance
        self.computed = self.reused = self.checks = self.forgotten = 0
        self._rows: dict[bytes, Tensor] = {}
        self._bytes, self._check = 0, False

    def info(self) -> dict:
        """``{"feature_rows": {"computed", "reused", "checks", "forgotten"}}`` for a run's record; empty when no
        row came."""
        if not self.computed:
            return {}
        return {"feature_rows": {"computed": self.computed, "reused": self.reused, "checks": self.checks,
                                 "forgotten": self.forgotten}}

    def begin_(self) -> None:
        """The next batch holding kept rows checks them (call it before each evaluation)."""
        self._check = True

    def get(self, x: Tensor, compute: Callable[[Tensor], Tensor], *, tag: str = "") -> Tensor:
        """``compute(x)`` ``(B, d)`` for ``x`` ``(B, ...)``, calling ``compute`` only on the rows not seen before
        under ``tag`` (one call on those rows, in their order), or on every row when it checks them."""
        host = x.detach().cpu().contiguous()
        keys = [hashlib.blake2b(row.numpy().tobytes(), digest_size=16, person=tag.encode()[:16]).digest()
                for row in host]
        missing = [i for i, k in enumerate(keys) if k not in self._rows]
        if self._check and len(missing) < len(x):
            self._check, self.checks = False, self.checks + 1
            fresh = compute(x)
            kept = [i for i, k in enumerate(keys) if k in self._rows]
            if not torch.allclose(fresh[kept], torch.stack([self._rows[keys[i]] for i in kept]),
                                  rtol=self.tolerance, atol=self.tolerance):
                self._rows, self._bytes, self.forgotten = {}, 0, self.forgotten + 1
            self.computed += len(x)
            self._keep(keys, range(len(x)), fresh)
            return fresh
        self.computed, self.reused = self.computed + len(missing), self.reused + len(x) - len(missing)
        if not missing:
            return torch.stack([self._rows[k] for k in keys])
        fresh = compute(x if len(missing) == len(x) else x[missing])
        self._keep([keys[i] for i in missing], range(len(missing)), fresh)
        if len(missing) == len(x):
            return fresh
        place = {i: j for j, i in enumerate(missing)}
        return torch.stack([fresh[place[i]] if i in place else self._rows[k] for i, k in enumerate(keys)])

    def _keep(self, keys: list[bytes], rows: range, fresh: Tensor) -> None:
        """Keeps ``fresh[j]`` under ``keys[j]`` for ``j`` in ``rows`` (not those already kept), within the limit."""
        for j in rows:
            if keys[j] in self._rows:
                continue
            if self._bytes + fresh[j].nbytes > self.limit:
                return
            self._rows[keys[j]] = fresh[j].clone()              # not a view of what the caller gets
            self._bytes += fresh[j].nbytes
