"""Run records: what made a result (the full command line, device, versions, git revision, settings) and what it
cost (wall and CPU seconds, peak memory). Every command's ``config.json`` and every results file carries one."""
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


def run_record(**fields: Any) -> dict:
    """What made a result: the full command line, start time, device, versions, platform and git revision,
    plus the given fields (seed, settings, ...). :func:`finish_record` adds what the run cost."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {"command_line": COMMAND_LINE.get() or _argv_command_line(), "started": started,
            "device_name": device_name(fields.get("device")), "cl_graft_version": version("cl-graft"),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": version("transformers"), "avalanche": version("avalanche-lib"),
            "numpy": version("numpy"), "platform": platform.platform(), "git_revision": git_revision(),
            "processes": distributed.describe(), **fields}


def finish_record(record: dict) -> dict:
    """``record`` with the run's cost so far: wall seconds since ``started``, process CPU seconds, peak RSS
    (of this process: rank 0's under torchrun)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = datetime.fromisoformat(record["started"])
    return {**record, "wall_seconds": round((datetime.now(timezone.utc) - started).total_seconds(), 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024)}
