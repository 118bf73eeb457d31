"""The two names of a region's size, and the names records written before them used.

``region_size`` is a share of the graftable elements N (the ``--region-size`` option of ``cl-graft run``,
``localize``, ``analyze`` and ``multitask``; ``LocalizeConfig.region_size``; graft's setting ``region_size`` in
``cl-graft run``'s records, ``--tune`` grid points and ``--settings-from``); ``region_elements`` is a count of
elements (``LocalizeConfig.region_elements``, ⌊region_size · N⌋ by default; each task's count in graft's and
PackNet's ``info["region_elements"]``). Run records, results and region metadata written before these names call
them otherwise; they are read here, in one place, so that committed artifacts load unchanged:

- :data:`OLD_NAMES` (``sparsity``, ``budget``): localization configs, region metadata, surgical results;
- :data:`OLD_SETTING_NAMES` (``size``): graft's setting in ``strategy_settings``, tuning points and the settings of
  a saved graft run (``graft_run.json``);
- :data:`OLD_INFO_NAMES` (``region_sizes``, which held counts): a strategy result's ``info``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UserError

OLD_NAMES = {"sparsity": "region_size", "budget": "region_elements"}
"""A setting's name in records written before the rename → its name now."""

OLD_SETTING_NAMES = {"size": "region_size"}
"""A strategy setting's key in ``cl-graft run`` records written before the rename (graft's ``size``:
``strategy_settings.graft`` of config.json/results.json, ``info.tuning``'s ``chosen`` and ``grid``) → its key now;
a dotted key (``size.tolerance``) is renamed by its first part."""

OLD_INFO_NAMES = {"region_sizes": "region_elements"}
"""A field of a strategy result's ``info`` in results written before the rename → its name now."""


def current_names(record: Mapping[str, Any], old_names: Mapping[str, str] = OLD_NAMES) -> dict[str, Any]:
    """``record`` with the old names of ``old_names`` under their names now (other keys as they are).

    Raises:
        UserError: a record holding both a setting's old and new name.
    """
    out = dict(record)
    for old, new in old_names.items():
        if old in out:
            if new in out:
                raise UserError(f"both {old!r} and {new!r} given; {old!r} is the old name of {new!r}")
            out[new] = out.pop(old)
    return out


def current_setting_names(point: Mapping[str, Any]) -> dict[str, Any]:
    """``point`` (setting key → value: a strategy's settings as JSON, a grid point, a tuning choice) with the
    keys of :data:`OLD_SETTING_NAMES` under their names now, dotted keys by their first part
    (``{"size": "auto", "size.tolerance": 0.01}`` → ``{"region_size": "auto", "region_size.tolerance": 0.01}``).

    Raises:
        UserError: a point holding a key under both its old and new name.
    """
    out: dict[str, Any] = {}
    for key, value in point.items():
        outer, dot, inner = key.partition(".")
        new = OLD_SETTING_NAMES.get(outer, outer) + dot + inner
        if new != key and new in point:
            raise UserError(f"both {key!r} and {new!r} given; {outer!r} is the old name of {new.partition('.')[0]!r}")
        out[new] = value
    return out


def recorded_key(record: Mapping[str, Any], key: str) -> str:
    """The key under which ``record`` holds setting ``key``: ``key`` itself, else an old name of it
    (:data:`OLD_SETTING_NAMES`), else ``key``; for errors that name the field as the file wrote it."""
    return next((k for k in (key, *(old for old, new in OLD_SETTING_NAMES.items() if new == key)) if k in record), key)


def region_elements(info: Mapping[str, Any]) -> list[int] | None:
    """Each task's region element count in a strategy result's ``info`` (graft, PackNet:
    ``info["region_elements"]``, ``region_sizes`` in results written before the rename); None without one."""
    return current_names(info, OLD_INFO_NAMES).get("region_elements")
