"""One registry of the continual-learning strategies that ``cl-graft run`` compares: it finds the
:class:`~..interface.entry.StrategyEntry` of every method (:mod:`..interface.entry` documents the interface)
and checks the names of a run's ``--strategies``.

Nothing here lists a method. The entries are found as stream families are: the built-in ones (:data:`STRATEGIES`,
:func:`builtin`) in every folder of ``cl_graft.strategies`` whose ``__init__.py`` declares ``ENTRIES`` (one folder
per method; the baselines' folder holds one module per baseline); those of other packages through the entry-point
group ``"cl_graft.strategies"`` (:mod:`..interface.registration`), loaded only when a name that is not built in is
looked up (:func:`find`, :func:`parse_strategies`), so a broken plugin fails that lookup alone, in one line naming
its entry point and distribution. A built-in name always means the built-in strategy; once plugins are loaded, a
plugin's strategy named as another one is refused naming both. An entry declares everything the harness needs, so the
runner, the report and the command name no strategy: its settings and ``--tune`` grid, its builder, the bytes
it keeps, how it walks the stream, its capabilities as objects (``state``, ``routes``, ``peers``), what its
report shows (``report_lines``, ``progress_fields``), the reference it plays (``reference``) and its place
among the default ``--strategies`` (``default``).

Avalanche is imported only when a strategy is built.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from typing import Any

from cl_graft import plugin_points
from cl_graft.errors import UserError
from cl_graft.plugin_points import Origin
from cl_graft.presets import Preset

from ..interface.entry import REFERENCES, StrategyEntry
from ..interface.registration import ENTRY_POINTS, module_entries, point_entries
from ..interface.settings import SettingOption, Settings, apply_point, has_setting, in_options, setting_options

PACKAGE = "cl_graft.strategies"
"""The package whose folders are searched for methods' ``ENTRIES``."""


def builtin() -> list[StrategyEntry]:
    """The entries of the folders of :data:`PACKAGE` (in name order); no plugin is loaded."""
    return [entry for info in pkgutil.iter_modules(importlib.import_module(PACKAGE).__path__) if info.ispkg
            for entry in module_entries(importlib.import_module(f"{PACKAGE}.{info.name}"))]


def collect(entries: Iterable[StrategyEntry]) -> dict[str, StrategyEntry]:
    """name → entry, the default ``--strategies`` first in their order, then the rest as given.

    Raises:
        ValueError: two entries with one name, one place among the defaults or one reference; or an entry
            whose peer is no entry.
    """
    entries = list(entries)
    table = {e.name: e for e in entries}
    if len(table) != len(entries):
        raise ValueError("two strategy entries share a name")
    missing = [(e.name, p) for e in entries for p in e.peers if p not in table]
    if missing:
        raise ValueError(f"{missing[0][0]}: peer {missing[0][1]!r} is no strategy entry")
    for what in ("default", "reference"):
        taken = [getattr(e, what) for e in entries if getattr(e, what) is not None]
        if len(set(taken)) != len(taken):
            raise ValueError(f"two strategy entries share one {what}: {sorted(taken, key=str)}")
    order = sorted(entries, key=lambda e: (e.default is None, e.default or 0))     # stable: the rest as given
    return {e.name: e for e in order}


STRATEGIES: dict[str, StrategyEntry] = collect(builtin())
"""The built-in strategies, name → entry (plugins' are found by :func:`find`)."""
DEFAULT_STRATEGIES = tuple(n for n, e in STRATEGIES.items() if e.default is not None)


WANTED = "StrategyEntry (a module defining ENTRY or ENTRIES, or module:attr of an entry or a tuple of them)"
"""What a strategy plugin's entry point must name, for its error."""


def plugin_table() -> dict[str, StrategyEntry]:
    """name → entry, every strategy of the entry-point group :data:`~..interface.registration.ENTRY_POINTS`
    (every plugin loaded now; empty without plugins).

    Raises:
        UserError: a plugin that cannot be loaded or names no entry (naming its entry point and distribution), a
            strategy named as a built-in one or another plugin's (naming both), or entries that do not fit beside
            the built-in ones (a second default place or reference, a peer that is no strategy); one line each.
    """
    return {entry.name: entry for entry, _ in _plugins()}


def plugin_records(names: Iterable[str]) -> dict[str, dict]:
    """The run record's ``strategy_plugins`` field: for each of ``names`` that a plugin serves, its module,
    distribution and entry point (:meth:`cl_graft.plugin_points.Origin.record`); plugins are loaded only when a
    name is not built in.

    Raises:
        UserError: as :func:`plugin_table`.
    """
    wanted = [name for name in names if name not in STRATEGIES]
    return {entry.name: origin.record(entry.name) for entry, origin in (_plugins() if wanted else [])
            if entry.name in wanted}


def _plugins() -> list[tuple[StrategyEntry, Origin]]:
    """Every plugin's entries and where each comes from (:func:`plugin_table`, which documents what it raises)."""
    found = []
    for point in plugin_points.points(ENTRY_POINTS):
        entries, origin = plugin_points.load(point, kind="strategy", pick=point_entries, wanted=WANTED)
        found += [(entry, origin) for entry in entries]
    builtin_origin = Origin.builtin(PACKAGE)
    plugin_points.refuse_one_name_twice([*((name, builtin_origin) for name in STRATEGIES),
                                         *((entry.name, origin) for entry, origin in found)], kinds="strategies")
    try:
        collect([*STRATEGIES.values(), *(entry for entry, _ in found)])
    except ValueError as e:
        names = ", ".join(origin.describe(entry.name) for entry, origin in found)
        raise UserError(f"the strategies of plugins {names} do not fit beside the built-in ones: {e}") from None
    return found


def find(name: str) -> StrategyEntry | None:
    """Strategy ``name``'s entry: the built-in one, else a plugin's (every plugin loaded: :func:`plugin_table`),
    else None.

    Raises:
        UserError: as :func:`plugin_table`, for a name that is not built in.
    """
    return STRATEGIES[name] if name in STRATEGIES else plugin_table().get(name)


def entry_of(name: str) -> StrategyEntry:
    """Strategy ``name``'s entry (:func:`find`).

    Raises:
        UserError: no strategy has that name (listing those there are), or as :func:`plugin_table`.
    """
    found = find(name)
    if found is None:
        raise UserError(f"unknown strategy {name!r}; choose from {', '.join([*STRATEGIES, *plugin_table()])}")
    return found


def reference(role: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` whose entry plays ``role`` (a key of :data:`~..interface.entry.REFERENCES`), or
    None."""
    if role not in REFERENCES:
        raise ValueError(f"no reference role {role!r}; roles: {tuple(REFERENCES)}")
    return next((n for n in names if (found := find(n)) is not None and found.reference == role), None)


def parse_strategies(text: str) -> list[str]:
    """Validated strategy names from ``"a,b,..."``: no repeats, at least one, each strategy's peers
    (:attr:`..interface.entry.StrategyEntry.peers`) before it; plugins are loaded only when a name is not built in.

    Raises:
        UserError: one line: an empty list, an unknown name, a repeat, a peer after its reader, or as
            :func:`plugin_table`.
    """
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise UserError("--strategies is empty; choose from " + ", ".join(STRATEGIES))
    entries = {n: entry_of(n) for n in names}            # plugins are loaded for a name that is not built in
    if len(set(names)) != len(names):
        raise UserError(f"a strategy appears twice in --strategies: {text!r}")
    for i, n in enumerate(names):
        missing = [p for p in entries[n].peers if p not in names[:i]]
        if missing:
            raise UserError(f"{n} reads the result of {missing[0]} in the same run: put {missing[0]} before it "
                            f"in --strategies")
    return names


def registry_options(entries: Iterable[StrategyEntry] | None = None) -> list[SettingOption]:
    """One option per setting of the strategies (default: every entry of :data:`STRATEGIES`); a setting several
    strategies share (e.g. two modes of one method) is one option.

    Raises:
        ValueError: two settings classes name different settings alike.
    """
    seen: dict[str, SettingOption] = {}
    for entry in STRATEGIES.values() if entries is None else entries:
        for opt in setting_options(entry.settings):
            prev = seen.setdefault(opt.name, opt)
            if (prev.key, prev.kind, prev.field.default) != (opt.key, opt.kind, opt.field.default):
                raise ValueError(f"{entry.name}: setting {opt.key!r} clashes with another strategy's {prev.key!r}")
    return list(seen.values())


def strategy_settings(name: str, preset: Preset, *, seed: int, given: Mapping[str, Any] | None = None) -> Settings:
    """Strategy ``name``'s settings in a run of ``preset`` with ``seed``: the preset's, changed by those of the
    ``given`` keys (e.g. command-line options) that its settings class has.

    Raises:
        UserError: a given value its class refuses, the settings named as command-line options
            (:func:`..interface.settings.in_options`).
    """
    cls = entry_of(name).settings
    try:
        return apply_point(cls.from_preset(preset, seed=seed),
                           {k: v for k, v in (given or {}).items() if has_setting(cls, k)})
    except UserError as e:                                       # the options given, named as options
        raise UserError(in_options(str(e), cls)) from None
