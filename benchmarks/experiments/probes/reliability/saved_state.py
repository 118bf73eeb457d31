"""Saved state: a truncated or edited fine-tune, hand-edited or tampered skills and saved runs (reordered tasks,
swapped task folders, ``../../x``, edited fields, NaN feature statistics), a fine-tune of another seed or an
unfinished one, an unfinished run's export: each refused in one line naming the file and field, or (a finished
task of an unfinished run) exported; a task's patch is written once; an exported folder's files share one mode;
``export`` of a digits run says what it supports."""
from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from cl_graft.files import read_safetensors, write_safetensors

from . import scripts
from .harness import LOC, RUN, Case, Probe

TITLE = "saved state is checked before it is used"
SAVED_EDITS = ("saved as is", "task folders swapped", "skills.json tasks reordered", 'a task renamed "../../x"',
               "graft_run.json settings a list", "graft_run.json region_size.bogus", 'graft_run.json finder "abc"',
               'skills.json adaptations "abc"', "skills.json a folder", "NaN in features.safetensors")
"""The edits of a saved run that :data:`.scripts.SAVED` makes before it loads it."""


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    o = r / "o-saved"
    localize = ["localize", "--task", "sst2", *d, *LOC]
    skills = r / "run-edit/graft/state/skills"
    cases = [
        Case("localize --finetuned truncated", [*localize, "--finetuned", r / "ft-truncated", "--out", o],
             setup=lambda: _broken_model(p, "truncated"), check=p.absent(o)),
        Case("localize --finetuned edited", [*localize, "--finetuned", r / "ft-edited", "--out", o],
             setup=lambda: _broken_model(p, "edited"), check=p.absent(o)),
        Case("surgical --seed 0 --finetuned a seed-1 fine-tune", ["surgical", "--task", "sst2", *d, "--preset",
                                                                  "smoke", "--finetuned", r / "busy-ft", "--out", o],
             check=p.absent(o)),
        Case("localize --finetuned an unfinished fine-tune", [*localize, "--finetuned", r / "ft-unfinished",
                                                              "--out", o],
             setup=lambda: _unfinished_finetune(p), check=p.absent(o)),
    ]
    edits = {"skills.json without shapes": lambda s: _drop(s / "skills.json", "shapes"),
             'skills.json "tasks": "sst2"': lambda s: _edit(s / "skills.json", lambda c: {**c, "tasks": "sst2"}),
             "run config.json without seed": lambda s: _drop(s.parents[2] / "config.json", "seed"),
             "skills.json tasks reordered": lambda s: _edit(s / "skills.json",
                                                            lambda c: {**c, "tasks": c["tasks"][::-1]}),
             "skills.json task_meta [1]": lambda s: _edit(s / "skills.json", lambda c: {**c, "task_meta": [1]}),
             "skills.json a folder": lambda s: ((s / "skills.json").unlink(), (s / "skills.json").mkdir())}
    for name, edit in edits.items():
        cases.append(Case(f"export, {name}", ["export", "--skills", skills, "--task", "sst2", *d, "--out", o],
                          setup=_edited(p, edit), check=_untouched(p, o)))
    for edit in SAVED_EDITS:
        folder = r / "saved" / edit.replace(" ", "_").replace('"', "").replace("/", "").replace(".", "")
        cases.append(Case(f"Python API: load a saved run, {edit}", [folder, edit], script=scripts.SAVED,
                          want=0 if edit == "saved as is" else 2, setup=_saved_copy(p, folder),
                          check=lambda edit=edit: "loaded" if edit == "saved as is" else "refused"))
    cases += [
        Case("run over 5 tasks: each task's patch written once",
             ["run", "--stream", "sst2,cr,mpqa,mrpc,rte", *d, *RUN, "--strategies", "graft", "--out", r / "run5"],
             want=0, check=_written_once(r / "run5")),
        Case("export of an unfinished run, a task not learned yet",
             ["export", "--skills", r / "run-unfinished/graft/state/skills", "--task", "cr", *d, "--out", o],
             setup=lambda: _unfinished(p), check=p.absent(o)),
        Case("export of an unfinished run, its finished task",
             ["export", "--skills", r / "run-unfinished/graft/state/skills", "--task", "sst2", *d, "--out",
              r / "exp-unfinished"], want=0,
             check=lambda: "exported" if (r / "exp-unfinished/model.safetensors").is_file() else "FAILED"),
        Case("export of a digits run", ["export", "--skills", r / "r4/resumed/graft/state/skills", "--task", "perm0",
                                        "--out", o], check=p.absent(o)),
        Case("export of the reference run's task sst2: every file one mode",
             ["export", "--skills", r / "run/graft/state/skills", "--task", "sst2", *d, "--out", r / "exported"],
             want=0, check=_one_mode(r / "exported")),
    ]
    return cases


def _broken_model(p: Probe, how: str) -> None:
    folder = shutil.copytree(p.root / "ft", p.root / f"ft-{how}")
    if how == "truncated":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    else:
        config = json.loads((folder / "classifier_config.json").read_text())
        (folder / "classifier_config.json").write_text(json.dumps({**config, "head": "mystery"}))


def _unfinished_finetune(p: Probe) -> None:
    folder = shutil.copytree(p.root / "ft", p.root / "ft-unfinished")
    (folder / "config.json").unlink()


def _edited(p: Probe, edit: Callable[[Path], object]) -> Callable[[], None]:
    """A copy of the reference run as ``run-edit``, ``edit`` applied to its skills folder."""
    def setup() -> None:
        folder = p.root / "run-edit"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(p.root / "run", folder)
        edit(folder / "graft/state/skills")
    return setup


def _untouched(p: Probe, out: Path) -> Callable[[], str]:
    kept = p.kept_later(p.root / "run-edit", "")

    def check() -> str:
        return "FOLDER CHANGED" if kept() else ("edited folder untouched, nothing written" if not out.exists()
                                                else "OUT EXISTS")
    check.before = kept.before
    return check


def _saved_copy(p: Probe, folder: Path) -> Callable[[], None]:
    """The run the first API case saved, copied (the first case saves it itself)."""
    def setup() -> None:
        first = p.root / "saved" / "saved_as_is"
        if first.exists() and folder != first:
            shutil.copytree(first, folder)
    return setup


def _written_once(folder: Path) -> Callable[[], str]:
    def check() -> str:
        skills = folder / "graft/state/skills"
        times = [(skills / f"task-{k:02d}" / "patch.safetensors").stat().st_mtime_ns for k in range(5)]
        return "patch files written at 5 different times, in task order" if times == sorted(set(times)) and \
            len(set(times)) == 5 else "FAILED: patches rewritten together"
    return check


def _unfinished(p: Probe) -> None:
    """The reference run as if killed before cr was learned."""
    folder = p.root / "run-unfinished"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(p.root / "run", folder)
    for name in ("config.json", "results.json", "graft/result.json"):
        (folder / name).unlink()
    skills = folder / "graft/state/skills"
    shutil.rmtree(skills / "task-01")
    _edit(skills / "skills.json", lambda c: {**c, "tasks": c["tasks"][:1], "sizes": c["sizes"][:1],
                                             "features": (c.get("features") or [None])[:1],
                                             "task_meta": {k: v for k, v in c.get("task_meta", {}).items()
                                                           if k == "sst2"}})
    stats = read_safetensors(skills / "features.safetensors")        # cr's statistics were never fitted
    write_safetensors(skills / "features.safetensors", {k: t for k, t in stats.items() if k.startswith("0.")})


def _one_mode(folder: Path) -> Callable[[], str]:
    def check() -> str:
        modes = {oct(stat.S_IMODE(q.stat().st_mode)) for q in folder.rglob("*") if q.is_file()}
        return f"every file {modes.pop()}" if len(modes) == 1 else f"FAILED: modes {sorted(modes)}"
    return check


def _drop(path: Path, key: str) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in data.items() if k != key}))


def _edit(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
