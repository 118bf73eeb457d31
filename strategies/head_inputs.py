"""A forward pre-hook that records what a module is given: the features a head reads (pure torch).

Graft routes test rows by the statistics of its heads' inputs (:mod:`cl_graft.strategies.routing.features`)
and the ``ncm`` baseline sets each class's mean of them (:mod:`cl_graft.strategies.baselines.ncm`); both record
them with :class:`HeadInputs`.
"""
from __future__ import annotations

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
