"""What the reliability probe (:mod:`.reliability_probe`, :mod:`.reliability_round2`) runs its cases with: a
:class:`Case`, the ``cl-graft`` subprocess (:func:`cli`, optionally interrupted or under ``ulimit -f``), folder
snapshots, and the small option sets the cases share."""
from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

USER_FILES = {"figures/important.png": b"\x89PNG the user's figure", "config.json": b'{"mine": true}\n'}
FT = ["--preset", "smoke", "--steps", "2"]
LOC = ["--preset", "smoke", "--steps", "2", "--n-batches", "1", "--select-rows", "16", "--methods", "topk",
       "--region-size", "0.01"]
RUN = ["--preset", "smoke", "--steps", "2", "--quiet"]
FULL_DISK = 20_000 * 1024                                             # `ulimit -f 20000`: files up to 20 MB


@dataclass
class Case:
    """One probe: the argv after ``cl-graft``, the exit code wanted, and a check returning what was kept."""

    name: str
    args: list
    want: int = 2
    check: Callable[[], str] = lambda: ""
    setup: Callable[[], None] = lambda: None
    interrupt: tuple | None = None                   # (signal name, when to send it[, how often to look, s])
    during: tuple[Callable[[], bool], Callable[[], None]] | None = None  # (when, what the user does meanwhile)
    file_size: int | None = None                                     # largest file it may write (ulimit -f)
    script: str | None = None                                        # a Python script instead of cl-graft
    result: dict = field(default_factory=dict)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def start(args: list, *, file_size: int | None = None, script: str | None = None) -> subprocess.Popen:
    """``cl-graft args`` (or ``python -c script args``) as a subprocess, optionally under ``ulimit -f``."""
    cmd = [sys.executable, *(["-c", script] if script else ["-m", "cl_graft.cli"]), *map(str, args)]

    def limit() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)       # as at a terminal, even when the probe runs in the background
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)


def wait_until(proc: subprocess.Popen, when: Callable[[], bool], timeout: float, poll: float = 0.2) -> None:
    t0 = time.time()
    while proc.poll() is None and not when() and time.time() - t0 < timeout:
        time.sleep(poll)


def cli(args: list, *, interrupt=None, during=None, file_size=None, script=None, timeout: float = 900
        ) -> tuple[int, str]:
    proc = start(args, file_size=file_size, script=script)
    if interrupt is not None:
        sig, when, *poll = interrupt                       # a short poll can land in a finalizer, which drops it
        wait_until(proc, when, timeout, poll=poll[0] if poll else 0.2)
        if proc.poll() is None:
            proc.send_signal(getattr(signal, sig))
    if during is not None:
        when, act = during
        wait_until(proc, when, timeout, poll=0.02)
        act()
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err
