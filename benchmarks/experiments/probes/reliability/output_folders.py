"""Output folders: a command writes only into a new or empty folder or its own earlier output; ``--overwrite``
removes only the files cl-graft wrote (the user's files, beside them or inside the run's sub-folders, are kept);
no write through a symbolic link out of ``--out``; a failed command removes only its own files; a run that stopped
on an error after it wrote files says that ``--resume`` cannot continue it and to pass ``--overwrite``."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from . import scripts
from .harness import DIGITS, FT, LOC, RUN, Case, Probe, cli, error_line, snapshot

TITLE = "output folders"
USER = {"NOTES.txt": b"top", "graft/state/NOTES.txt": b"the user's notes",
        "graft/state/backup/skills.json": b'{"a backup": true}\n'}
"""The user's files put into a copy of the reference run before ``run --overwrite``."""


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    finetune = ["finetune", "--task", "sst2", *d, *FT]
    graft = ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft"]
    cases = [
        Case('--out ""', [*finetune, "--out", ""],
             check=lambda: "cwd untouched" if not Path(".cl-graft.json").exists() else "WROTE INTO CWD"),
        Case("unwritable --out", [*finetune, "--out", r / "a-file" / "out"],
             setup=lambda: (r / "a-file").write_text("x"), check=lambda: "nothing written"),
        Case("finetune again, no --overwrite", [*finetune, "--out", r / "ft"],
             check=p.kept_later(r / "ft", "earlier results intact")),
        Case("finetune again, --overwrite", [*finetune, "--out", r / "ft", "--overwrite"], want=0,
             check=p.recorded(r / "ft")),
        Case("finetune killed (SIGKILL), then again", ["finetune", "--task", "sst2", *d, "--preset", "smoke",
                                                       "--out", r / "killed"],
             want=-9, interrupt=("SIGKILL", lambda: (r / "killed" / ".cl-graft.json").exists()),
             check=_rerun_accepted(r / "killed", finetune)),
        Case("localize --finetuned D --out D", ["localize", "--task", "sst2", *d, *LOC, "--finetuned", r / "ft",
                                                "--out", r / "ft", "--overwrite"],
             check=p.kept_later(r / "ft", "fine-tune's files intact")),
        Case("localize", ["localize", "--task", "sst2", *d, *LOC, "--finetuned", r / "ft", "--out", r / "loc"],
             want=0, check=lambda: "regions: " + ", ".join(sorted(p.name for p in (r / "loc/regions").iterdir()))),
        Case("localize --overwrite, other region size", ["localize", "--task", "sst2", *d, *LOC[:-1], "0.02",
                                                      "--finetuned", r / "ft", "--out", r / "loc", "--overwrite"],
             want=0, setup=lambda: (r / "loc" / "notes.txt").write_text("the user's notes"),
             check=lambda: "regions: " + ", ".join(sorted(p.name for p in (r / "loc/regions").iterdir()))
             + ("; user's notes.txt kept" if (r / "loc/notes.txt").is_file() else "; NOTES LOST")),
        Case("multitask again, no --overwrite", ["multitask", "--tasks", "sst2,cr", "--no-single", *d,
                                                 "--preset", "smoke", "--out", r / "mt"],
             check=p.kept_later(r / "mt", "earlier results intact")),
        Case("plot into the run's figures/", ["plot", r / "mt"], want=0,
             check=lambda: f"{len(list((r / 'mt/figures').glob('*.png')))} figures redrawn"),
        Case("plot --out a new folder", ["plot", r / "mt", "--out", r / "figs"], want=0,
             check=lambda: f"{len(list((r / 'figs').glob('*.png')))} figures + record"),
    ]
    for command, args in {"finetune": ["--task", "sst2", *FT], "localize": ["--task", "sst2", *LOC],
                          "multitask": ["--tasks", "sst2,cr", "--preset", "smoke"],
                          "run": ["--stream", "sst2,cr", *RUN, "--strategies", "naive"]}.items():
        for overwrite in ([], ["--overwrite"]):
            folder = p.user_folder(f"user-{command}{'-ow' if overwrite else ''}")
            cases.append(Case(f"{command} into the user's folder{' + --overwrite' if overwrite else ''}",
                              [command, *args, *d, "--out", folder, *overwrite], check=p.user_kept(folder)))
    plot_folder = p.user_folder("user-plot")
    cases += [
        Case("plot into the user's folder", ["plot", r / "mt", "--out", plot_folder], check=p.user_kept(plot_folder)),
        Case("run --overwrite, the user's files in <out>/graft/state", [*graft, "--out", r / "run-ow", "--overwrite"],
             want=0, setup=lambda: _user_files_in_run(r), check=lambda: _user_files_kept(r / "run-ow")),
        Case("finetune --lr 1e9 fails while the user adds a file to --out",
             ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--lr", "1e9", "--out", r / "fail"],
             during=(lambda: (r / "fail" / ".cl-graft.json").exists(),
                     lambda: (r / "fail" / "my_notes.txt").write_text("the user's notes")),
             check=lambda: _only_user_file(r / "fail")),
    ]
    for link in ("graft/state/skills/task-00", "graft/state"):
        cases.append(Case(f"run --overwrite, {link} a link out of --out", [*graft, "--out", r / "run-link",
                                                                             "--overwrite"],
                          setup=_linked(p, link), check=_link_target_kept(p)))
    return cases + _failed_run(p)


def _failed_run(p: Probe) -> list[Case]:
    """A run that stopped on an error after its first experience was saved; ``--resume`` of it; ``--overwrite``
    of it."""
    folder = p.root / "failed"
    run = ["run", "--stream", "permuted-digits:3", *DIGITS, "--steps", "5", "--strategies", "graft", "--out", folder]
    stopped = Case("run graft: a check fails in the second experience, after the first was saved (put in by a "
                   "script)", run, script=scripts.FAILING)
    stopped.check = lambda: _says_overwrite(stopped, folder, "graft's state kept; the error says --resume cannot "
                                                              "continue it, pass --overwrite")
    resumed = Case("--resume of that run", [*run, "--resume"])
    resumed.check = lambda: _says_overwrite(resumed, folder, "refused: --resume cannot continue it, pass "
                                                              "--overwrite; graft's state kept")
    return [stopped, resumed,
            Case("--overwrite of that run", [*run, "--overwrite"], want=0,
                 check=lambda: "results written, the failure forgotten" if (folder / "results.json").is_file() and
                 "failed" not in json.loads((folder / ".cl-graft.json").read_text()) else "FAILED")]


def _says_overwrite(case: Case, folder: Path, what: str) -> str:
    line = error_line(case)
    ok = "--resume cannot continue" in line and "--overwrite" in line and (folder / "graft/state").is_dir() and \
        not (folder / "results.json").exists()
    return what if ok else f"FAILED: {line[:200]}"


def _rerun_accepted(folder: Path, args: list) -> Callable[[], str]:
    def check() -> str:
        code, err = cli([*args, "--out", folder])
        return "rerun without --overwrite: exit 0" if code == 0 else f"RERUN FAILED ({code}: {err[-200:]})"
    return check


def _user_files_in_run(r: Path) -> None:
    folder = shutil.copytree(r / "run", r / "run-ow")
    for name, data in USER.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _user_files_kept(folder: Path) -> str:
    listed = set(json.loads((folder / "config.json").read_text())["files"])
    kept = all((folder / n).is_file() and (folder / n).read_bytes() == b for n, b in USER.items())
    if not kept or listed & set(USER):
        return "USER FILES LOST or listed"
    return "user's files under graft/state kept, not listed"


def _only_user_file(folder: Path) -> str:
    left = set(snapshot(folder))
    if "my_notes.txt" not in left:
        return "NOTES LOST"
    return "user's my_notes.txt kept, nothing of the run" if left <= {"my_notes.txt", ".cl-graft.json"} else \
        f"FOLDER CHANGED: {sorted(left)}"


def _linked(p: Probe, link: str) -> Callable[[], None]:
    def setup() -> None:
        run, user = p.root / "run-link", p.root / "users-folder"
        for folder in (run, user):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(p.root / "run", run)
        shutil.copytree(run / link, user)
        shutil.rmtree(run / link)
        (run / link).symlink_to(user, target_is_directory=True)
        p.user_before = snapshot(user)
    return setup


def _link_target_kept(p: Probe) -> Callable[[], str]:
    return lambda: "user's folder outside --out intact" if snapshot(p.root / "users-folder") == p.user_before \
        else "USER FILES CHANGED"
