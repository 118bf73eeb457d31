"""``ewc``: Avalanche's EWC (Kirkpatrick et al. 2017), a penalty per experience (Avalanche's ``separate``
mode)."""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError

from ..interface.entry import StrategyEntry
from ..interface.settings import Settings
from .common import MODEL, moved_bytes, plugin_of, stock, with_model


@dataclass(frozen=True)
class EWCSettings(Settings):
    """``ewc``'s."""

    ewc_lambda: float = field(default=1e4, metadata={"help": "EWC penalty weight (tune with --tune)."})

    def __post_init__(self) -> None:
        if self.ewc_lambda < 0:
            raise UserError(f"ewc_lambda must be >= 0, got {self.ewc_lambda}")


GRID = ({"ewc_lambda": 1e2}, {"ewc_lambda": 1e3}, {"ewc_lambda": 1e1}, {"ewc_lambda": 1e4},
        {"ewc_lambda": 1.0})
"""Small λ among the first three: the separate penalties add up over a long stream, and a large λ makes SGD
diverge (λ = 100 on 50 permuted digit tasks: NaN weights, every task at 10%)."""


@with_model
def kept(strategy) -> dict[str, int]:
    """EWC: per experience kept, the diagonal Fisher and the parameters after it (``separate`` mode), of the
    parameters fine-tuning moves."""
    plugin = plugin_of(strategy, "EWCPlugin")
    return {part: sum(moved_bytes(per_name, strategy.model) for per_name in per_exp.values())
            for part, per_exp in (("fisher", plugin.importances), ("old_params", plugin.saved_params))}


ENTRY = StrategyEntry(name="ewc", help="Avalanche EWC (a penalty per experience: separate mode)",
                      stores=MODEL + ", and per experience the diagonal Fisher and the weights after it",
                      build=stock("EWC", {"mode": "separate"}, ewc_lambda="ewc_lambda"), kept_bytes=kept,
                      settings=EWCSettings, grid=GRID, default=2)
