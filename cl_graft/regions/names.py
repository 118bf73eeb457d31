"""The two names of a region's size, and the names records written before them used.

``region_size`` is a share of the graftable elements N (the ``--region-size`` option of ``cl-graft run``,
``localize``, ``analyze`` and ``multitask``; ``LocalizeConfig.region_size``); ``region_elements`` is a count of
elements (``LocalizeConfig.region_elements``, ⌊region_size · N⌋ by default). Run records, results and region
metadata written before these names call them ``sparsity`` and ``budget``; they are read here, in one place, so that
committed artifacts load unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UserError

OLD_NAMES = {"sparsity": "region_size", "budget": "region_elements"}
"""A setting's name in records written before the rename → its name now."""


def current_names(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with the old names of :data:`OLD_NAMES` under their names now (other keys as they are).

    Raises:
        UserError: a record holding both a setting's old and new name.
    """
    out = dict(record)
    for old, new in OLD_NAMES.items():
        if old in out:
            if new in out:
                raise UserError(f"both {old!r} and {new!r} given; {old!r} is the old name of {new!r}")
            out[new] = out.pop(old)
    return out
