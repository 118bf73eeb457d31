"""Checks of the JSON files cl-graft reads back (run records, skills, progress, results): a hand-edited file that
is valid JSON but lacks a field, or holds one of the wrong kind, is a one-line :class:`UserError` naming the file
and the field, not a traceback.

A schema is a Python type (``str``, ``int``, ``float`` = any number, ``bool``, ``dict`` = any object, ``list`` =
any list) or one of :class:`ListOf`, :class:`MapOf`, :class:`Obj`, :class:`Nullable` and :class:`Between` (a number
in a range, never NaN)::

    PROGRESS = Obj({"tasks": ListOf(str), "rows": ListOf(ListOf(Between(0, 1))), "seconds": Between(0)})
    state = read_checked(path, PROGRESS)

A file cl-graft writes and reads back as the commit point of a run carries the sha256 of its own content
(:func:`sealed`, checked by :func:`check_sealed`, as a patch's ``patch_config.json`` carries its tensors'), so a
hand edit that keeps every field valid is still refused; :func:`first_difference` names the field where a file
and what the run expects part.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError
from .files import read_json

_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a JSON object",
          list: "a list"}


@dataclass(frozen=True)
class ListOf:
    """A list whose every item matches ``item``."""

    item: Any


@dataclass(frozen=True)
class MapOf:
    """A JSON object whose every value matches ``value``."""

    value: Any


@dataclass(frozen=True)
class Nullable:
    """``null`` or a value matching ``inner``."""

    inner: Any


@dataclass(frozen=True)
class Between:
    """A number in ``[low, high]`` (NaN is in no range)."""

    low: float
    high: float = math.inf


@dataclass(frozen=True)
class Obj:
    """A JSON object with ``required`` fields (name → schema) and ``optional`` ones; other fields are allowed."""

    required: Mapping[str, Any]
    optional: Mapping[str, Any] = field(default_factory=dict)


def _is(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _problem(value: Any, spec: Any, where: str) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for the first mismatch of ``value`` against ``spec``, or None."""
    if isinstance(spec, Nullable):
        return None if value is None else _problem(value, spec.inner, where)
    if isinstance(spec, Between):
        if not _is(value, float):
            return where, f"must be a number, got {_shown(value)}"
        if not spec.low <= value <= spec.high:
            upper = "" if spec.high == math.inf else f", at most {spec.high:g}"
            return where, f"must be a number of at least {spec.low:g}{upper}, got {_shown(value)}"
        return None
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return where, f"must be a list, got {_shown(value)}"
        return next(filter(None, (_problem(v, spec.item, f"{where}[{i}]") for i, v in enumerate(value))), None)
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            return where, f"must be a JSON object, got {_shown(value)}"
        return next(filter(None, (_problem(v, spec.value, _join(where, k)) for k, v in value.items())), None)
    if isinstance(spec, Obj):
        if not isinstance(value, dict):
            return where, f"must be a JSON object, got {_shown(value)}"
        missing = [k for k in spec.required if k not in value]
        if missing:
            return _join(where, missing[0]), "is missing"
        fields = {**spec.required, **{k: s for k, s in spec.optional.items() if k in value}}
        return next(filter(None, (_problem(value[k], s, _join(where, k)) for k, s in fields.items())), None)
    if not _is(value, spec):
        return where, f"must be {_NAMES.get(spec, spec.__name__)}, got {_shown(value)}"
    return None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 30 else text[:27] + "..."


def check_json(path: str | os.PathLike, value: Any, spec: Any) -> Any:
    """Returns ``value`` if it matches ``spec``.

    Raises:
        UserError: ``<path>: field 'rows[1]' must be a list, got 3`` (the file, the field, what is wrong).
    """
    problem = _problem(value, spec, "")
    if problem is not None:
        where, what = problem
        raise UserError(f"{path}: field {where!r} {what}" if where else f"{path}: the file {what}")
    return value


def read_checked(path: str | os.PathLike, spec: Any) -> Any:
    """The JSON file at ``path`` (:func:`~cl_graft.files.read_json`), checked against ``spec``."""
    return check_json(path, read_json(path), spec)


SEAL = "sha256"
"""The field holding the sha256 of the rest of a sealed file."""


def _digest(value: Mapping[str, Any]) -> str:
    body = {k: v for k, v in value.items() if k != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def sealed(value: Mapping[str, Any]) -> dict:
    """``value`` with the sha256 of its content in field :data:`SEAL`."""
    return {**value, SEAL: _digest(value)}


def check_sealed(path: str | os.PathLike, value: Mapping[str, Any]) -> Mapping[str, Any]:
    """Returns ``value`` if its :data:`SEAL` matches its content.

    Raises:
        UserError: a missing or other sha256 (the file was edited after cl-graft wrote it).
    """
    if value.get(SEAL) != _digest(value):
        raise UserError(f"{path}: field {SEAL!r} does not match the file's content: it was edited after cl-graft "
                        f"wrote it")
    return value


def check_rows(path: str | os.PathLike, where: str, rows: list[list], width: int,
               counts: range | tuple[int, ...]) -> None:
    """Refuses rows (field ``where``: a list of accuracy rows over ``width`` tasks) whose count is not in ``counts``
    or a row that is not ``width`` long.

    Raises:
        UserError: ``<path>: field 'rows[1]' holds 2 accuracies, the stream has 3 tasks`` (or the count named).
    """
    if len(rows) not in counts:
        allowed = f"{counts.start} to {counts.stop - 1}" if isinstance(counts, range) else \
            " or ".join(map(str, sorted(set(counts))))
        raise UserError(f"{path}: field {where!r} holds {len(rows)} rows, not {allowed} for a stream of {width} tasks")
    short = next((i for i, row in enumerate(rows) if len(row) != width), None)
    if short is not None:
        raise UserError(f"{path}: field '{where}[{short}]' holds {len(rows[short])} accuracies, the stream has "
                        f"{width} tasks")


def first_difference(saved: Any, wanted: Any, where: str) -> tuple[str, Any, Any] | None:
    """``(field, saved value, wanted value)`` of the first place where ``saved`` and ``wanted`` part (objects key
    by key, lists item by item), or None when they are equal."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        for key in [*wanted, *(k for k in saved if k not in wanted)]:
            found = first_difference(saved.get(key), wanted.get(key), _join(where, key))
            if found is not None:
                return found
        return None
    if isinstance(saved, list) and isinstance(wanted, list) and len(saved) == len(wanted):
        return next(filter(None, (first_difference(a, b, f"{where}[{i}]")
                                  for i, (a, b) in enumerate(zip(saved, wanted)))), None)
    return None if saved == wanted else (where, saved, wanted)
