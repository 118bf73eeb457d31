"""``joint``: Avalanche's ``JointTraining`` on the whole stream at once: a ceiling, not a continual method (it sees
every class at once; one ``train`` with T × the steps)."""
from __future__ import annotations

from ..interface.entry import StrategyEntry
from .common import MODEL, model_only, stock

ENTRY = StrategyEntry(name="joint", help="ceiling, not a continual method: Avalanche JointTraining on the whole "
                      "stream at once", stores=MODEL, build=stock("JointTraining"), kept_bytes=model_only,
                      fit="whole-stream", default=5)
