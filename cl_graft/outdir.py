"""Output folders: a command writes only into a folder that is new, empty, or its own earlier output.

The folder's owner file (:data:`OWNER_FILE`) names the command that claimed it, the settings that change its
numbers (compared on ``--resume``) and the files that were there before; the run record
(:data:`~.artifacts.RUN_CONFIG`), written last, lists every file the run wrote, so ``--overwrite`` removes
exactly those and nothing of the user's.

Under torchrun only rank 0 writes ``--out``; every other rank works in a private scratch copy of it (what was
there when the command started, so ``--resume`` and the checks see the same folder), removed when it exits.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from . import distributed
from .artifacts import RUN_CONFIG
from .errors import UserError
from .files import read_json, write_json
from .provenance import finish_record

OWNER_FILE = ".cl-graft.json"


def _files(folder: Path) -> set[str]:
    """Every file (and link) under ``folder`` but the owner file, as POSIX paths relative to it."""
    found = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        found |= {(rel / f).as_posix() for f in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]}
    return found - {OWNER_FILE}


def _remove(folder: Path, names: set[str]) -> None:
    """Deletes ``names`` (relative paths) under ``folder``, then the sub-folders this left empty."""
    parents = set()
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
        parents |= set((folder / name).parents)
    for d in sorted((p for p in parents if folder in p.parents), key=lambda p: -len(p.parts)):
        if d.is_dir() and not d.is_symlink() and not any(d.iterdir()):
            d.rmdir()


def settings_sha256(settings: dict) -> str:
    """A hash of everything that changes a run's numbers (what ``--resume`` compares)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


class OutDir:
    """A command's output folder. Use :func:`claim_out_dir`; its files are the command's own.

    A command writes only into a new or empty folder, or into one that an earlier run of the same command made
    (its :data:`OWNER_FILE`, written when the folder is claimed, says which command and which files were there
    before). The run record (:data:`RUN_CONFIG`, with the list of files the run wrote) is written last, by
    :meth:`finish`; a folder without it holds an unfinished run. As a context manager, a run that stops with
    a :class:`UserError` removes what it wrote (unless ``keep_on_error``: a resumable run keeps its state).
    """

    def __init__(self, path: Path, *, kept: set[str], created: bool, keep_on_error: bool,
                 record_name: str = RUN_CONFIG) -> None:
        self.path, self.kept, self.created, self.keep_on_error = path, kept, created, keep_on_error
        self.record_name = record_name
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def finish(self, record: dict) -> None:
        """Writes the run record last, with what the run cost since the folder was claimed
        (:func:`~.provenance.finish_record`) and every file this run wrote."""
        files = sorted((_files(self.path) - self.kept) | {self.record_name})
        write_json(self.path / self.record_name, {**finish_record({**record, "started": self.started}), "files": files})

    def discard(self) -> None:
        """Removes what this run wrote; gives the folder up when nothing else is in it."""
        _remove(self.path, _files(self.path) - self.kept)
        if not self.kept:
            (self.path / OWNER_FILE).unlink(missing_ok=True)
            if self.created:
                self.path.rmdir()

    def __enter__(self) -> OutDir:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None and issubclass(kind, UserError) and not self.keep_on_error:
            self.discard()


def claim_out_dir(out: str | Path, command: str, *, settings: dict, overwrite: bool = False,
                  resume: bool = False, keep_on_error: bool = False, record_name: str = RUN_CONFIG) -> OutDir:
    """Makes ``out`` the output folder of ``command`` (see :class:`OutDir`) and returns it.

    Args:
        out: the folder (``--out``).
        command: the command's name, recorded in the owner file.
        settings: everything that changes the run's numbers; saved, and compared on ``resume``.
        overwrite: an earlier run of ``command`` in ``out`` is removed first: the files its record lists (or,
            if it never finished, everything but what was there before it), and nothing else.
        resume: continue the unfinished (or finished) run of ``command`` in ``out``; its settings must match.
        keep_on_error: a :class:`UserError` inside the ``with`` block leaves the files (resumable runs).
        record_name: the run record's file name (another one where ``config.json`` means something else, e.g.
            an exported transformers folder).

    Raises:
        UserError: an empty or unwritable path, a file, a folder holding anything else, (``resume``) no
            earlier run or one with other settings, or (torchrun) ranks with different settings or data.
    """
    if not str(out).strip():
        raise UserError("--out is empty; give a folder name")
    out = Path(out)
    distributed.check_same(settings, "the command's settings and data")
    if not distributed.is_main():
        out = _scratch_copy(out)
    distributed.barrier()                                   # rank 0 changes the folder after every rank copied it
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    owner_path = out / OWNER_FILE
    owner = read_json(owner_path) if owner_path.is_file() else None
    mine = isinstance(owner, dict) and owner.get("command") == command
    if resume:
        if not mine:
            raise UserError(f"--resume: {out} holds no output of cl-graft {command} to resume")
        _check_same(out, owner.get("settings") or {}, settings)
        return OutDir(out, kept=set(owner.get("kept", [])), created=False, keep_on_error=keep_on_error,
                      record_name=record_name)
    present = _files(out) if out.is_dir() else set()
    if mine:
        kept = set(owner.get("kept", []))
        record = read_json(out / record_name) if (out / record_name).is_file() else None
        earlier = present & set(record["files"]) if isinstance(record, dict) and "files" in record \
            else present - kept
        if earlier and not overwrite:
            state = "results" if record else "an unfinished run"
            raise UserError(f"--out {out} already holds {state} of cl-graft {command}; choose a new folder or pass "
                            f"--overwrite")
        _remove(out, earlier)
        present -= earlier
    elif present or owner_path.exists():
        what = f"the output of cl-graft {owner.get('command')}" if isinstance(owner, dict) else \
            f"files that cl-graft {command} did not write ({min(present or {OWNER_FILE})})"
        raise UserError(f"--out {out} holds {what}; choose a new or empty folder")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(owner_path, {"command": command, "settings": settings, "kept": sorted(present)})
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    return OutDir(out, kept=present, created=created, keep_on_error=keep_on_error, record_name=record_name)


def _scratch_copy(out: Path) -> Path:
    """A private copy of ``out`` for a non-zero rank (a path that does not exist yet when ``out`` does not),
    removed when the process exits."""
    scratch = Path(tempfile.mkdtemp(prefix=f"cl-graft-rank{distributed.rank()}-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    if out.is_dir():
        shutil.copytree(out, scratch / "out", symlinks=True)
    return scratch / "out"


def _check_same(out: Path, saved: dict, settings: dict) -> None:
    if settings_sha256(saved) == settings_sha256(settings):
        return
    key = next(k for k in [*settings, *saved] if saved.get(k) != settings.get(k))     # the first in the run's order
    was = json.dumps(saved.get(key))
    was = was if len(was) <= 40 else "other settings"
    raise UserError(f"--resume: {out} holds a run with another {key} ({was}); use a new --out")
