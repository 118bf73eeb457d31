"""The Python scripts the reliability probe runs as subprocesses (``python -c SCRIPT ARGS``, :func:`.harness.cli`):
the Python API's cases, and ``cl-graft`` commands with one step replaced (a Ctrl-C, a failing check) where a user
cannot make it happen on demand. Strings, never imported code: each runs in a fresh interpreter, as a user's script
would, and names what it replaces."""
from __future__ import annotations

# ----- script: a graft strategy over sst2, cr with MiniLM (the smoke preset), built as a user of the API would
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

# ----- script: experience 1 diverges (lr 1e9): the failed experience is undone bit-exactly, then trains
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

# ----- script: an experience without examples is refused before training
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

# ----- script: a small MLP on Gaussian blobs (two experiences) and the helpers the API scripts share
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

# ----- script: loads a saved run after a hand edit (argv[2] names it; the first call saves the run)
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
elif edit == "graft_run.json region_size.bogus":
    rewrite(run, lambda d: {**d, "settings": {**d["settings"], "region_size": {"bogus": 1}}})
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

# ----- script: GraftStrategy.save beside the user's files, over a larger save, into a locked folder
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

# ----- script: bad labels and NaN inputs in training and valid_stream rows
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

# ----- script: a write killed (SIGKILL) inside the safetensors library, then the folder claimed again
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

# ----- script: cl-graft run, the user's Ctrl-C put in the third experience's training
STOPPED = """
import sys
from cl_graft.cli import main
from cl_graft.strategies.comparison import clock

train = clock.train_experience
def stopped(strategy, experience, seed):                # the user's Ctrl-C in the third experience's training
    if experience.current_experience == 2:
        raise KeyboardInterrupt
    train(strategy, experience, seed)
clock.train_experience = stopped
main(sys.argv[1:], prog_name="cl-graft")
"""

# ----- script: a page script (argv[1], a module of benchmarks/experiments) run as python -m would
PAGE = """
import runpy, sys
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(f"cl_graft.benchmarks.experiments.{module}", run_name="__main__")
"""

# ----- script: GraftStrategy.save over links, stray files and a file; a NaN test input
API_SAVE = MLP_RUN + """
import shutil, warnings
from pathlib import Path
warnings.simplefilter("ignore")

def trained(tasks):
    s = strategy_for(mlp())
    for exp in stream().train_stream[:tasks]:
        s.train(exp)
    return s

def save(root, how):
    folder, users = root / "save", root / "users-folder"
    if how == "NaN test input":
        trained(1).eval(stream(nan=True).train_stream)
    elif how == "save('a-file')":
        root.mkdir(parents=True, exist_ok=True)
        (root / "a-file").write_text("x")
        trained(1).save(root / "a-file")
    else:
        trained(2).save(folder)
        if how == "a stray task-05/x":
            (folder / "task-05").mkdir()
            (folder / "task-05" / "x").write_text("the user's")
        else:
            link = "task-01" if "task-01" in how else "task-00"
            shutil.move(folder / link, users)
            (folder / link).symlink_to(users.resolve(), target_is_directory=True)
        trained(1).save(folder)

one_line(lambda: save(Path(sys.argv[1]), sys.argv[2]))
"""

# ----- script: cl-graft run whose check fails once experience 0 trained and was saved (as a bad label of the
# second experience would; the real checks run before any training, so the failure is put in by hand)
FAILING = """
import sys
from cl_graft.cli import main
from cl_graft.errors import UserError
from cl_graft.strategies.comparison import clock

train = clock.train_experience
def failing(strategy, experience, seed):                # replaced: the second experience's training
    if experience.current_experience == 1:
        raise UserError("experience 1 (task labels [1]): label 9 is not a class of the model's outputs "
                        "(put in by the probe)")
    train(strategy, experience, seed)
clock.train_experience = failing
main(sys.argv[1:], prog_name="cl-graft")
"""
