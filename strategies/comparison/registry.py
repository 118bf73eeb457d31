"""One registry of the continual-learning strategies that ``cl-graft run`` compares: it collects the
:class:`~..interface.entry.StrategyEntry` of every method, each kept beside its method (:mod:`..interface.entry` documents the
interface), and checks the names of a run's ``--strategies``.

An entry (peft style: each method's folder owns it) declares everything the harness needs, so the runner and the
command name no strategy: ``settings`` (its settings class, one ``cl-graft run`` option per field) and ``grid``
(its ``--tune`` candidates in order; the run's one ``--tune-budget`` takes the first ones), ``build(ctx)`` (its
Avalanche template from a :class:`~..interface.entry.BuildContext`), ``kept_bytes`` and ``stores`` (what it keeps beyond the
model it starts from, as a number and in words), ``fit`` (how it walks the stream), and its capabilities as
objects, never inferred from its plugins: ``state`` (a :class:`~..interface.entry.StrategyState`, saved after every
experience and loaded by ``--resume``; the runner's progress file is the commit point), ``routes`` (a
:class:`~..interface.entry.Routing`: serves test rows without their task labels), ``peers`` (strategies whose results it
reads; they run before it) and ``phase_after_training`` (a label for the progress line).

- ``graft``, ``graft-paper``: :mod:`cl_graft.strategies.graft.entry`;
- ``packnet``, ``packnet-zero``: :mod:`cl_graft.strategies.plugins.packnet_entry`;
- ``naive``, ``ewc``, ``lwf``, ``replay``, ``replay-matched``, ``joint``, ``single``, ``si``, ``gem``, ``agem``,
  ``cumulative``, ``er-ace``, ``der``, ``icarl``, ``bic``: Avalanche's strategies,
  :mod:`cl_graft.strategies.baselines`.

Avalanche is imported only when a strategy is built.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cl_graft.errors import UserError
from cl_graft.presets import Preset

from ..baselines import ENTRIES as BASELINE_ENTRIES
from ..graft.entry import ENTRIES as GRAFT_ENTRIES
from ..plugins.packnet_entry import ENTRIES as PACKNET_ENTRIES
from ..interface.entry import StrategyEntry
from ..interface.settings import SettingOption, Settings, apply_point, has_setting, in_options, setting_options


def _collect(*groups: Iterable[StrategyEntry]) -> dict[str, StrategyEntry]:
    """name → entry of every group's entries.

    Raises:
        ValueError: two entries with one name, or an entry whose peer is no entry.
    """
    entries = [e for group in groups for e in group]
    table = {e.name: e for e in entries}
    if len(table) != len(entries):
        raise ValueError("two strategy entries share a name")
    missing = [(e.name, p) for e in entries for p in e.peers if p not in table]
    if missing:
        raise ValueError(f"{missing[0][0]}: peer {missing[0][1]!r} is no strategy entry")
    return table


STRATEGIES: dict[str, StrategyEntry] = _collect(GRAFT_ENTRIES, PACKNET_ENTRIES, BASELINE_ENTRIES)
DEFAULT_STRATEGIES = ("graft", "naive", "ewc", "lwf", "replay", "joint")


def parse_strategies(text: str) -> list[str]:
    """Validated strategy names from ``"graft,naive,..."``: no repeats, at least one, each strategy's peers
    (:attr:`.entry.StrategyEntry.peers`) before it."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise UserError("--strategies is empty; choose from " + ", ".join(STRATEGIES))
    for n in names:
        if n not in STRATEGIES:
            raise UserError(f"unknown strategy {n!r}; choose from {', '.join(STRATEGIES)}")
    if len(set(names)) != len(names):
        raise UserError(f"a strategy appears twice in --strategies: {text!r}")
    for i, n in enumerate(names):
        missing = [p for p in STRATEGIES[n].peers if p not in names[:i]]
        if missing:
            raise UserError(f"{n} reads the result of {missing[0]} in the same run: put {missing[0]} before it "
                            f"in --strategies")
    return names


def registry_options(entries: Iterable[StrategyEntry] | None = None) -> list[SettingOption]:
    """One option per setting of the strategies (default: every entry of :data:`STRATEGIES`); a setting several
    strategies share (``graft``'s and ``graft-paper``'s sparsity) is one option.

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
    cls = STRATEGIES[name].settings
    try:
        return apply_point(cls.from_preset(preset, seed=seed),
                           {k: v for k, v in (given or {}).items() if has_setting(cls, k)})
    except UserError as e:                                       # the options given, named as options
        raise UserError(in_options(str(e), cls)) from None
