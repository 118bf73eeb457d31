"""The Python API keeps the command line's folder rules: ``GraftStrategy.save`` beside the user's files, over a
larger save, into a folder another save holds, over links out of the folder, a stray task folder, a file; and a
NaN test input refused naming the experience. Each runs as a script (:mod:`.scripts`) on a small MLP."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from . import scripts
from .harness import Case, Probe

TITLE = "the Python API keeps the folder rules"


def cases(p: Probe) -> list[Case]:
    r = p.root
    cases = [
        Case("Python API: save(pre=False) beside the user's pre.safetensors", [r / "save-pre", "pre=False"],
             want=0, script=scripts.SAVE_POLICY,
             check=lambda: "user's pre.safetensors kept" if (r / "save-pre/pre.safetensors").read_bytes() ==
             b"the user's own file" else "USER FILES LOST"),
        Case("Python API: a one-task save over a two-task save", [r / "save-over", "over a larger save"],
             want=0, script=scripts.SAVE_POLICY, check=lambda: "task-01 removed" if not
             (r / "save-over/task-01").exists() else "FAILED: task-01 left"),
        Case("Python API: save while another save holds the folder", [r / "save-busy", "busy"],
             script=scripts.SAVE_POLICY, check=lambda: "refused, nothing written" if not
             (r / "save-busy/graft_run.json").exists() else "FAILED: written"),
    ]
    for how in ("task-01 linked out of the folder", "task-00 a link to the user's folder", "a stray task-05/x",
                "save('a-file')", "NaN test input"):
        root = r / "r4" / ("api-" + "".join(c for c in how if c.isalnum()))
        verb = "evaluate" if how == "NaN test input" else "save a one-task run over a two-task save,"
        cases.append(Case(f"Python API: {verb} {how}" if "save(" not in how else f"Python API: {how}",
                          [root, how], script=scripts.API_SAVE, check=_kept(root, how)))
    return cases


def _kept(root: Path, how: str) -> Callable[[], str]:
    def check() -> str:
        folder = root / "save"
        if "link" in how:                                    # every file of the earlier save as it wrote it
            files = json.loads((folder / "graft_run.json").read_text()).get("files", {})
            same = files and all(hashlib.sha256((folder / f).read_bytes()).hexdigest() == sha
                                 for f, sha in files.items())
            return "user's folder intact, the earlier save whole (sha256 of every file)" if same else \
                "USER FILES CHANGED"
        if "stray" in how:
            return "the user's file kept, nothing saved over" if (folder / "task-05/x").read_text() == \
                "the user's" and "unfinished" not in (folder / "graft_run.json").read_text() else "FAILED"
        if "a-file" in how:
            return "the file kept" if (root / "a-file").read_text() == "x" else "FAILED"
        return "refused, the experience named"
    return check
