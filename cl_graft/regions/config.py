"""Settings and result of region finding, shared by every method of :mod:`cl_graft.regions.methods`.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600): ``region_size`` (a share of the graftable elements N, the
``--region-size`` option of every command) or ``region_elements`` (a count) bound |γ| for every method; the step,
sigmoid and selection settings are those of the learned region (Eq. 3, :mod:`.learned`).

Records written before those names (``config.json``, ``results.json``, region metadata) call them ``sparsity`` and
``budget``: :func:`~.names.current_names` reads them under today's names (the config here, region metadata in
:func:`~.io.read_region`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from ..errors import UserError
from .names import current_names
from .region import Region

NORMALIZE = ("budget", "max", "none")


@dataclass(frozen=True)
class LocalizeConfig:
    """Hyper-parameters of region finding (all methods read ``region_size``, ``region_elements`` and ``seed``)."""

    region_size: float = field(default=1e-3, metadata={"help": "final |γ| ≤ region_size · N (N = graftable params)"})
    steps: int = field(default=12, metadata={"help": "gradient steps on S (0 = the base region)"})
    lr: float = field(default=2.0, metadata={"help": "move of S per step for the ~region_elements strongest "
                                                      "elements"})
    sigmoid_bias: float = field(default=10.0, metadata={"help": "b in σ(S − b); S starts in [0, 1)"})
    batch_size: int = field(default=16, metadata={"help": "rows per batch"})
    n_batches: int = field(default=4, metadata={"help": "batches averaged per step (and for FISH)"})
    region_elements: int | None = field(default=None, metadata={"help": "max |γ| (default ⌊region_size · N⌋)"})
    base_fraction: float = field(default=1.0, metadata={"help": "top-|Δ| base as a fraction of region_elements"})
    normalize: str = field(default="budget", metadata={"help": "budget (by the region_elements-th step), max "
                                                               "(scale-free) or none (paper's raw lr)"})
    select_rows: int = field(default=256, metadata={"help": "train and dev rows (each) used for selection"})
    eval_every: int = field(default=1, metadata={"help": "selection evaluation period in steps (0: no selection, "
                                                         "the region after the last step)"})
    seed: int = field(default=0, metadata={"help": "seed of S's init, batch order and random regions"})

    def __post_init__(self) -> None:
        if not (isinstance(self.region_size, (int, float)) and 0 < self.region_size <= 1):
            raise UserError(f"--region-size must be in (0, 1], got {self.region_size}")
        for name in ("batch_size", "n_batches", "select_rows"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_every < 0:
            raise UserError(f"eval_every must be >= 0 (0: no selection), got {self.eval_every}")
        if self.steps < 0 or self.lr <= 0 or not math.isfinite(self.lr):
            raise UserError(f"steps must be >= 0 and lr a positive number, got {self.steps} and {self.lr}")
        if not (math.isfinite(self.sigmoid_bias) and self.sigmoid_bias > 0):
            raise UserError(f"sigmoid_bias must be a positive number, got {self.sigmoid_bias}")
        if self.region_elements is not None and self.region_elements < 1:
            raise UserError(f"region_elements must be >= 1 element, got {self.region_elements} (an empty region)")
        if not 0 <= self.base_fraction <= 1:
            raise UserError(f"base_fraction must be in [0, 1], got {self.base_fraction}")
        if self.normalize not in NORMALIZE:
            raise UserError(f"normalize must be one of {NORMALIZE}, got {self.normalize!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> LocalizeConfig:
        """The config a :meth:`to_json` wrote, also one written before the rename (:func:`~.names.current_names`)."""
        d = current_names(d)
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
