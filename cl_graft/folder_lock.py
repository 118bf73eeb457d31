"""One writer per output folder: an OS lock on a lock file inside it, held while a command writes, taken with the
`filelock <https://py-filelock.readthedocs.io>`_ package's descriptor lock (``flock`` on POSIX systems,
``LockFileEx`` on Windows; dropped by the OS when the holder exits).

The lock file (:data:`LOCK_FILE`) names its holder (process id, command line, start time), so a second command
on the same folder fails at once with one line saying who holds it. The operating system drops the lock when
the holder exits, however it exits (a crash, SIGKILL), so a stale lock file never blocks a later command.
"""
from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from filelock import lock_descriptor, unlock_descriptor

from .errors import UserError

LOCK_FILE = ".cl-graft.lock"


def _try_lock(fd: int) -> bool:
    """Takes an exclusive lock on the file open as ``fd`` without waiting; False when another holds it."""
    return lock_descriptor(fd, blocking=False)


class FolderLock:
    """An exclusive, non-blocking lock on ``folder`` (which must exist). Use :meth:`acquire`, then :meth:`release`.

    Args:
        folder: the output folder.
        command_line: what the holder runs (shown to a second command).
    """

    def __init__(self, folder: Path, command_line: str) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.command_line = command_line
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        """Takes the lock and writes the holder into the lock file.

        Raises:
            UserError: another process holds the lock (the message names it), or the folder is not writable.
        """
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise UserError(f"{self.path.parent}: cannot write there ({e.strerror or e})") from None
            if not _try_lock(fd):
                os.close(fd)
                raise UserError(f"{self.path.parent} is in use by {self._holder()}; wait for it to finish or "
                                f"choose another folder") from None
            if self._same_file(fd):                      # not unlinked by a holder releasing it meanwhile
                break
            os.close(fd)
        holder = {"pid": os.getpid(), "command": self.command_line,
                  "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        self._fd = fd
        return self

    def busy(self) -> str | None:
        """The holder (as :meth:`acquire`'s message names it) when another process holds the lock, else None;
        takes nothing and writes nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None                                  # no lock file: nobody holds it
        try:
            return None if _try_lock(fd) else self._holder()
        finally:
            os.close(fd)                                 # drops a lock this probe took

    def release(self) -> None:
        """Removes the lock file and drops the lock (idempotent)."""
        if self._fd is None:
            return
        if self._same_file(self._fd):
            with contextlib.suppress(FileNotFoundError, PermissionError):   # Windows: kept while open
                self.path.unlink()
        with contextlib.suppress(OSError):
            unlock_descriptor(self._fd)
        os.close(self._fd)
        self._fd = None

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        own = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    def _holder(self) -> str:
        """The holder as the lock file names it: ``pid N (`command`, started T)``."""
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
            return f"pid {int(holder['pid'])} (`{holder['command']}`, started {holder['started']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another cl-graft command"
