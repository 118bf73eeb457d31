"""Messages name what the user gave: setting errors name the command-line options (not Python fields), and
warnings name a digits task by its name (not its label)."""
from __future__ import annotations

import json
from pathlib import Path

from .harness import DIGITS, Case, Probe

TITLE = "messages name what the user gave"


def cases(p: Probe) -> list[Case]:
    r, o = p.root / "r4", p.root / "r4" / "o-messages"
    run = ["run", "--stream", "permuted-digits:2", *DIGITS, "--steps", "5", "--strategies", "graft"]
    cases = [Case(f"run graft {' '.join(opts)}: the error names options", [*run, *opts, "--out", o],
                  check=p.absent(o))
             for opts in (["--expected-tasks", "0"], ["--region-size", "0.1", "--tolerance", "0.01"],
                          ["--plan", "open", "--expected-tasks", "3"])]
    warned = Case("run graft on split-digits, 5 steps: warnings name the tasks",
                  ["run", "--stream", "split-digits", *DIGITS, "--steps", "5", "--strategies", "graft", "--out",
                   r / "warned"], want=0)
    warned.check = lambda: _named_warnings(warned, r / "warned")
    return [*cases, warned]


def _named_warnings(case: Case, folder: Path) -> str:
    tasks = json.loads((folder / "results.json").read_text())["tasks"]
    names = [line.split("'")[1] for line in case.result.get("stderr", "").splitlines()
             if line.startswith("warning: task ")]
    return f"{len(names)} warnings, each naming its task ({', '.join(names)})" if names and \
        set(names) <= set(tasks) else f"FAILED: {names} not in {tasks}"
