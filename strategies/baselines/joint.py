"""``joint``: Avalanche's ``JointTraining`` on the whole stream at once (the upper reference: one ``train``
with T × the steps)."""
from __future__ import annotations

from ..interface.entry import StrategyEntry
from .common import MODEL, model_only, stock

ENTRY = StrategyEntry(name="joint", help="Avalanche JointTraining on the whole stream (upper reference)",
                      stores=MODEL, build=stock("JointTraining"), kept_bytes=model_only, fit="whole-stream",
                      default=5)
