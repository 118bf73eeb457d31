"""Interrupted writes: a full disk, a Ctrl-C while the model is saved, a SIGKILL inside the safetensors library:
nothing half-written is left or listed (no temporary file, no empty folder, no run record), and the folder is
claimed again without ``--overwrite`` (a run on a full disk ``--resume``\\ s to the uninterrupted run's numbers)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from . import scripts
from .harness import FT, FULL_DISK, RUN, Case, Probe, snapshot, start

TITLE = "interrupted writes leave nothing half-written"
RUN_DISK = 1_000 * 1024
"""``ulimit -f 1000`` for ``run``: its largest file (a task's skill patch, ~2 MB with MiniLM) does not fit."""


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    graft = ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft"]
    return [
        Case("finetune on a full disk", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "full-ft"],
             file_size=FULL_DISK, check=p.absent(r / "full-ft")),
        Case("export on a full disk", ["export", "--skills", r / "run/graft/state/skills", "--task", "sst2", *d,
                                       "--out", r / "full-exp"], file_size=FULL_DISK, check=p.absent(r / "full-exp")),
        Case("run on a full disk (files up to 1 MB), then --resume", [*graft, "--out", r / "full-run"],
             file_size=RUN_DISK, check=_resumes(p, r / "full-run", graft)),
        Case("finetune stopped (SIGINT) while saving the model", ["finetune", "--task", "sst2", *d, *FT,
                                                                  "--out", r / "ctrl-c"], want=1,
             interrupt=("SIGINT", lambda: _saving(r / "ctrl-c"), 0.01), check=no_temporaries(r / "ctrl-c")),
        Case("a write killed (SIGKILL) inside the safetensors library", [r / "lib-kill", "kill"], want=-9,
             script=scripts.KILLED_WRITE, check=_only_temporaries(r / "lib-kill")),
        Case("the same folder claimed again (--resume) after it", [r / "lib-kill", "resume"], want=0,
             script=scripts.KILLED_WRITE, check=no_temporaries(r / "lib-kill")),
    ]


def _resumes(p: Probe, folder: Path, args: list) -> Callable[[], str]:
    """Nothing half-written is left, and ``--resume`` without the limit ends with the uninterrupted run's matrix."""
    def check() -> str:
        if not folder.exists():
            return "FAILED: no folder"
        files = snapshot(folder)
        empty = [q for q in folder.rglob("*") if q.is_dir() and not any(q.iterdir())]
        if any(".tmp" in f for f in files) or empty or "config.json" in files:
            return f"FAILED: half-written ({[f for f in files if '.tmp' in f] or empty or 'config.json'})"
        proc = start([*args, "--out", folder, "--resume"])
        _, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            return f"FAILED: --resume exit {proc.returncode} ({err[-200:]})"
        ref = json.loads((p.root / "run/results.json").read_text())["strategies"]["graft"]["matrix"]
        got = json.loads((folder / "results.json").read_text())["strategies"]["graft"]["matrix"]
        return "nothing half-written; --resume then equals the uninterrupted run" if got == ref else \
            "MATRICES DIFFER after --resume"
    return check


def _saving(folder: Path) -> bool:
    """Whether the model file is being written (its temporary file exists)."""
    return folder.is_dir() and any(q.name.startswith(".model.safetensors.") for q in folder.iterdir())


def no_temporaries(folder: Path) -> Callable[[], str]:
    """No temporary file left in ``folder`` or listed in its run record."""
    def check() -> str:
        left = [f for f in snapshot(folder) if "tmp" in f]
        record = folder / "config.json"
        listed = [f for f in json.loads(record.read_text())["files"] if "tmp" in f] if record.is_file() else []
        return "no temporary file left or listed" if not left and not listed else f"FAILED: {left + listed}"
    return check


def _only_temporaries(folder: Path) -> Callable[[], str]:
    def check() -> str:
        from cl_graft.written import is_temporary

        left = [f for f in snapshot(folder) if f not in (".cl-graft.json", ".cl-graft.lock")]
        odd = [f for f in left if not any(is_temporary(part) for part in Path(f).parts)]
        return f"left only temporary names ({len(left)} files)" if not odd else f"FAILED: {odd}"
    return check
