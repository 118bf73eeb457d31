"""``lwf``: Avalanche's LwF (Li & Hoiem 2016; Avalanche's defaults), distillation from the previous model."""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError

from ..interface.entry import StrategyEntry
from ..interface.settings import Settings
from .common import MODEL, copy_bytes, plugin_of, positive, stock, with_model


@dataclass(frozen=True)
class LwFSettings(Settings):
    """``lwf``'s."""

    lwf_alpha: float = field(default=1.0, metadata={"help": "LwF distillation weight."})
    lwf_temperature: float = field(default=2.0, metadata={"help": "LwF softmax temperature."})

    def __post_init__(self) -> None:
        if self.lwf_alpha < 0:
            raise UserError(f"lwf_alpha must be >= 0, got {self.lwf_alpha}")
        positive("lwf_temperature", self.lwf_temperature)


GRID = ({"lwf_alpha": 0.5, "lwf_temperature": 2.0}, {"lwf_alpha": 1.0, "lwf_temperature": 2.0},
        {"lwf_alpha": 1.0, "lwf_temperature": 1.0}, {"lwf_alpha": 2.0, "lwf_temperature": 2.0},
        {"lwf_alpha": 0.5, "lwf_temperature": 1.0})


@with_model
def kept(strategy) -> dict[str, int]:
    """LwF: a copy of the model after the previous experience (its distillation teacher)."""
    plugin = plugin_of(strategy, "LwFPlugin")
    return {"previous_model": copy_bytes(plugin.lwf.prev_model)}


ENTRY = StrategyEntry(name="lwf", help="Avalanche LwF (distillation from the previous model)",
                      stores=MODEL + " and the previous model",
                      build=stock("LwF", alpha="lwf_alpha", temperature="lwf_temperature"), kept_bytes=kept,
                      settings=LwFSettings, grid=GRID, default=3)
