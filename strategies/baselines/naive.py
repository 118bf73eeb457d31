"""``naive``: Avalanche's ``Naive``, plain fine-tuning on each experience; the report's plain reference (every
other strategy's matrix is compared with its, every wall time given as a multiple of its)."""
from __future__ import annotations

from ..interface.entry import StrategyEntry
from .common import MODEL, model_only, stock

ENTRY = StrategyEntry(name="naive", help="Avalanche Naive: plain fine-tuning on each experience",
                      stores=MODEL, build=stock("Naive"), kept_bytes=model_only, reference="plain", default=1)
