"""Run records: what made a result (the full command line, device, versions, git revision, settings), the
conditions its times were measured under (:func:`cl_graft.machine.conditions`: threads, load average at start and
end, native bfloat16) and what it cost (wall and CPU seconds, peak memory in MB of ``byte_unit``: 10^6 bytes).
Every command's ``config.json`` and every results file carries one.

A record names no absolute path of the machine that made it: :func:`portable_path` writes each path relative to
the folder the command ran in (for committed results, the repository root: ``/path/to/shared/data`` typed in
``/path/to/clone`` is recorded as ``../shared/data``), so the record reads the same in any clone."""
from __future__ import annotations

import contextlib
import os
import platform
import resource
import shlex
import subprocess
import sys
from contextvars import ContextVar
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from . import distributed
from .files import version
from .machine import conditions, load_average
from .units import BYTE_UNIT, MB


def _git(*args: str) -> str | None:
    """``git args`` in the package's folder (an editable install or a clone), or None outside a checkout."""
    try:
        done = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_revision() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it; ``unknown`` outside a checkout."""
    rev = _git("rev-parse", "HEAD")
    if not rev:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return rev + ("+dirty" if dirty else "")


def device_name(device: str | torch.device | None) -> str:
    """What ``device`` is: the GPU model for CUDA devices, else the CPU model (with the core count)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model} ({os.cpu_count()} cores)"


COMMAND_LINE: ContextVar[str | None] = ContextVar("cl_graft_command_line", default=None)
"""The command line being run, set by the CLI for the duration of a command (``sys.argv`` otherwise)."""


def _argv_command_line() -> str:
    """``sys.argv`` as a command to type again: a module run with ``python -m`` is named as such."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    argv = list(sys.argv)
    if spec is not None and spec.name and argv:
        argv = ["python", "-m", spec.name.removesuffix(".__main__"), *argv[1:]]
    return shlex.join(argv)


def _machine_path(text: str) -> bool:
    """Whether ``text`` is an absolute path of this machine: ``/`` then a top-level folder that exists here."""
    top = text[1:].split("/", 1)[0] if text.startswith("/") else ""
    return bool(top) and os.path.isdir("/" + top)


def portable_path(value: str | os.PathLike, *, start: str | os.PathLike | None = None) -> str:
    """``value`` as a record keeps it: an absolute path of this machine relative to ``start`` (default: the working
    directory), e.g. ``/path/to/shared/data`` from ``/path/to/clone`` → ``../shared/data``; ``name=path``,
    ``--opt=path`` and comma-separated lists of them piece by piece; anything else (relative paths, words) as it
    is."""
    start = os.fspath(start) if start is not None else os.getcwd()

    def piece(text: str) -> str:
        name, eq, path = ("", "", text) if text.startswith("/") else text.partition("=")
        if not _machine_path(path):
            return text
        try:
            return name + eq + os.path.relpath(path, start)
        except ValueError:                                     # another drive (Windows)
            return text

    return ",".join(piece(p) for p in os.fspath(value).split(","))


def portable_command(command: str, *, start: str | os.PathLike | None = None) -> str:
    """``command`` with every argument that names an absolute path of this machine made relative to ``start``
    (see :func:`portable_path`); a command that does not parse as shell words is returned as it is."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    portable = [portable_path(w, start=start) for w in words]
    return command if portable == words else shlex.join(portable)


def _portable_fields(value: Any) -> Any:
    """``value`` with every string in it (nested in dicts, lists and tuples too) passed through
    :func:`portable_path`."""
    if isinstance(value, str):
        return portable_path(value)
    if isinstance(value, dict):
        return {k: _portable_fields(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable_fields(v) for v in value]
    return value


def run_record(**fields: Any) -> dict:
    """What made a result: the full command line, start time, device, versions, platform, git revision, the
    conditions at start (``conditions``: :func:`cl_graft.machine.conditions` of the ``device`` field) and the byte
    unit of its MB figures (``byte_unit``), plus the given fields (seed, settings, ...), with every path in them
    portable (:func:`portable_path`). :func:`finish_record` adds what the run cost and the load at its end."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = portable_command(COMMAND_LINE.get() or _argv_command_line())
    return {"command_line": command, "started": started,
            "device_name": device_name(fields.get("device")), "cl_graft_version": version("cl-graft"),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": version("transformers"), "avalanche": version("avalanche-lib"),
            "numpy": version("numpy"), "platform": platform.platform(), "git_revision": git_revision(),
            "processes": distributed.describe(), "conditions": conditions(fields.get("device")),
            "byte_unit": BYTE_UNIT, **_portable_fields(fields)}


class MemoryPeak:
    """The peak resident memory of this process from now on, in MB (10^6 bytes): Linux's ``VmHWM``, started afresh
    by writing 5 to ``/proc/self/clear_refs`` (so each of a run's strategies gets its own peak in one process).
    ``mb()`` is None where the peak cannot be started afresh (another system): the process's peak would include
    earlier work."""

    def __init__(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self._fresh = True
        except OSError:
            self._fresh = False

    def mb(self) -> int | None:
        if not self._fresh:
            return None
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) * 1024 / MB)                 # VmHWM counts KiB
        return None


def finish_record(record: dict) -> dict:
    """``record`` with the run's cost so far: wall seconds since ``started``, process CPU seconds, peak RSS in MB
    (of this process: rank 0's under torchrun; a resumed run's earlier processes are not in them), and
    ``conditions["load_average_end"]``, the load as it ends."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = datetime.fromisoformat(record["started"])
    ended = {**record.get("conditions", {}), "load_average_end": load_average()}
    wall = (datetime.now(timezone.utc) - started).total_seconds()
    return {**record, "conditions": ended, "wall_seconds": round(wall, 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mb": round(usage.ru_maxrss * 1024 / MB)}                  # ru_maxrss counts KiB
