"""``der``: Avalanche's DER (DER++, Buzzega et al. 2020; β = 0 is DER): replay of rows and their logits; a
class-incremental method, on tensor rows (digits)."""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError

from ..interface.entry import StrategyEntry
from .common import (
    CLASS,
    MODEL,
    OWN_LOADER,
    ReplayFamily,
    buffer,
    memory_rows,
    rows_bytes,
    stock,
    tensor_bytes,
    tensor_rows,
    with_model,
)


@dataclass(frozen=True)
class DERSettings(ReplayFamily):
    """``der``'s."""

    der_alpha: float = field(default=0.1, metadata={
        "help": "DER: weight of the logit-matching loss on memory."})
    der_beta: float = field(default=0.5, metadata={
        "help": "DER++: weight of the label loss on memory (0: DER)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.der_alpha < 0 or self.der_beta < 0:
            raise UserError(f"der_alpha and der_beta must be >= 0, got {self.der_alpha}, {self.der_beta}")


GRID = ({"der_alpha": 0.1, "der_beta": 0.5}, {"der_alpha": 0.5, "der_beta": 0.5},
        {"der_alpha": 0.5, "der_beta": 1.0}, {"der_alpha": 0.2, "der_beta": 0.0},
        {"der_alpha": 1.0, "der_beta": 0.5})


def _kept(strategy) -> dict[str, int]:
    """DER: the memory's rows and the logits stored with each."""
    rows = buffer(strategy)
    logits = sum(tensor_bytes(rows[i][3]) for i in range(len(rows)))
    return {"memory": rows_bytes(rows), "logits": logits}


ENTRY = StrategyEntry(
    name="der", help="Avalanche DER (DER++: replay of rows and their logits; --scenario class)",
    stores=MODEL + ", replay_mem rows and their logits",
    build=stock("DER", mem_size="replay_mem", alpha="der_alpha", beta="der_beta"),
    check=tensor_rows("der", OWN_LOADER), kept_bytes=with_model(_kept, memory_rows), settings=DERSettings,
    grid=GRID, scenarios=CLASS)
