"""Output folders: a command writes only into a folder that is new, empty, or its own earlier output.

The folder's owner file (:data:`OWNER_FILE`) names the command that claimed it, the settings that change its
numbers (compared on ``--resume``) and the files that were there before; the run record
(:data:`~.artifacts.RUN_CONFIG`), written last, lists every file the run wrote (:mod:`.written` notes each),
so ``--overwrite`` removes exactly those, at every depth, and nothing of the user's. A folder has one writer at a
time (:mod:`.folder_lock`: a second command fails at once, naming the first); a command that fails removes
only the files it wrote, and temporary files of an interrupted write are removed at the next claim.

A command may not write inside a folder another command is writing, except in the folder that command lends to
the commands it starts (:data:`SCRATCH_ENV`: an experiment script's ``<out>/work``).

Under torchrun only rank 0 writes ``--out``; every other rank works in a private scratch copy of it (what was
there when the command started, so ``--resume`` and the checks see the same folder), removed when it exits.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from . import distributed
from .artifacts import RUN_CONFIG
from .errors import UserError
from .files import read_json, write_json
from .folder_lock import LOCK_FILE, FolderLock
from .provenance import COMMAND_LINE, finish_record
from .schema import ListOf, Obj, check_json
from .written import Ledger, is_temporary

OWNER_FILE = ".cl-graft.json"
SCRATCH_ENV = "CL_GRAFT_SCRATCH"
"""The environment variable naming a folder inside a running command's output folder that the command lends to
the commands it starts (they inherit the variable): their ``--out`` may be inside it, though its owner holds the
folder's lock. Folders inside the lent one are still checked (a command another of them is writing)."""
OWNER_SCHEMA = Obj({"command": str, "settings": dict, "kept": ListOf(str)}, {"failed": str})
"""``failed``: the error a resumable run stopped on after it wrote files in that session (:meth:`OutDir.__exit__`);
``--resume`` cannot continue such a run (the same settings stop on the same error), so the next claim says to pass
``--overwrite``. An error before the session wrote anything (a resumed run's saved state refused, say) leaves the
folder as it was, to be resumed once the cause is mended."""
OVERWRITE_HINT = "pass --overwrite (it removes only the files cl-graft wrote there) or choose a new folder"
RECORD_SCHEMA = Obj({"files": ListOf(str)})


def _files(folder: Path) -> set[str]:
    """Every file (and link) under ``folder`` but the owner and lock files, as POSIX paths relative to it."""
    found = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        found |= {(rel / f).as_posix() for f in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]}
    return found - {OWNER_FILE, LOCK_FILE}


def _temporary(rel: str) -> bool:
    """A temporary file of cl-graft's (or one inside a temporary folder), left by an interrupted write."""
    return any(is_temporary(part) for part in Path(rel).parts)


def _inside(path: Path, names: list[str]) -> None:
    """Refuses a listed file outside the folder (an edited record must not make ``--overwrite`` delete it)."""
    bad = [n for n in names if Path(n).is_absolute() or ".." in Path(n).parts]
    if bad:
        raise UserError(f"{path}: lists {bad[0]!r}, a file outside the folder; this is not a record cl-graft wrote")


def refuse_links(out: Path, *, named: str | None = None) -> None:
    """Refuses a symbolic link under ``out`` to a folder, or to anything outside ``out``: a command would write
    or delete through it, outside the folder or under a second name. ``named``: how the error names the folder
    (default ``--out <out>``; the Python API's savers name the folder itself).

    Raises:
        UserError: one line naming the link and its target.
    """
    root = out.resolve()
    for folder, dirs, files in os.walk(out):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink():
                continue
            target = path.resolve()
            if target.is_dir() or (target != root and root not in target.parents):
                where = "a folder" if target.is_dir() else "a file outside it"
                raise UserError(f"{named or f'--out {out}'}: {path.relative_to(out).as_posix()} is a symbolic link "
                                f"to {where} ({target}); cl-graft writes nothing through links, remove it or choose "
                                f"another folder")


def _refuse_nested_in_busy(out: Path) -> None:
    """Refuses an ``out`` inside the output folder of a command that is running (it holds the folder's lock),
    unless ``out`` is inside the folder that command lent to this one (:data:`SCRATCH_ENV`). Both sides are
    compared resolved: ``..`` and symbolic links name the folder they lead to, not the folders they pass through."""
    where = out.resolve()                                 # `..` and links resolved, as the lent folder is
    lent = Path(os.environ[SCRATCH_ENV]).resolve() if os.environ.get(SCRATCH_ENV) else None
    lender = set(lent.parents) if lent is not None and lent in where.parents else set()
    for folder in where.parents:
        if folder in lender:
            continue
        holder = FolderLock(folder, "").busy() if (folder / LOCK_FILE).is_file() else None
        if holder is not None:
            raise UserError(f"--out {out} is inside {folder}, the output folder of {holder}, which is running; "
                            f"choose a folder outside it")


def _dirs(folder: Path) -> set[Path]:
    return {Path(root) for root, _, _ in os.walk(folder)}


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


def _remove_empty_temporaries(folder: Path) -> None:
    """Deletes the empty temporary folders under ``folder`` (an atomic write killed before it wrote a byte)."""
    for root, dirs, _ in os.walk(folder, topdown=False):
        for name in dirs:
            path = Path(root) / name
            if is_temporary(name) and not path.is_symlink() and not any(path.iterdir()):
                path.rmdir()


def settings_sha256(settings: dict) -> str:
    """A hash of everything that changes a run's numbers (what ``--resume`` compares)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


class OutDir:
    """A command's output folder. Use :func:`claim_out_dir`; its files are the command's own.

    A command writes only into a new or empty folder, or into one that an earlier run of the same command made
    (its :data:`OWNER_FILE`, written when the folder is claimed, says which command and which files were there
    before). The run record (:data:`RUN_CONFIG`, with the list of files the run wrote) is written last, by
    :meth:`finish`; a folder without it holds an unfinished run. As a context manager it holds the folder's lock
    until the block ends, and a run that stops with a :class:`UserError` or an ``OSError`` removes the files it
    wrote and nothing else (unless ``keep_on_error``: a resumable run keeps its state, less empty folders).
    """

    def __init__(self, path: Path, *, kept: set[str], created: bool, keep_on_error: bool,
                 record_name: str = RUN_CONFIG, lock: FolderLock | None = None, earlier: set[str] = frozenset()) -> None:
        self.path, self.kept, self.created, self.keep_on_error = path, kept, created, keep_on_error
        self.record_name = record_name
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.earlier = set(earlier)                     # a resumed run's files from its earlier sessions
        self.lock = lock
        self.ledger = Ledger(path).__enter__()
        self.dirs = _dirs(path)

    def files(self) -> set[str]:
        """The files this run wrote (with a resumed run's earlier ones) that are still there."""
        present = _files(self.path)
        return {f for f in (self.ledger.relative() | (self.earlier & present)) if not _temporary(f)} - self.kept

    def finish(self, record: dict) -> None:
        """Writes the run record last, with what the run cost since the folder was claimed
        (:func:`~.provenance.finish_record`) and every file this run wrote."""
        files = sorted(self.files() | {self.record_name})
        write_json(self.path / self.record_name, {**finish_record({**record, "started": self.started}), "files": files})

    def discard(self) -> None:
        """Removes the files this run wrote; gives the folder up when nothing else is in it (else the files
        left, a user's, are kept by the next run here)."""
        _remove(self.path, self.ledger.relative() - self.kept)
        self._prune()
        left = _files(self.path)
        if left:
            write_json(self.path / OWNER_FILE, {**_owner(self.path), "kept": sorted(left)})
        else:
            (self.path / OWNER_FILE).unlink(missing_ok=True)

    def close(self) -> None:
        """Closes the ledger and drops the lock (and, for a folder this run made and left empty, the folder)."""
        self.ledger.__exit__()
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self.created and self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()

    def _prune(self) -> None:
        """Removes the empty folders this run made."""
        for d in sorted(_dirs(self.path) - self.dirs, key=lambda p: -len(p.parts)):
            if d.is_dir() and not d.is_symlink() and not any(d.iterdir()):
                d.rmdir()

    def __enter__(self) -> OutDir:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is not None and issubclass(kind, (UserError, OSError)):
                if not self.keep_on_error:
                    self.discard()
                    return
                self._prune()
                if issubclass(kind, UserError) and self.ledger.relative() - self.kept:    # this session wrote: partial
                    self._mark_failed(str(exc))
                    raise UserError(f"{exc}; --out {self.path} keeps the files of this run, which --resume cannot "
                                    f"continue: {OVERWRITE_HINT}") from None
        finally:
            self.close()

    def _mark_failed(self, error: str) -> None:
        """Notes in the owner file that the run stopped on ``error`` (its first line), for the next claim."""
        write_json(self.path / OWNER_FILE, {**_owner(self.path), "failed": error.splitlines()[0] if error else ""})


def _owner(out: Path) -> dict:
    owner = read_json(out / OWNER_FILE) if (out / OWNER_FILE).is_file() else None
    return owner if isinstance(owner, dict) else {}


def claim_out_dir(out: str | Path, command: str, *, settings: dict, overwrite: bool = False,
                  resume: bool = False, keep_on_error: bool = False, record_name: str = RUN_CONFIG) -> OutDir:
    """Makes ``out`` the output folder of ``command`` (see :class:`OutDir`), locked for this process, and
    returns it (use it as a context manager: the lock is held until the block ends).

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
        UserError: an empty or unwritable path, a file, a folder another command is writing (or one inside
            it), a symbolic link under it to a folder or out of it, a folder holding anything else, (``resume``) no earlier run or one with other settings, or (torchrun) ranks with
            different settings or data.
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
    _refuse_nested_in_busy(out)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    lock = None
    try:
        lock = FolderLock(out, COMMAND_LINE.get() or shlex.join(sys.argv)).acquire()
        run_dir = _claim_locked(out, command, settings, overwrite, resume, keep_on_error, record_name, created)
    except BaseException:
        if lock is not None:
            lock.release()
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise
    run_dir.lock = lock
    return run_dir


def _claim_locked(out: Path, command: str, settings: dict, overwrite: bool, resume: bool, keep_on_error: bool,
                  record_name: str, created: bool) -> OutDir:
    """:func:`claim_out_dir` once the folder exists and is locked."""
    refuse_links(out)
    owner_path = out / OWNER_FILE
    owner = read_json(owner_path) if owner_path.is_file() else None
    mine = isinstance(owner, dict) and owner.get("command") == command
    if mine:
        _inside(owner_path, check_json(owner_path, owner, OWNER_SCHEMA)["kept"])
    present = _files(out)
    failed = owner.get("failed") if mine and present - set(owner.get("kept", [])) else None
    if resume:
        if not mine:
            raise UserError(f"--resume: {out} holds no output of cl-graft {command} to resume")
        if failed is not None:
            raise UserError(f"--resume: {out} holds a run of cl-graft {command} that stopped on an error "
                            f"({failed}); --resume cannot continue it: {OVERWRITE_HINT}")
        _check_same(out, owner.get("settings") or {}, settings)
        kept = set(owner.get("kept", []))
        stale = {f for f in present - kept if _temporary(f)}
        _remove(out, stale)
        _remove_empty_temporaries(out)
        return OutDir(out, kept=kept, created=False, keep_on_error=keep_on_error, record_name=record_name,
                      earlier=present - kept - stale)
    if mine:
        kept = set(owner.get("kept", []))
        record = read_json(out / record_name) if (out / record_name).is_file() else None
        if isinstance(record, dict) and "files" in record:
            _inside(out / record_name, check_json(out / record_name, record, RECORD_SCHEMA)["files"])
        earlier = present & set(record["files"]) if isinstance(record, dict) and "files" in record \
            else present - kept
        earlier |= {f for f in present - kept if _temporary(f)}
        if earlier and not overwrite:
            raise UserError(_held(out, command, record=record, failed=failed, resumable=keep_on_error))
        _remove(out, earlier)
        _remove_empty_temporaries(out)
        present -= earlier
    elif present or owner_path.exists():
        what = f"the output of cl-graft {owner.get('command')}" if isinstance(owner, dict) else \
            f"files that cl-graft {command} did not write ({min(present or {OWNER_FILE})})"
        raise UserError(f"--out {out} holds {what}; choose a new or empty folder")
    try:
        write_json(owner_path, {"command": command, "settings": settings, "kept": sorted(present)})
    except UserError as e:
        raise UserError(f"--out {out}: cannot write there ({e})") from None
    return OutDir(out, kept=present, created=created, keep_on_error=keep_on_error, record_name=record_name)


def _held(out: Path, command: str, *, record: dict | None, failed: str | None, resumable: bool) -> str:
    """The error for an ``out`` that holds an earlier run of ``command`` (naming ``--resume`` only where the
    command has it: a ``resumable`` one, whose files are kept on an error)."""
    if record:
        return f"--out {out} already holds results of cl-graft {command}; {OVERWRITE_HINT}"
    if failed is not None:
        return (f"--out {out} holds a run of cl-graft {command} that stopped on an error ({failed}), which --resume "
                f"cannot continue; {OVERWRITE_HINT}")
    resume = "continue it with --resume, or " if resumable else ""
    return f"--out {out} already holds an unfinished run of cl-graft {command}; {resume}{OVERWRITE_HINT}"


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
