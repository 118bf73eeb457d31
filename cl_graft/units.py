"""The one byte unit of the console, results files, pages and README: decimal, 1 MB = 10^6 bytes (1 KB = 10^3,
1 GB = 10^9), so 4,313,375 bytes print as "4.3 MB". Records made before they named their unit
(:data:`BYTE_UNIT` absent) hold memory peaks in MiB (2^20 bytes): :func:`recorded_mb` reads either.
"""
from __future__ import annotations

KB = 10 ** 3
MB = 10 ** 6
GB = 10 ** 9
MIB = 2 ** 20
"""The MB of records made before :data:`BYTE_UNIT` was recorded."""
BYTE_UNIT = "MB = 10^6 bytes"
"""The unit as records (``byte_unit``), tables and pages state it."""


def human_bytes(n: float) -> str:
    """``n`` bytes in B, KB, MB or GB (powers of 1000): 999 → "999 B", 4_313_375 → "4.3 MB"."""
    for unit, size in (("GB", GB), ("MB", MB), ("KB", KB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def recorded_mb(value: float | None, record: dict) -> float | None:
    """A memory figure ``value`` in the MB of ``record`` (a run record) as MB of :data:`BYTE_UNIT`: records without
    ``byte_unit`` counted MiB."""
    if value is None:
        return None
    return value if record.get("byte_unit") == BYTE_UNIT else value * MIB / MB
