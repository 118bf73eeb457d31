"""The reliability probe's second round (:mod:`.reliability_probe` runs these cases after its own): two commands on
one folder, NaN outputs from finite weights, ``--overwrite`` and a failing command beside the user's files, a
failed and an empty experience in the Python API (as scripts), a full disk, hand-edited files, ``--finetuned``
folders of another seed or unfinished, devices cl-graft cannot run on, and the temporary files of SIGKILL and
Ctrl-C."""
from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from .probe_harness import FT, FULL_DISK, LOC, RUN, Case, snapshot, start, wait_until

RUN_DISK = 1_000 * 1024
"""``ulimit -f 1000`` for ``run``: its largest file (a task's skill patch, ~2 MB with MiniLM) does not fit."""

STREAM = """
import sys, torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin
from cl_graft.benchmarks import load_rows
from cl_graft.benchmarks.streams import make_benchmark
from cl_graft.errors import UserError
from cl_graft.presets import get_preset
from cl_graft.regions.config import LocalizeConfig
from cl_graft.strategies import GraftStrategy, LocalizeFinder, TaskAdapter
from cl_graft.strategies.plugins.recipe import FiniteGuard, StepLimit
from cl_graft.training.models import build_classifier

preset = get_preset("smoke", seed=0)
splits = [load_rows(t, sys.argv[1], preset, seed=0) for t in ("sst2", "cr")]
torch.manual_seed(0)
clf = build_classifier("minilm", max_length=preset.max_length)
for i, s in enumerate(splits):
    clf.add_task(s.spec, seed=i)
bm = make_benchmark(splits, clf)
model = TaskAdapter(clf, ["sst2", "cr"])
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
strategy = GraftStrategy(model=model, optimizer=opt, train_mb_size=8, train_epochs=3,
                         plugins=[StepLimit(3), FiniteGuard()], evaluator=EvaluationPlugin(
                             accuracy_metrics(experience=True), loggers=[]),
                         finder=LocalizeFinder("graft", LocalizeConfig(region_size=0.01, steps=2, batch_size=8,
                                                                       n_batches=1, select_rows=16)))
"""

UNDO_SCRIPT = STREAM + """
import json
strategy.train(bm.train_stream[0])
TASK0 = "Top1_Acc_Exp/eval_phase/test_stream/Task000/Exp000"
accuracy = strategy.eval([bm.test_stream[0]])[TASK0]
state = {k: v.clone() for k, v in model.state_dict().items()}
for group in opt.param_groups:
    group["lr"] = 1e9                                           # experience 1 diverges
try:
    strategy.train(bm.train_stream[1])
except UserError as e:
    print(f"error: {e}", file=sys.stderr)
restored = all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
same = strategy.eval([bm.test_stream[0]])[TASK0] == accuracy
for group in opt.param_groups:
    group["lr"] = 0.05
strategy.train(bm.train_stream[1])
json.dump({"restored": restored, "same_accuracy": same, "tasks": strategy.graft.owners.tasks}, open(sys.argv[2], "w"))
"""

EMPTY_SCRIPT = STREAM + """
import copy
empty = copy.copy(bm.train_stream[1])                          # experience 1 with its examples filtered away
empty._dataset = empty.dataset.subset([])
try:
    strategy.train(empty)
except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
"""


class RoundTwo:
    """The cases, over the folders the first round made (``ft``: a finetune, ``run``: a graft run of sst2, cr)."""

    def __init__(self, probe) -> None:
        self.probe, self.root, self.data = probe, probe.root, probe.data
        self.writers: dict[str, subprocess.Popen] = {}

    def cases(self) -> list[Case]:
        p, r, d = self.probe, self.root, ["--data-dir", self.data]
        o = r / "o2"
        graft = ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft"]
        long_run = ["run", "--stream", "sst2,cr", *d, "--preset", "smoke", "--steps", "30", "--quiet", "--strategies",
                    "graft", "--seed", "1"]                         # minutes: long enough to be disturbed
        skills = r / "run-edit" / "graft/state/skills"
        cases = [
            Case("finetune while another finetune (seed 1) writes --out", ["finetune", "--task", "sst2", *d, *FT,
                                                                             "--out", r / "busy-ft"],
                 setup=self.writer("busy-ft", ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--seed", "1"]),
                 check=self.alone("busy-ft")),
            Case("run (seed 0) while another run (seed 1) writes --out", [*graft, "--out", r / "busy-run"],
                 setup=self.writer("busy-run", long_run), check=self.running("busy-run")),
            Case("run --resume while that run writes --out", [*long_run, "--out", r / "busy-run", "--resume"],
                 check=self.alone("busy-run")),
            Case("finetune --steps 1 --lr 1e30 (finite weights, NaN outputs)",
                 ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--steps", "1", "--lr", "1e30", "--out", o],
                 check=p.absent(o)),
            Case("localize --finetuned a model with NaN outputs", ["localize", "--task", "sst2", *d, *LOC,
                                                                   "--finetuned", r / "ft-nan", "--out", o],
                 setup=self.nan_model, check=p.absent(o)),
            Case("run --overwrite, the user's files in <out>/graft/state", [*graft, "--out", r / "run-ow",
                                                                             "--overwrite"],
                 want=0, setup=self.user_files_in_run, check=self.user_files_kept),
            Case("finetune --lr 1e9 fails while the user adds a file to --out",
                 ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--lr", "1e9", "--out", r / "fail"],
                 during=(lambda: (r / "fail" / ".cl-graft.json").exists(),
                         lambda: (r / "fail" / "my_notes.txt").write_text("the user's notes")),
                 check=self.only_user_file),
            Case("Python API: experience 1 diverges", [self.data, r / "undo.json"], want=0, script=UNDO_SCRIPT,
                 check=self.undone),
            Case("Python API: an experience without examples", [self.data], script=EMPTY_SCRIPT,
                 check=lambda: "refused before training"),
            Case("finetune on a full disk", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "full-ft"],
                 file_size=FULL_DISK, check=p.absent(r / "full-ft")),
            Case("export on a full disk", ["export", "--skills", r / "run/graft/state/skills", "--task", "sst2", *d,
                                           "--out", r / "full-exp"], file_size=FULL_DISK,
                 check=p.absent(r / "full-exp")),
            Case("run on a full disk (files up to 1 MB), then --resume", [*graft, "--out", r / "full-run"],
                 file_size=RUN_DISK, check=self.resumes(r / "full-run", graft)),
        ]
        edits = {"skills.json without shapes": ("export", lambda f: _drop(f / "graft/state/skills/skills.json",
                                                                           "shapes")),
                 'skills.json "tasks": "sst2"': ("export", lambda f: _edit(f / "graft/state/skills/skills.json",
                                                                            tasks="sst2")),
                 "run config.json without seed": ("export", lambda f: _drop(f / "config.json", "seed")),
                 "graft/result.json = {}": ("resume", lambda f: (f / "graft/result.json").write_text("{}")),
                 'progress.json "seconds": "abc"': ("unfinished", lambda f: _edit(f / "graft/state/progress.json",
                                                                                   seconds="abc")),
                 "progress.json without rows": ("unfinished", lambda f: _drop(f / "graft/state/progress.json",
                                                                               "rows")),
                 "progress.json a JSON list": ("unfinished",
                                               lambda f: (f / "graft/state/progress.json").write_text("[]"))}
        for name, (how, edit) in edits.items():
            args = ["export", "--skills", skills, "--task", "sst2", *d, "--out", o] if how == "export" else \
                [*graft, "--out", r / "run-edit", "--resume"]
            check = self.untouched(r / "run-edit", o)
            cases.append(Case(f"hand-edited {name}", args, setup=self.edited(edit, how), check=check))
        cases += [
            Case("surgical --seed 0 --finetuned a seed-1 fine-tune", ["surgical", "--task", "sst2", *d, "--preset",
                                                                      "smoke", "--finetuned", r / "busy-ft",
                                                                      "--out", o], check=p.absent(o)),
            Case("localize --finetuned an unfinished fine-tune", ["localize", "--task", "sst2", *d, *LOC,
                                                                  "--finetuned", r / "ft-unfinished", "--out", o],
                 setup=self.unfinished_finetune, check=p.absent(o)),
        ]
        for device, commands in {"meta": ["finetune", "localize", "run", "multitask", "surgical", "analyze"],
                                 "xpu": ["finetune", "run"]}.items():
            for command in commands:
                what = {"run": ["--stream", "sst2,cr"], "multitask": ["--tasks", "sst2,cr"]}.get(command,
                                                                                               ["--task", "sst2"])
                cases.append(Case(f"--device {device}", [command, *what, *d, "--preset", "smoke", "--device", device,
                                                         "--out", o], check=p.absent(o)))
        cases += [
            Case("run killed (SIGKILL) after experience 1", [*graft, "--out", r / "run-kill"], want=-9,
                 interrupt=("SIGKILL", lambda: (r / "run-kill/graft/state/progress.json").exists()),
                 check=lambda: "state kept for --resume"),
            Case("run --resume after SIGKILL, with the .tmp files a kill leaves", [*graft, "--out", r / "run-kill",
                                                                                  "--resume"],
                 want=0, setup=self.stale_temporaries, check=self.no_temporaries(r / "run-kill")),
            Case("finetune stopped (SIGINT) while saving the model", ["finetune", "--task", "sst2", *d, *FT,
                                                                      "--out", r / "ctrl-c"], want=1,
                 interrupt=("SIGINT", lambda: _saving(r / "ctrl-c"), 0.01), check=self.no_temporaries(r / "ctrl-c")),
        ]
        return cases

    # ----- two writers ---------------------------------------------------------------------------------------
    def writer(self, name: str, args: list) -> Callable[[], None]:
        """Starts the first command on ``root/name`` and waits until it holds the folder."""
        def setup() -> None:
            folder = self.root / name
            self.writers[name] = start([*args, "--out", folder])
            wait_until(self.writers[name], lambda: (folder / ".cl-graft.lock").exists(), 600)
        return setup

    def running(self, name: str) -> Callable[[], str]:
        return lambda: "the first writer still writing" if self.writers[name].poll() is None else \
            "FAILED: the first writer had finished"

    def alone(self, name: str) -> Callable[[], str]:
        """Waits for the first writer; its folder must hold its own run only (seed 1 everywhere)."""
        def check() -> str:
            proc = self.writers[name]
            _, err = proc.communicate(timeout=1800)
            folder = self.root / name
            seeds = {json.loads((folder / ".cl-graft.json").read_text())["settings"]["seed"],
                     json.loads((folder / "config.json").read_text())["seed"]}
            if (folder / "results.json").is_file():
                seeds.add(json.loads((folder / "results.json").read_text())["run"]["seed"])
            if proc.returncode != 0 or seeds != {1}:
                return f"FAILED: first writer exit {proc.returncode}, seeds {sorted(seeds)} ({err[-200:]})"
            return "first writer finished alone: its files, seed 1 throughout"
        return check

    # ----- NaN outputs -----------------------------------------------------------------------------------------
    def nan_model(self) -> None:
        """The fine-tune with one weight matrix at 3e38: every weight finite, every output NaN."""
        import torch

        from cl_graft.artifacts import load_classifier, save_classifier

        model = load_classifier(self.root / "ft")
        with torch.no_grad():
            dict(model.named_parameters())["backbone.encoder.layer.0.output.dense.weight"].fill_(3e38)
        save_classifier(model, self.root / "ft-nan")

    # ----- the user's files --------------------------------------------------------------------------------------
    USER = {"NOTES.txt": b"top", "graft/state/NOTES.txt": b"the user's notes",
            "graft/state/backup/skills.json": b'{"a backup": true}\n'}

    def user_files_in_run(self) -> None:
        folder = shutil.copytree(self.root / "run", self.root / "run-ow")
        for name, data in self.USER.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)

    def user_files_kept(self) -> str:
        folder = self.root / "run-ow"
        listed = set(json.loads((folder / "config.json").read_text())["files"])
        kept = all((folder / n).is_file() and (folder / n).read_bytes() == b for n, b in self.USER.items())
        if not kept or listed & set(self.USER):
            return "USER FILES LOST or listed"
        return "user's files under graft/state kept, not listed"

    def only_user_file(self) -> str:
        left = set(snapshot(self.root / "fail"))
        if "my_notes.txt" not in left:
            return "NOTES LOST"
        return "user's my_notes.txt kept, nothing of the run" if left <= {"my_notes.txt", ".cl-graft.json"} else \
            f"FOLDER CHANGED: {sorted(left)}"

    # ----- the Python API --------------------------------------------------------------------------------------
    def undone(self) -> str:
        done = json.loads((self.root / "undo.json").read_text())
        if not (done["restored"] and done["same_accuracy"] and done["tasks"] == ["sst2", "cr"]):
            return f"FAILED: {done}"
        return "model restored bit-exactly, task 0 accuracy unchanged, experience 1 trained after"

    # ----- full disk, edited and unfinished folders ----------------------------------------------------------
    def resumes(self, folder: Path, args: list) -> Callable[[], str]:
        """Nothing half-written is left (no temporary file, no empty folder, no run record), and ``--resume``
        without the limit ends with the uninterrupted run's matrix."""
        def check() -> str:
            if not folder.exists():
                return "FAILED: no folder"
            files = snapshot(folder)
            empty = [p for p in folder.rglob("*") if p.is_dir() and not any(p.iterdir())]
            if any(".tmp" in f for f in files) or empty or "config.json" in files:
                return f"FAILED: half-written ({[f for f in files if '.tmp' in f] or empty or 'config.json'})"
            proc = start([*args, "--out", folder, "--resume"])
            _, err = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                return f"FAILED: --resume exit {proc.returncode} ({err[-200:]})"
            ref = json.loads((self.root / "run/results.json").read_text())["strategies"]["graft"]["matrix"]
            got = json.loads((folder / "results.json").read_text())["strategies"]["graft"]["matrix"]
            return "nothing half-written; --resume then equals the uninterrupted run" if got == ref else \
                "MATRICES DIFFER after --resume"
        return check

    def untouched(self, folder: Path, out: Path) -> Callable[[], str]:
        kept = self.probe.kept_later(folder, "")

        def check() -> str:
            return "FOLDER CHANGED" if kept() else ("edited folder untouched, nothing written" if not out.exists()
                                                    else "OUT EXISTS")
        check.before = kept.before
        return check

    def edited(self, edit, how: str) -> Callable[[], None]:
        def setup() -> None:
            folder = self.root / "run-edit"
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(self.root / "run", folder)
            if how == "unfinished":
                for name in ("config.json", "results.json", "graft/result.json"):
                    (folder / name).unlink()
            edit(folder)
        return setup

    def unfinished_finetune(self) -> None:
        folder = shutil.copytree(self.root / "ft", self.root / "ft-unfinished")
        (folder / "config.json").unlink()

    # ----- temporary files -------------------------------------------------------------------------------------
    def stale_temporaries(self) -> None:
        state = self.root / "run-kill/graft/state"
        (state / "skills/.skills.json.k1ll3d.tmp").write_text("{half")
        (state / ".progress.json.k1ll3d.tmp").write_text("{half")

    def no_temporaries(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            left = [f for f in snapshot(folder) if ".tmp" in f]
            record = folder / "config.json"
            listed = [f for f in json.loads(record.read_text())["files"] if ".tmp" in f] if record.is_file() else []
            return "no .tmp file left or listed" if not left and not listed else f"FAILED: {left + listed}"
        return check


def _saving(folder: Path) -> bool:
    """Whether the model file is being written (its temporary file exists)."""
    return folder.is_dir() and any(p.name.startswith(".model.safetensors.") for p in folder.iterdir())


def _drop(path: Path, key: str) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in data.items() if k != key}))


def _edit(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
