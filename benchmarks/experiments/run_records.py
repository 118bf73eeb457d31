"""Whether a committed artifact's run record says how it was made: the "run record incomplete" mark.

A record is complete when it names the command line, the device and a clean git revision. A revision ending in
``+dirty`` was made from uncommitted changes, so no commit reproduces it: that is incomplete too.
:func:`record_note` words the mark of one record; :func:`incomplete_artifacts` finds the marked records among the
JSON artifacts a results page names (BENCHMARKS.md's "More results" index shows them beside the page).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

RECORD_KEYS = ("run", "config", "record")
"""The fields of an artifact that hold its run record (``results.json``: ``run``; older ones ``config``)."""


def record_note(record: dict) -> str | None:
    """"run record incomplete: ..." when ``record`` lacks the command line (``command_line``, or an older
    record's ``argv``), the device's name (``device_name``; an older record's ``device`` says only "cpu") or a clean
    git revision (unknown, or ``+dirty``: made from uncommitted changes); None for a complete record."""
    missing = [label for keys, label in ((("command_line", "argv"), "command line"), (("device_name",), "device name"))
               if not any(record.get(k) for k in keys)]                  # argv: the older records' command line
    revs = record.get("git_revision") or []
    revs = [str(r) for r in (revs if isinstance(revs, list) else [revs])]     # a merged artifact: one per part
    known = bool(revs) and "unknown" not in revs
    dirty = any(r.endswith("+dirty") for r in revs)
    if not missing and known and not dirty:
        return None
    parts = [f"no {' or '.join(missing)} recorded"] if missing else []
    short = ", ".join(r[:7] + ("+dirty" if r.endswith("+dirty") else "") for r in revs)
    parts.append("revision unknown" if not known else
                 f"revision {short} (uncommitted changes)" if dirty else f"revision {short}")
    return "run record incomplete: " + "; ".join(parts)


def artifact_records(data) -> list[dict]:
    """The run records a loaded JSON artifact holds: those of its parts (a merged artifact's ``runs``), else its
    :data:`RECORD_KEYS` fields, or itself when it is a record (a ``config.json``: it has a ``command_line`` or a
    ``git_revision``)."""
    if not isinstance(data, dict):
        return []
    runs = data.get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r, dict) and "command_line" in r for r in runs):
        return runs                                      # a merged artifact: each part's own record
    found = [data[k] for k in RECORD_KEYS if isinstance(data.get(k), dict)
             and {"command_line", "git_revision", "device_name"} & set(data[k])]
    return found or ([data] if {"command_line", "git_revision"} & set(data) else [])


def _files(root: Path, pattern: str) -> list[Path]:
    """The JSON files under ``root`` that an artifact pattern names (a file, a folder, or a glob of either)."""
    out = []
    for hit in sorted(root.glob(pattern.rstrip("/"))):
        out += sorted(hit.rglob("*.json")) if hit.is_dir() else [hit] if hit.suffix == ".json" else []
    return out


def incomplete_artifacts(patterns: Iterable[str], root: Path) -> dict[str, str]:
    """``{folder or file relative to root: its record_note}`` for the artifacts ``patterns`` name whose run record
    is incomplete (a folder's records sharing one note are listed once, as the folder)."""
    notes: dict[str, set[str]] = {}
    for pattern in patterns:
        for path in _files(root, pattern):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            for record in artifact_records(data):
                note = record_note(record)
                if note:
                    notes.setdefault(path.relative_to(root).as_posix(), set()).add(note)
    by_folder: dict[str, set[str]] = {}
    for rel, found in notes.items():
        key = rel.rsplit("/", 1)[0] + "/" if rel.endswith(("/config.json", "/results.json")) else rel
        by_folder.setdefault(key, set()).update(found)
    return {key: "; ".join(sorted(found)) for key, found in sorted(by_folder.items())}
