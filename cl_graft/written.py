"""What a command wrote: every file cl-graft writes is noted here, so that a failed command removes only its own
files and a run record lists only them (a file the user puts into ``--out`` meanwhile is never touched).

An output folder (:mod:`.outdir`) opens a :class:`Ledger` for the command's duration; writers call :func:`note`
with each file they finished (:func:`~cl_graft.files.atomic_write` does). Temporary files of interrupted
writes (:func:`is_temporary`) are never a result: they are removed on the next claim and never listed.

The open ledgers are the command's context, not module state: a :class:`contextvars.ContextVar` holds them as an
immutable tuple, set when a ledger opens and reset when it closes, so two commands run in two contexts (threads,
asyncio tasks, tests) never see each other's ledgers and nothing outlives the command.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from .errors import UserError

_OPEN: ContextVar[tuple[Ledger, ...]] = ContextVar("cl_graft_open_ledgers", default=())
_TEMPORARY = re.compile(r"^\..+\.tmp$")


def is_temporary(name: str) -> bool:
    """Whether a file or folder name is one of cl-graft's temporary ones (``.<name>.<random>.tmp``)."""
    return bool(_TEMPORARY.match(Path(name).name))


class Ledger:
    """The absolute paths written under ``folder`` while the ledger is open."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).absolute()
        self.paths: set[Path] = set()

    def __enter__(self) -> Ledger:  # noqa: PYI034 (typing.Self needs Python 3.11)
        _OPEN.set((*_OPEN.get(), self))
        return self

    def __exit__(self, *exc) -> None:
        _OPEN.set(tuple(ledger for ledger in _OPEN.get() if ledger is not self))

    def relative(self) -> set[str]:
        """The written files that still exist, relative to the folder (POSIX)."""
        return {p.relative_to(self.folder).as_posix() for p in self.paths if p.is_file() or p.is_symlink()}


def file_mode() -> int:
    """The mode a plain ``open(path, "w")`` gives a new file (0666 less the umask), not mkstemp's 0600."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def note(path: str | os.PathLike) -> None:
    """Records that cl-graft wrote ``path`` (in every ledger open in this context whose folder holds it)."""
    path = Path(path).absolute()
    for ledger in _OPEN.get():
        if ledger.folder in path.parents:
            ledger.paths.add(path)


def write_failed(path: str | os.PathLike, error: BaseException) -> UserError:
    """One line for a write that failed (a full disk, a file-size limit, no permission): the file and the cause."""
    text = str(error).strip()
    quoted = re.search(r'message: "([^"]+)"', text)                # safetensors: IoError(Os { .., message: ".." })
    cause = getattr(error, "strerror", None) or (quoted.group(1) if quoted else None) or \
        (text.splitlines()[0] if text else type(error).__name__)
    return UserError(f"{path}: cannot write ({cause}); nothing of it was kept")


@contextmanager
def staged_folder(final: Path, *, within: Path | None = None) -> Iterator[Path]:
    """A temporary folder (in ``within``, default beside ``final``) for a writer that writes several files itself
    (``save_pretrained``); when the block ends its files move into ``final`` (each an atomic rename, noted in the
    ledgers, with :func:`file_mode`'s mode, whatever mode the writer gave them); when it fails the temporary
    folder goes and nothing reaches ``final``."""
    final = Path(final)
    within = final.parent if within is None else Path(within)
    within.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=within, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        for root, _, files in os.walk(tmp):
            for name in files:
                src = Path(root) / name
                dst = final / src.relative_to(tmp)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(src, file_mode())
                os.replace(src, dst)
                note(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

