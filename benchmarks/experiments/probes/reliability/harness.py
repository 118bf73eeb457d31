"""What the reliability probe's cases run with: a :class:`Case`, the ``cl-graft`` subprocess (:func:`cli`,
optionally interrupted, disturbed or under ``ulimit -f``), folder snapshots, the option sets the cases share, and
:class:`Probe`, the cases' shared state (the temporary root, the data, the user's folders, the commands started
beside a case) with the checks several groups use."""
from __future__ import annotations

import json
import os
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
DIGITS = ["--model", "mlp", "--preset", "smoke", "--quiet"]
FULL_DISK = 20_000 * 1024                                             # `ulimit -f 20000`: files up to 20 MB
BAD_WORDS = ("CHANGED", "EXISTS", "LOST", "NO ", "DIFFER", "FAILED", "CWD")
"""A check's answer holding one of these marks the case as not wanted."""


@dataclass
class Case:
    """One probe: the argv after ``cl-graft`` (or a script's arguments), the exit code wanted, and a check
    returning what was kept (its ``before``, if any, runs before the command)."""

    name: str
    args: list
    want: int = 2
    check: Callable[[], str] = lambda: ""
    setup: Callable[[], None] = lambda: None
    interrupt: tuple | None = None                   # (signal name, when to send it[, how often to look, s])
    during: tuple[Callable[[], bool], Callable[[], None]] | None = None  # (when, what the user does meanwhile)
    file_size: int | None = None                                     # largest file it may write (ulimit -f)
    script: str | None = None                       # a Python script (probes/reliability/scripts.py) instead
    env: dict[str, str] = field(default_factory=dict)               # environment variables set for the command
    group: str = ""                                                  # what it protects (set by the probe)
    result: dict = field(default_factory=dict)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def start(args: list, *, file_size: int | None = None, script: str | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    """``cl-graft args`` (or ``python -c script args``) as a subprocess, optionally under ``ulimit -f``, with
    ``env`` added to the environment."""
    cmd = [sys.executable, *(["-c", script] if script else ["-m", "cl_graft.cli"]), *map(str, args)]

    def limit() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)           # as at a terminal, even in the background
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit,
                            env={**os.environ, **(env or {})})


def wait_until(proc: subprocess.Popen, when: Callable[[], bool], timeout: float, poll: float = 0.2) -> None:
    t0 = time.time()
    while proc.poll() is None and not when() and time.time() - t0 < timeout:
        time.sleep(poll)


def cli(args: list, *, interrupt=None, during=None, file_size=None, script=None, env=None, timeout: float = 900
        ) -> tuple[int, str]:
    """Runs one case's command; its exit code and stderr."""
    proc = start(args, file_size=file_size, script=script, env=env)
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


def first_error(stderr: str) -> str:
    """The first line of ``stderr`` that reports something (an error, a warning, a traceback, an abort)."""
    for line in stderr.splitlines():
        if line.startswith(("error:", "Error:", "Traceback", "warning:", "Aborted!")):
            return line
    return ""


def error_line(case: Case) -> str:
    """The case's ``error:`` line (after its warnings), or ``""``."""
    return next((line for line in case.result.get("stderr", "").splitlines() if line.startswith("error:")), "")


class Probe:
    """The cases' shared state: ``root`` (a temporary folder), ``data`` (the real task data), the folders later
    cases read (made by :mod:`.references` and the first case of a group), and the commands started beside a case
    (:meth:`writer`)."""

    def __init__(self, root: Path, data: Path) -> None:
        self.root, self.data = root, data
        self.bad = root / "bad-data"
        self.writers: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}
        self.user_before: dict[str, bytes] = {}                      # a linked-to folder's files
        self.progress_before = b""                                  # an edited progress file

    # ----- fixtures --------------------------------------------------------------------------------------------
    def rows(self, n: int, *, skip_label: int | None = None) -> bytes:
        lines = (self.data / "sst2" / "train.jsonl").read_bytes().splitlines()
        keep = [line for line in lines if skip_label is None or json.loads(line)["label"] != skip_label]
        return b"\n".join(keep[:n]) + b"\n"

    def task(self, name: str, train: bytes, *, test: bytes = b"") -> None:
        """A task folder ``bad-data/<name>`` with ``train`` as its training file."""
        folder = self.bad / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "meta.json").write_text(json.dumps({"labels": ["negative", "positive"]}))
        (folder / "train.jsonl").write_bytes(train)
        (folder / "test.jsonl").write_bytes(self.rows(40) + test)

    def user_folder(self, name: str) -> Path:
        folder = self.root / name
        for rel, data in USER_FILES.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        return folder

    def writer(self, name: str, args: list) -> Callable[[], None]:
        """A setup: starts ``cl-graft args --out root/name`` and waits until it holds the folder."""
        def setup() -> None:
            folder = self.root / name
            self.writers[name] = start([*args, "--out", folder])
            wait_until(self.writers[name], lambda: (folder / ".cl-graft.lock").exists(), 600)
            self.started[name] = time.time()
        return setup

    def stop(self, name: str) -> bool:
        """Kills the writer ``name``; whether it was still running."""
        proc = self.writers[name]
        running = proc.poll() is None
        proc.kill()
        proc.wait()
        return running

    # ----- checks ----------------------------------------------------------------------------------------------
    def absent(self, path: Path, what: str = "nothing written") -> Callable[[], str]:
        return lambda: what if not path.exists() else f"{path.name} EXISTS"

    def user_kept(self, folder: Path) -> Callable[[], str]:
        return lambda: "user's files intact" if snapshot(folder) == USER_FILES else "USER FILES CHANGED"

    def kept_later(self, folder: Path, what: str) -> Callable[[], str]:
        """``what`` if ``folder`` is as it was before the command ran."""
        before = {}

        def check() -> str:
            return what if snapshot(folder) == before["files"] else "FOLDER CHANGED"

        check.before = lambda: before.update(files=snapshot(folder))
        return check

    def recorded(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            files = json.loads((folder / "config.json").read_text())["files"]
            present = sorted(p for p in snapshot(folder) if p != ".cl-graft.json")
            return f"record lists all {len(files)} files" if files == present else "RECORD DIFFERS"
        return check


def refused_naming(name: str, args: list, out: Path, env: dict[str, str], *words: str) -> Case:
    """A case refused in one line (exit 2) naming ``words``, nothing written to ``out``."""
    case = Case(name, args, env=env)

    def check() -> str:
        line = error_line(case)
        missing = [w for w in words if w not in line]
        if missing:
            return f"FAILED: the error does not name {missing}"
        return "one line naming them, nothing written" if not out.exists() else f"{out.name} EXISTS"

    case.check = check
    return case


def plugin_distribution(group: str, folder: Path, module: str, source: str, *, value: str | None = None
                        ) -> dict[str, str]:
    """A plugin distribution in ``folder``: ``module.py`` (``source``) and its ``*.dist-info`` declaring the entry
    point ``toy = value`` (default: ``module``) of the entry-point ``group``; returns the environment that installs
    it (``PYTHONPATH``)."""
    dist = folder / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (folder / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\ntoy = {value or module}\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))}
