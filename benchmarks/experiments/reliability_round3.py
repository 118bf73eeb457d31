"""The reliability probe's third round (:mod:`.reliability_probe` runs these cases after the second's; ``--round 3``
runs them alone): tampered skills and saved runs, symbolic links out of ``--out``, the safetensors library's own
temporary files after a SIGKILL, hand-edited save files, ``GraftStrategy.save``'s folder policy, NaN feature
statistics, bad labels and validation rows, a task's patch written once, ``export`` inside a running command's
folder or of an unfinished run, and ``finetune`` on a busy folder. Python API cases run as scripts on a small MLP."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from cl_graft.files import read_safetensors, write_safetensors

from .probe_harness import FT, RUN, Case, snapshot, start, wait_until

MLP_RUN = """
import sys, torch
from avalanche.benchmarks import nc_benchmark
from avalanche.models import MTSimpleMLP
from avalanche.training.plugins import EvaluationPlugin
from torch.utils.data import TensorDataset
from cl_graft.errors import UserError
from cl_graft.strategies import GraftStrategy, LocalizeConfig, LocalizeFinder

def blobs(n, seed, relabel=None, nan=False):
    centres = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)) * 3
    y = torch.arange(4).repeat(n // 4)
    x = centres[y] + torch.randn(len(y), 8, generator=torch.Generator().manual_seed(seed))
    if nan:
        x[y >= 2] = float("nan")
    if relabel is not None:
        y[y == 3] = relabel
    ds = TensorDataset(x, y)
    ds.targets = y.tolist()
    return ds

def stream(relabel=None, nan=False, task_labels=True, seed=1):
    order = [0, 1, 2, 3 if relabel is None else relabel]
    return nc_benchmark(blobs(64, seed, relabel, nan), blobs(32, seed + 1, relabel), n_experiences=2,
                        task_labels=task_labels, seed=0, fixed_class_order=order)

def mlp(seed=0):
    torch.manual_seed(seed)
    return MTSimpleMLP(input_size=8, hidden_size=16)

def strategy_for(model, **kw):
    return GraftStrategy(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=16,
                         finder=LocalizeFinder("graft", LocalizeConfig(region_size=0.3, steps=2, select_rows=32)),
                         evaluator=EvaluationPlugin(loggers=[]), **kw)

def load(folder):
    model = mlp(9)
    return GraftStrategy.load(folder, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                              evaluator=EvaluationPlugin(loggers=[]))

def one_line(run):
    try:
        run()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
"""

SAVED = MLP_RUN + """
import json, shutil
from pathlib import Path
folder = Path(sys.argv[1])
if not folder.exists():
    s = strategy_for(mlp(), task_inference="features")
    bm = stream()
    for exp in bm.train_stream:
        s.train(exp)
    s.save(folder)
edit = sys.argv[2]
skills, run = folder / "skills.json", folder / "graft_run.json"
def rewrite(path, change):
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
if edit != "saved as is":
    rewrite(run, lambda d: {k: v for k, v in d.items() if k != "files"})     # a save of before round 3: no hashes
if edit == "task folders swapped":
    (folder / "task-00").rename(folder / "swap"); (folder / "task-01").rename(folder / "task-00")
    (folder / "swap").rename(folder / "task-01")
elif edit == "skills.json tasks reordered":
    rewrite(skills, lambda d: {**d, "tasks": d["tasks"][::-1]})
elif edit == 'a task renamed "../../x"':
    rewrite(skills, lambda d: {**d, "tasks": [d["tasks"][0], "../../x"]})
elif edit == "graft_run.json settings a list":
    rewrite(run, lambda d: {**d, "settings": []})
elif edit == "graft_run.json size.bogus":
    rewrite(run, lambda d: {**d, "settings": {**d["settings"], "size": {"bogus": 1}}})
elif edit == 'graft_run.json finder "abc"':
    rewrite(run, lambda d: {**d, "settings": {**d["settings"], "finder": "abc"}})
elif edit == 'skills.json adaptations "abc"':
    rewrite(skills, lambda d: {**d, "adaptations": "abc"})
elif edit == "skills.json a folder":
    skills.unlink(); skills.mkdir()
elif edit == "NaN in features.safetensors":
    from safetensors.torch import load_file, save_file
    t = load_file(folder / "features.safetensors"); t["0.mean"][0] = float("nan")
    save_file(t, folder / "features.safetensors")
one_line(lambda: load(folder))
print("loaded", file=sys.stderr)
"""

SAVE_POLICY = MLP_RUN + """
from pathlib import Path
from cl_graft.folder_lock import FolderLock
folder = Path(sys.argv[1]); folder.mkdir(parents=True, exist_ok=True)
s = strategy_for(mlp())
s.train(stream().train_stream[0])
how = sys.argv[2]
if how == "pre=False":
    (folder / "pre.safetensors").write_bytes(b"the user's own file")
    s.save(folder, pre=False)
elif how == "over a larger save":
    s.train(stream().train_stream[1]); s.save(folder)
    one = strategy_for(mlp()); one.train(stream().train_stream[0]); one.save(folder)
else:
    lock = FolderLock(folder, "another save").acquire()
    one_line(lambda: s.save(folder))
"""

BAD_ROWS = MLP_RUN + """
how = sys.argv[1]
if how == "training label 50":
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    one_line(lambda: strategy_for(model).train(stream(relabel=50, task_labels=False).train_stream[1]))
elif how == "NaN training inputs":
    s = strategy_for(mlp()); bm = stream(nan=True); s.train(bm.train_stream[0])
    one_line(lambda: s.train(bm.train_stream[1]))
else:
    held_out = stream(relabel=50, seed=3) if how == "valid_stream label 50" else stream(nan=True, seed=3)
    one_line(lambda: strategy_for(mlp(), valid_stream=held_out.train_stream).train(stream().train_stream[1]))
"""

KILLED_WRITE = """
import os, signal, sys
from pathlib import Path
import torch
import cl_graft.files
from cl_graft.outdir import claim_out_dir

def killed(tensors, filename, metadata=None):                  # as the library does: its own .tmpXXXXXX beside it
    Path(filename).with_name(".tmpK1LL3D").write_bytes(b"half a file")
    os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[2] == "kill":
    cl_graft.files.save_file = killed
with claim_out_dir(sys.argv[1], "probe", settings={}, keep_on_error=True, resume=sys.argv[2] == "resume") as run_dir:
    cl_graft.files.write_safetensors(run_dir.path / "model.safetensors", {"w": torch.zeros(2)})
    run_dir.finish({"command": "probe"})
"""


class RoundThree:
    """The cases; the first makes the graft run of sst2, cr that the others read (``run3``)."""

    def __init__(self, probe) -> None:
        self.probe, self.root, self.data = probe, probe.root, probe.data
        self.writers: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}

    def cases(self) -> list[Case]:
        p, r, d = self.probe, self.root, ["--data-dir", self.data]
        o = r / "o3"
        graft = ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft"]
        export = ["export", "--skills", r / "run3-edit/graft/state/skills", "--task", "sst2", *d, "--out", o]
        cases = [
            Case("run graft (round 3's reference)", [*graft, "--out", r / "run3"], want=0,
                 check=lambda: "results written"),
            Case("export, skills.json tasks reordered", export,
                 setup=self.edited(lambda s: _edit(s / "skills.json", lambda c: {**c, "tasks": c["tasks"][::-1]})),
                 check=self.untouched(o)),
            Case("export, skills.json task_meta [1]", export,
                 setup=self.edited(lambda s: _edit(s / "skills.json", lambda c: {**c, "task_meta": [1]})),
                 check=self.untouched(o)),
            Case("export, skills.json a folder", export,
                 setup=self.edited(lambda s: ((s / "skills.json").unlink(), (s / "skills.json").mkdir())),
                 check=self.untouched(o)),
        ]
        for edit in ("saved as is", "task folders swapped", "skills.json tasks reordered", 'a task renamed "../../x"',
                     "graft_run.json settings a list", "graft_run.json size.bogus", 'graft_run.json finder "abc"',
                     'skills.json adaptations "abc"', "skills.json a folder", "NaN in features.safetensors"):
            folder = r / "saved" / edit.replace(" ", "_").replace('"', "").replace("/", "").replace(".", "")
            cases.append(Case(f"Python API: load a saved run, {edit}", [folder, edit], script=SAVED,
                              want=0 if edit == "saved as is" else 2, setup=self.saved_copy(folder),
                              check=lambda edit=edit: "loaded" if edit == "saved as is" else "refused"))
        cases += [
            Case("Python API: save(pre=False) beside the user's pre.safetensors", [r / "save-pre", "pre=False"],
                 want=0, script=SAVE_POLICY, check=self.user_pre_kept(r / "save-pre")),
            Case("Python API: a one-task save over a two-task save", [r / "save-over", "over a larger save"],
                 want=0, script=SAVE_POLICY, check=lambda: "task-01 removed" if not (r / "save-over/task-01").exists()
                 else "FAILED: task-01 left"),
            Case("Python API: save while another save holds the folder", [r / "save-busy", "busy"], script=SAVE_POLICY,
                 check=lambda: "refused, nothing written" if not (r / "save-busy/graft_run.json").exists()
                 else "FAILED: written"),
        ]
        for how in ("training label 50", "valid_stream label 50", "NaN valid_stream inputs", "NaN training inputs"):
            cases.append(Case(f"Python API: {how}", [how], script=BAD_ROWS, check=lambda: "refused, named"))
        for link in ("graft/state/skills/task-00", "graft/state"):
            cases.append(Case(f"run --overwrite, {link} a link out of --out", [*graft, "--out", r / "run3-link",
                                                                                 "--overwrite"],
                              setup=self.linked(link), check=self.link_target_kept()))
        cases += [
            Case("a write killed (SIGKILL) inside the safetensors library", [r / "lib-kill", "kill"], want=-9,
                 script=KILLED_WRITE, check=self.only_temporaries(r / "lib-kill")),
            Case("the same folder claimed again (--resume) after it", [r / "lib-kill", "resume"], want=0,
                 script=KILLED_WRITE, check=self.no_tmp_listed(r / "lib-kill")),
            Case("run over 5 tasks: each task's patch written once",
                 ["run", "--stream", "sst2,cr,mpqa,mrpc,rte", *d, *RUN, "--strategies", "graft", "--out", r / "run5"],
                 want=0, check=self.written_once(r / "run5")),
            Case("export --out inside a running run's --out", ["export", "--skills", r / "run3/graft/state/skills",
                                                              "--task", "sst2", *d, "--out", r / "busy3/graft/exp"],
                 setup=self.writer("busy3", ["run", "--stream", "sst2,cr", *d, "--preset", "smoke", "--steps", "30",
                                             "--quiet", "--strategies", "graft", "--seed", "1"]),
                 check=self.busy_untouched("busy3", r / "busy3/graft/exp")),
            Case("export of an unfinished run, a task not learned yet",
                 ["export", "--skills", r / "run3-unfinished/graft/state/skills", "--task", "cr", *d, "--out", o],
                 setup=self.unfinished, check=self.untouched(o)),
            Case("export of an unfinished run, its finished task",
                 ["export", "--skills", r / "run3-unfinished/graft/state/skills", "--task", "sst2", *d, "--out",
                  r / "exp-unfinished"], want=0,
                 check=lambda: "exported" if (r / "exp-unfinished/model.safetensors").is_file() else "FAILED"),
            Case("finetune on a folder another finetune writes", ["finetune", "--task", "sst2", *d, *FT, "--out",
                                                                  r / "busy-ft3"],
                 setup=self.writer("busy-ft3", ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--seed", "1"]),
                 check=self.refused_fast("busy-ft3")),
        ]
        return cases

    # ----- folders ---------------------------------------------------------------------------------------------
    def edited(self, edit: Callable[[Path], object]) -> Callable[[], None]:
        def setup() -> None:
            folder = self.root / "run3-edit"
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(self.root / "run3", folder)
            edit(folder / "graft/state/skills")
        return setup

    def untouched(self, out: Path) -> Callable[[], str]:
        return lambda: "nothing written" if not out.exists() else "OUT EXISTS"

    def saved_copy(self, folder: Path) -> Callable[[], None]:
        """The run the first API case saved, copied (the first case saves it itself)."""
        def setup() -> None:
            first = self.root / "saved" / "saved_as_is"
            if first.exists() and folder != first:
                shutil.copytree(first, folder)
        return setup

    def user_pre_kept(self, folder: Path) -> Callable[[], str]:
        return lambda: "user's pre.safetensors kept" if (folder / "pre.safetensors").read_bytes() == \
            b"the user's own file" else "USER FILES LOST"

    def linked(self, link: str) -> Callable[[], None]:
        def setup() -> None:
            run, user = self.root / "run3-link", self.root / "users-folder"
            for folder in (run, user):
                shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(self.root / "run3", run)
            shutil.copytree(run / link, user)
            shutil.rmtree(run / link)
            (run / link).symlink_to(user, target_is_directory=True)
            self.user_before = snapshot(user)
        return setup

    def link_target_kept(self) -> Callable[[], str]:
        return lambda: "user's folder outside --out intact" if snapshot(self.root / "users-folder") == \
            self.user_before else "USER FILES CHANGED"

    def only_temporaries(self, folder: Path) -> Callable[[], str]:
        from cl_graft.written import is_temporary

        def check() -> str:
            left = [f for f in snapshot(folder) if f not in (".cl-graft.json", ".cl-graft.lock")]
            odd = [f for f in left if not any(is_temporary(part) for part in Path(f).parts)]
            return f"left only temporary names ({len(left)} files)" if not odd else f"FAILED: {odd}"
        return check

    def no_tmp_listed(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            listed = json.loads((folder / "config.json").read_text())["files"]
            left = [f for f in snapshot(folder) if "tmp" in f]
            return "no temporary file left or listed" if not left and not any("tmp" in f for f in listed) else \
                f"FAILED: {left + listed}"
        return check

    def written_once(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            skills = folder / "graft/state/skills"
            times = [(skills / f"task-{k:02d}" / "patch.safetensors").stat().st_mtime_ns for k in range(5)]
            return "patch files written at 5 different times, in task order" if times == sorted(set(times)) and \
                len(set(times)) == 5 else "FAILED: patches rewritten together"
        return check

    def unfinished(self) -> None:
        folder = self.root / "run3-unfinished"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(self.root / "run3", folder)
        for name in ("config.json", "results.json", "graft/result.json"):
            (folder / name).unlink()
        skills = folder / "graft/state/skills"
        shutil.rmtree(skills / "task-01")                                # killed before cr was learned
        _edit(skills / "skills.json", lambda c: {**c, "tasks": c["tasks"][:1], "sizes": c["sizes"][:1],
                                                 "features": (c.get("features") or [None])[:1],
                                                 "task_meta": {k: v for k, v in c.get("task_meta", {}).items()
                                                               if k == "sst2"}})
        stats = read_safetensors(skills / "features.safetensors")        # cr's statistics were never fitted
        write_safetensors(skills / "features.safetensors", {k: t for k, t in stats.items() if k.startswith("0.")})

    # ----- a second command ------------------------------------------------------------------------------------
    def writer(self, name: str, args: list) -> Callable[[], None]:
        def setup() -> None:
            folder = self.root / name
            self.writers[name] = start([*args, "--out", folder])
            wait_until(self.writers[name], lambda: (folder / ".cl-graft.lock").exists(), 600)
            self.started[name] = time.time()
        return setup

    def stop(self, name: str) -> int | None:
        proc = self.writers[name]
        running = proc.poll() is None
        proc.kill()
        proc.wait()
        return running

    def busy_untouched(self, name: str, out: Path) -> Callable[[], str]:
        def check() -> str:
            running = self.stop(name)
            if not running:
                return "FAILED: the run had finished"
            return "nothing written inside the running run's folder" if not out.exists() else "OUT EXISTS"
        return check

    def refused_fast(self, name: str) -> Callable[[], str]:
        def check() -> str:
            seconds = time.time() - self.started[name]
            self.stop(name)
            return f"refused after {seconds:.0f} s, before loading a model" if seconds < 30 else \
                f"FAILED: refused only after {seconds:.0f} s"
        return check


def _edit(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
