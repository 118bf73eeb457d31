"""One writer per folder: a second command on a folder another command is writing (or inside it) is refused at
once, before it loads a model, and the first finishes alone (its own files, its own seed throughout)."""
from __future__ import annotations

import json
import time
from collections.abc import Callable

from .harness import FT, RUN, Case, Probe

TITLE = "one writer per folder"


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    graft = ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft"]
    long_run = ["run", "--stream", "sst2,cr", *d, "--preset", "smoke", "--steps", "30", "--quiet", "--strategies",
                "graft", "--seed", "1"]                             # minutes: long enough to be disturbed
    seed1_finetune = ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--seed", "1"]
    return [
        Case("finetune while another finetune (seed 1) writes --out", ["finetune", "--task", "sst2", *d, *FT,
                                                                         "--out", r / "busy-ft"],
             setup=p.writer("busy-ft", seed1_finetune), check=_alone(p, "busy-ft")),
        Case("run (seed 0) while another run (seed 1) writes --out", [*graft, "--out", r / "busy-run"],
             setup=p.writer("busy-run", long_run), check=_running(p, "busy-run")),
        Case("run --resume while that run writes --out", [*long_run, "--out", r / "busy-run", "--resume"],
             check=_alone(p, "busy-run")),
        Case("export --out inside a running run's --out", ["export", "--skills", r / "run/graft/state/skills",
                                                          "--task", "sst2", *d, "--out", r / "busy3/graft/exp"],
             setup=p.writer("busy3", long_run), check=_busy_untouched(p, "busy3")),
        Case("finetune on a folder another finetune writes", ["finetune", "--task", "sst2", *d, *FT, "--out",
                                                              r / "busy-ft3"],
             setup=p.writer("busy-ft3", seed1_finetune), check=_refused_fast(p, "busy-ft3")),
    ]


def _running(p: Probe, name: str) -> Callable[[], str]:
    return lambda: "the first writer still writing" if p.writers[name].poll() is None else \
        "FAILED: the first writer had finished"


def _alone(p: Probe, name: str) -> Callable[[], str]:
    """Waits for the first writer; its folder must hold its own run only (seed 1 everywhere)."""
    def check() -> str:
        proc = p.writers[name]
        _, err = proc.communicate(timeout=1800)
        folder = p.root / name
        seeds = {json.loads((folder / ".cl-graft.json").read_text())["settings"]["seed"],
                 json.loads((folder / "config.json").read_text())["seed"]}
        if (folder / "results.json").is_file():
            seeds.add(json.loads((folder / "results.json").read_text())["run"]["seed"])
        if proc.returncode != 0 or seeds != {1}:
            return f"FAILED: first writer exit {proc.returncode}, seeds {sorted(seeds)} ({err[-200:]})"
        return "first writer finished alone: its files, seed 1 throughout"
    return check


def _busy_untouched(p: Probe, name: str) -> Callable[[], str]:
    def check() -> str:
        if not p.stop(name):
            return "FAILED: the run had finished"
        out = p.root / name / "graft/exp"
        return "nothing written inside the running run's folder" if not out.exists() else "OUT EXISTS"
    return check


def _refused_fast(p: Probe, name: str) -> Callable[[], str]:
    def check() -> str:
        seconds = time.time() - p.started[name]
        p.stop(name)
        return f"refused after {seconds:.0f} s, before loading a model" if seconds < 30 else \
            f"FAILED: refused only after {seconds:.0f} s"
    return check
