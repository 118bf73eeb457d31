"""A strategy's own settings: one small frozen dataclass per strategy entry (as peft's per-method configs), kept
beside its method (:mod:`.entry`).

A settings class subclasses :class:`Settings` and is a frozen dataclass whose fields carry ``metadata["help"]``.
Its fields are changed by *keys*: the field's name, or ``"outer.inner"`` for a field of a nested dataclass (e.g.
``"region_size.tolerance"``). Keys are the names of record: ``cl-graft run`` options (``--ewc-lambda``; ``--tolerance``
for an inner field a nested field lists in its ``metadata["options"]``, inner name → help or None for the
inner field's own; a nested field with a ``metadata["name"]`` is also an option itself, given as text:
``--region-size``), grid points (:mod:`..comparison.tuning`) and the
``info["tuning"]["chosen"]`` of results files, so one option name means one setting across the registry (keys
recorded before a rename are read under today's in one place, :func:`cl_graft.regions.names.current_setting_names`).
A field whose default the preset sizes says so with ``metadata["preset"]`` and the class overrides
:meth:`Settings.from_preset`; a field with ``metadata["option"] = False`` gets no command-line option.
"""
from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Self

from cl_graft.errors import UserError
from cl_graft.presets import Preset


class Settings:
    """Base of the settings classes (subclasses are frozen dataclasses)."""

    @classmethod
    def from_preset(cls, preset: Preset, *, seed: int) -> Self:
        """The settings a run of ``preset`` with ``seed`` starts from (here: the class defaults)."""
        return cls()

    @classmethod
    def implied(cls, point: Mapping[str, Any]) -> dict[str, Any]:
        """``point`` with the settings its keys imply (here: none; a class where one setting turns another off
        says so here, so options, grid points and saved choices all mean the same)."""
        return dict(point)

    @classmethod
    def grid_fixed_by(cls, values: Mapping[str, Any]) -> str | None:
        """The key among ``values`` (setting keys → values: the options a run was given, or a settings' own
        fields) that fixes what the strategy's grid varies, or None (here: none). A strategy whose grid is fixed
        so is not tuned: ``--tune`` tries none of its points, ``--settings-from`` reuses no choice for it."""
        return None

    def batch_sizes(self) -> dict[str, int]:
        """Its own batch sizes that distributed training splits across ranks (what → rows; here: none), checked
        by ``cl-graft run`` before anything runs."""
        return {}

    def to_json(self) -> dict:
        """The settings as JSON reads them back (tuples as lists), so a saved copy compares equal."""
        return json.loads(json.dumps(asdict(self)))


@dataclass(frozen=True)
class NoSettings(Settings):
    """A strategy with nothing of its own to set (Avalanche's Naive, JointTraining)."""


@dataclass(frozen=True)
class SettingOption:
    """One setting as a command-line option.

    Attributes:
        key: ``"field"`` or ``"outer.inner"``.
        field: the dataclass field the key ends in (its default and ``metadata["help"]``).
        kind: the field's type, ``X | None`` unwrapped to ``X``.
        preset: the preset sizes its default.
        help: one line for ``--help``.
    """

    key: str
    field: dataclasses.Field
    kind: type
    preset: bool
    help: str

    @property
    def name(self) -> str:
        """The option's name without dashes: the field's ``metadata["name"]`` for a field that has one, else the key's last part (``ewc_lambda``; ``region_size.tolerance`` → ``tolerance``)."""
        return (None if "." in self.key else self.field.metadata.get("name")) or self.key.rpartition(".")[2]


def _plain(kind) -> type:
    """``X | None`` → ``X``."""
    return next(a for a in typing.get_args(kind) if a is not type(None)) if isinstance(kind, types.UnionType) \
        else kind


def setting_options(cls: type[Settings]) -> list[SettingOption]:
    """The options of a settings class: every plain field, and the inner fields a nested dataclass field lists in
    its ``metadata["options"]``."""
    hints = typing.get_type_hints(cls)
    out = []
    for fld in dataclasses.fields(cls):
        if fld.metadata.get("option") is False:
            continue
        kind = _plain(hints[fld.name])
        preset = bool(fld.metadata.get("preset"))
        if dataclasses.is_dataclass(kind):
            if fld.metadata.get("name"):                                # the field itself, given as text
                out.append(SettingOption(fld.name, fld, str, preset, fld.metadata.get("help", "")))
            inner_hints, inner = typing.get_type_hints(kind), {f.name: f for f in dataclasses.fields(kind)}
            out += [SettingOption(f"{fld.name}.{n}", inner[n], _plain(inner_hints[n]), preset,
                                  text or inner[n].metadata.get("help", ""))
                    for n, text in fld.metadata.get("options", {}).items()]
        else:
            out.append(SettingOption(fld.name, fld, kind, preset, fld.metadata.get("help", "")))
    return out


def has_setting(settings: Settings | type[Settings], key: str) -> bool:
    """Whether ``key`` names a field (or a nested dataclass's field) of ``settings``."""
    outer, _, inner = key.partition(".")
    fields = {f.name: f for f in dataclasses.fields(settings)}
    if outer not in fields:
        return False
    if not inner:
        return True
    kind = _plain(typing.get_type_hints(settings if isinstance(settings, type) else type(settings))[outer])
    return dataclasses.is_dataclass(kind) and inner in {f.name for f in dataclasses.fields(kind)}


def apply_point(settings: Settings, point: Mapping[str, Any]) -> Settings:
    """``settings`` with the values of ``point`` (key → value; validated by the class).

    Raises:
        UserError: a key that is not a setting of the class.
    """
    for key, value in type(settings).implied(point).items():
        if not has_setting(settings, key):
            raise UserError(f"setting {key!r} is not a setting of {type(settings).__name__}")
        outer, _, inner = key.partition(".")
        if inner and not dataclasses.is_dataclass(getattr(settings, outer)):
            raise UserError(f"setting {key!r} does not apply to {outer} = {getattr(settings, outer)!r}")
        settings = replace(settings, **{outer: replace(getattr(settings, outer), **{inner: value}) if inner
                                        else value})
    return settings


def in_options(text: str, cls: type[Settings]) -> str:
    """``text`` (an error about settings of ``cls``) with the fields it names written as their command-line options:
    ``'region_size.tolerance'`` and ``tolerance`` → ``--tolerance``, ``region_size = 0.1`` → ``--region-size 0.1``.
    A field whose option is named otherwise is replaced only where quoted or followed by `` =``: the bare word may
    be English too."""
    quoted, bare = {}, {}
    for opt in setting_options(cls):
        flag = "--" + opt.name.replace("_", "-")
        inner = opt.key.rpartition(".")[2]
        quoted[opt.key] = flag
        if inner == opt.name:
            bare.setdefault(inner, flag)

    def pattern(names) -> str:
        return "|".join(sorted(map(re.escape, names), key=len, reverse=True))

    text = re.sub(rf"'({pattern(quoted)})'|(?<![\w.-])({pattern(quoted)}) =", lambda m: quoted[m.group(1) or m.group(2)],
                  text)
    return re.sub(rf"(?<![\w.'-])({pattern(bare)})(?![\w.'])", lambda m: bare[m.group(1)], text)
