"""Resumed runs: ``--resume`` after a Ctrl-C or a SIGKILL (with the temporary files a kill leaves) ends with the
uninterrupted run's numbers; other settings, strategies or data are refused; a resumed run is checked like a saved
one (a hand-edited ``progress.json`` or ``result.json`` is refused naming the field; the earlier session's
records kept). ``r4/resumed`` is read by :mod:`.pages` and :mod:`.saved_state`."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from . import scripts
from .harness import DIGITS, RUN, Case, Probe
from .interrupted import no_temporaries

TITLE = "resumed runs are checked like saved ones"


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    graft = ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft"]
    cases = [
        Case("run interrupted (SIGINT) after the first experience", [*graft, "--out", r / "run-int"], want=1,
             interrupt=("SIGINT", lambda: (r / "run-int/graft/state/progress.json").exists()),
             check=lambda: "state kept for --resume"),
        Case("run --resume after SIGINT", [*graft, "--out", r / "run-int", "--resume"], want=0,
             check=lambda: _same_results(r)),
        Case("run --resume with --k 4", [*graft, "--k", "4", "--out", r / "run", "--resume"],
             check=p.kept_later(r / "run", "earlier run intact")),
        Case("run --resume with --strategies graft,naive", [*graft[:-1], "graft,naive", "--out", r / "run",
                                                            "--resume"],
             check=p.kept_later(r / "run", "earlier run intact")),
        Case("run --resume with other data", ["run", "--stream", "sst2,cr", "--data-dir", r / "other-data", *RUN,
                                              "--strategies", "graft", "--out", r / "run", "--resume"],
             setup=lambda: _other_data(p), check=p.kept_later(r / "run", "earlier run intact")),
    ]
    edits = {"graft/result.json = {}": lambda f: (f / "graft/result.json").write_text("{}"),
             'progress.json "seconds": "abc"': lambda f: _edit(f / "graft/state/progress.json", seconds="abc"),
             "progress.json without rows": lambda f: _drop(f / "graft/state/progress.json", "rows"),
             "progress.json a JSON list": lambda f: (f / "graft/state/progress.json").write_text("[]")}
    for name, edit in edits.items():
        cases.append(Case(f"hand-edited {name}", [*graft, "--out", r / "run-edit", "--resume"],
                          setup=_edited_run(p, edit, unfinished=name != "graft/result.json = {}"),
                          check=p.kept_later(r / "run-edit", "edited folder untouched")))
    cases += [
        Case("run killed (SIGKILL) after the first experience", [*graft, "--out", r / "run-kill"], want=-9,
             interrupt=("SIGKILL", lambda: (r / "run-kill/graft/state/progress.json").exists()),
             check=lambda: "state kept for --resume"),
        Case("run --resume after SIGKILL, with the .tmp files a kill leaves", [*graft, "--out", r / "run-kill",
                                                                              "--resume"],
             want=0, setup=lambda: _stale_temporaries(r / "run-kill/graft/state"),
             check=no_temporaries(r / "run-kill")),
    ]
    return cases + _progress_edits(p)


def _progress_edits(p: Probe) -> list[Case]:
    """A graft,der class-incremental digits run stopped in the third experience, resumed after an edit of its
    progress file."""
    r = p.root / "r4"
    stopped = r / "stopped"
    run = ["run", "--stream", "permuted-digits:4", "--scenario", "class", *DIGITS, "--steps", "5",
           "--strategies", "graft,der"]
    cases = [Case("run graft,der (class) stopped in the third experience (Ctrl-C, put in by a script)",
                  [*run, "--out", stopped], want=1, script=scripts.STOPPED, check=_committed(stopped))]
    edits = {"rows[0][0] = 5.0": lambda q: _set_row(q, 0, 0, 5.0), "rows[1][1] = -1": lambda q: _set_row(q, 1, 1, -1),
             "rows[0] one short": lambda q: {**q, "rows": [q["rows"][0][:3], *q["rows"][1:]]},
             "a row added": lambda q: {**q, "rows": [*q["rows"], q["rows"][-1]]},
             "a row dropped": lambda q: {**q, "rows": q["rows"][:1]},
             "state.pre_fingerprint changed": lambda q: {**q, "state": {**q["state"], "pre_fingerprint": "0" * 64}},
             "rows[0][0] = 0.5 (valid, not what ran)": lambda q: _set_row(q, 0, 0, 0.5),
             "settings.method changed": lambda q: {**q, "settings": {**q["settings"], "method": "topk"}}}
    for name, edit in edits.items():
        folder = r / ("edited-" + "".join(c for c in name if c.isalnum()))
        cases.append(Case(f"--resume, graft's progress.json {name}", [*run, "--out", folder, "--resume"],
                          setup=_copied(p, stopped, folder, edit), check=_progress_kept(p, folder)))
    resumed = r / "resumed"
    cases.append(Case("--resume unedited (an empty figures/.final.png.*.tmp/ left by a kill)",
                      [*run, "--out", resumed, "--resume"], want=0, setup=_copied(p, stopped, resumed, None),
                      check=_resumed_whole(resumed)))
    return cases


def _same_results(r: Path) -> str:
    full = json.loads((r / "run" / "results.json").read_text())["strategies"]
    resumed = json.loads((r / "run-int" / "results.json").read_text())["strategies"]
    same = all(full[n]["matrix"] == resumed[n]["matrix"] for n in full)
    return "matrices equal the uninterrupted run's" if same else "MATRICES DIFFER"


def _other_data(p: Probe) -> None:
    other = p.root / "other-data"
    for t in ("sst2", "cr"):
        shutil.copytree(p.data / t, other / t)
    lines = (other / "cr" / "train.jsonl").read_bytes().splitlines()
    (other / "cr" / "train.jsonl").write_bytes(b"\n".join(lines[1:]) + b"\n")


def _edited_run(p: Probe, edit, *, unfinished: bool) -> Callable[[], None]:
    """A copy of the reference run as ``run-edit`` (without its records where ``unfinished``), then ``edit``."""
    def setup() -> None:
        folder = p.root / "run-edit"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(p.root / "run", folder)
        if unfinished:
            for name in ("config.json", "results.json", "graft/result.json"):
                (folder / name).unlink()
        edit(folder)
    return setup


def _stale_temporaries(state: Path) -> None:
    (state / "skills/.skills.json.k1ll3d.tmp").write_text("{half")
    (state / ".progress.json.k1ll3d.tmp").write_text("{half")


def _committed(folder: Path) -> Callable[[], str]:
    def check() -> str:
        rows = json.loads((folder / "graft/state/progress.json").read_text())["rows"]
        return f"graft's progress.json commits {len(rows)} experiences, no results" if len(rows) == 2 and \
            not (folder / "results.json").exists() else f"FAILED: {len(rows)} rows committed"
    return check


def _copied(p: Probe, stopped: Path, folder: Path, edit) -> Callable[[], None]:
    """A copy of the stopped run, its progress file edited (None: an empty temporary folder added instead)."""
    def setup() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(stopped, folder)
        if edit is None:
            (folder / "figures/.final.png.k1ll3d.tmp").mkdir(parents=True)
            return
        path = folder / "graft/state/progress.json"
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))
        p.progress_before = path.read_bytes()
    return setup


def _progress_kept(p: Probe, folder: Path) -> Callable[[], str]:
    return lambda: "progress.json as it was, no results" if (folder / "graft/state/progress.json").read_bytes() \
        == p.progress_before and not (folder / "results.json").exists() else "FAILED: CHANGED"


def _resumed_whole(folder: Path) -> Callable[[], str]:
    def check() -> str:
        results = json.loads((folder / "results.json").read_text())
        graft = results["strategies"]["graft"]
        seconds = {k: len(graft["info"][k]) for k in ("localize_seconds", "feature_seconds")}
        tmp = [q.name for q in folder.rglob("*.tmp")]
        ok = graft["summary"]["forgetting"] == 0 and set(seconds.values()) == {len(results["tasks"])} and not tmp
        return (f"graft forgetting 0; localize/feature seconds for all {len(results['tasks'])} tasks; no .tmp left"
                if ok else f"FAILED: forgetting {graft['summary']['forgetting']}, {seconds}, {tmp}")
    return check


def _set_row(progress: dict, i: int, j: int, value: float) -> dict:
    progress["rows"][i][j] = value
    return progress


def _drop(path: Path, key: str) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in data.items() if k != key}))


def _edit(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
