"""Settings and result of region finding, shared by every method of :mod:`cl_graft.regions.methods`.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600): ``sparsity``/``budget`` bound |γ| for every method;
the step, sigmoid and selection settings are those of the learned region (Eq. 3, :mod:`.learned`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from ..errors import UserError
from .region import Region

NORMALIZE = ("budget", "max", "none")


@dataclass(frozen=True)
class LocalizeConfig:
    """Hyper-parameters of region finding (all methods read ``sparsity``, ``budget`` and ``seed``)."""

    sparsity: float = field(default=1e-3, metadata={"help": "final |γ| ≤ sparsity · N (N = graftable params)"})
    steps: int = field(default=12, metadata={"help": "gradient steps on S (0 = the base region)"})
    lr: float = field(default=2.0, metadata={"help": "move of S per step for the ~budget strongest elements"})
    sigmoid_bias: float = field(default=10.0, metadata={"help": "b in σ(S − b); S starts in [0, 1)"})
    batch_size: int = field(default=16, metadata={"help": "rows per batch"})
    n_batches: int = field(default=4, metadata={"help": "batches averaged per step (and for FISH)"})
    budget: int | None = field(default=None, metadata={"help": "max |γ| (default ⌊sparsity · N⌋)"})
    base_fraction: float = field(default=1.0, metadata={"help": "top-|Δ| base as a fraction of the budget"})
    normalize: str = field(default="budget", metadata={"help": "budget, max (scale-free) or none (paper's raw lr)"})
    select_rows: int = field(default=256, metadata={"help": "train and dev rows (each) used for selection"})
    eval_every: int = field(default=1, metadata={"help": "selection evaluation period in steps"})
    seed: int = field(default=0, metadata={"help": "seed of S's init, batch order and random regions"})

    def __post_init__(self) -> None:
        if not (isinstance(self.sparsity, (int, float)) and 0 < self.sparsity <= 1):
            raise UserError(f"sparsity must be in (0, 1], got {self.sparsity}")
        for name in ("batch_size", "n_batches", "select_rows", "eval_every"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0 or self.lr <= 0 or not math.isfinite(self.lr):
            raise UserError(f"steps must be >= 0 and lr a positive number, got {self.steps} and {self.lr}")
        if not (math.isfinite(self.sigmoid_bias) and self.sigmoid_bias > 0):
            raise UserError(f"sigmoid_bias must be a positive number, got {self.sigmoid_bias}")
        if self.budget is not None and self.budget < 1:
            raise UserError(f"budget must be >= 1 element, got {self.budget} (an empty region)")
        if not 0 <= self.base_fraction <= 1:
            raise UserError(f"base_fraction must be in [0, 1], got {self.base_fraction}")
        if self.normalize not in NORMALIZE:
            raise UserError(f"normalize must be one of {NORMALIZE}, got {self.normalize!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> LocalizeConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"unknown localization setting {unknown[0]!r}")
        return cls(**d)


@dataclass
class LocalizeResult:
    """A found region (exact size in ``region.meta["size"]``), the per-step history, and the wall time."""

    region: Region
    history: list[dict]
    seconds: float
