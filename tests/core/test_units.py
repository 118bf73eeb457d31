"""The one byte unit: MB = 10^6 bytes everywhere, and old records' MiB read as such."""
from __future__ import annotations

from cl_graft.units import BYTE_UNIT, human_bytes, recorded_mb


def test_human_bytes_counts_powers_of_1000():
    assert human_bytes(4_313_375) == "4.3 MB"                 # 4.1 in MiB
    assert human_bytes(999) == "999 B" and human_bytes(2_000) == "2.0 KB" and human_bytes(3.5e9) == "3.5 GB"


def test_old_records_memory_was_mib():
    assert recorded_mb(1000, {}) == 1000 * 2 ** 20 / 10 ** 6
    assert recorded_mb(1000, {"byte_unit": BYTE_UNIT}) == 1000 and recorded_mb(None, {}) is None
