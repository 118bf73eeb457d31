"""GraftStrategy's files as Avalanche users keep them: save and load in a new process from the model's constructor,
the owner map alone, task metadata, no θ_pre, a single-head CNN, one task exported, and Avalanche's own
checkpointing (kill and resume bit-identical)."""
from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

avalanche = pytest.importorskip("avalanche")

from avalanche.models import MTSimpleMLP
from avalanche.training import Naive
from avalanche.training.plugins import EvaluationPlugin
from cl_graft.strategies import GraftStrategy, export_task, load_task_model
from safetensors.torch import load_file

from cl_graft.errors import UserError

from helpers.toy_streams import (
    BLOB_CLASSES,
    BLOB_DIM,
    BLOB_TASKS,
    benchmark,
    blob_strategy,
    mlp,
    optimizer,
    points,
    settings,
)

FINDER = settings()["finder"]
SETUP = "\n".join([
    "import torch", "from torch import nn", "from torch.utils.data import TensorDataset",
    f"BLOB_DIM, BLOB_CLASSES, BLOB_TASKS = {BLOB_DIM}, {BLOB_CLASSES}, {BLOB_TASKS}",
    *(inspect.getsource(f) for f in (points, benchmark, mlp, optimizer, settings))])
"""The same data, model and settings in the subprocesses below: the helpers' own source."""


LOAD = SETUP + textwrap.dedent("""
    import sys
    from avalanche.core import SupervisedPlugin
    from avalanche.training.plugins import EvaluationPlugin
    from safetensors.torch import save_file
    from cl_graft.strategies import GraftStrategy

    class Outputs(SupervisedPlugin):
        out = {}
        def before_eval_exp(self, strategy, **kw):
            self.out[strategy.experience.current_experience] = []
        def after_eval_iteration(self, strategy, **kw):
            self.out[strategy.experience.current_experience].append(strategy.mb_output.detach().clone())

    model = mlp(seed=123)                                          # the constructor alone, another init
    probe = Outputs()
    strategy = GraftStrategy.load(sys.argv[1], model=model, optimizer=optimizer(model), eval_mb_size=16,
                                  evaluator=EvaluationPlugin(loggers=[]), plugins=[probe])
    strategy.eval(benchmark().test_stream)
    save_file({f"{j}.{i}": t for j, outs in probe.out.items() for i, t in enumerate(outs)}, sys.argv[2])
""")


def _python(script: str, *args, cwd=None) -> None:
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_save_and_load_in_a_new_process_from_the_constructor(blob_bm, blob_run, tmp_path):
    strategy, probe, _, _ = blob_run
    strategy.eval(blob_bm.test_stream)
    want = {f"{j}.{i}": t for j, outs in probe.out.items() for i, t in enumerate(outs)}
    strategy.save(tmp_path / "run")
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {"skills.json", "pre.safetensors", "model_rest.safetensors", "graft_run.json"} <= set(files)
    assert not [f for f in files if f.endswith((".pt", ".pkl", ".bin"))]
    _python(LOAD, tmp_path / "run", tmp_path / "logits.safetensors")
    got = load_file(str(tmp_path / "logits.safetensors"))
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_owner_map_alone_rebuilds_a_multi_head_model_from_its_constructor(blob_bm, blob_run, tmp_path, eval_outputs):
    """OwnerMap.save(pre=True) / OwnerMap.load + apply_: the heads come back by replaying Avalanche's adaptation."""
    from cl_graft.strategies import OwnerMap

    strategy, probe, _, _ = blob_run
    strategy.eval(blob_bm.test_stream)
    strategy.graft.owners.save(tmp_path / "skills", pre=True)
    model = mlp(seed=77)
    owners = OwnerMap.load(tmp_path / "skills", model)
    owners.apply_(model)
    again = eval_outputs()
    blob_strategy(model, probe=again, owners=owners).eval(blob_bm.test_stream)
    for j in range(BLOB_TASKS):
        assert all(torch.equal(a, b) for a, b in zip(probe.out[j], again.out[j], strict=True))


def test_load_keeps_task_metadata_and_refuses_another_model(blob_run, tmp_path):
    strategy, _, _, _ = blob_run
    owners = strategy.graft.owners
    owners.task_meta["1"] = {"sparsity": 0.2, "kept": 0.99}
    try:
        strategy.save(tmp_path / "run")
    finally:
        del owners.task_meta["1"]
    model = mlp(seed=5)
    again = GraftStrategy.load(tmp_path / "run", model=model, optimizer=optimizer(model),
                               evaluator=EvaluationPlugin(loggers=[]))
    assert again.graft.owners.task_meta == {"1": {"sparsity": 0.2, "kept": 0.99}}
    assert again.graft.owners.tasks == owners.tasks and again.graft.finder == FINDER
    other = MTSimpleMLP(input_size=BLOB_DIM, hidden_size=16)
    with pytest.raises(UserError, match="another model"):
        GraftStrategy.load(tmp_path / "run", model=other, optimizer=optimizer(other))


def test_save_without_pre_and_a_single_head_cnn(blob_bm, tmp_path, eval_outputs):
    """pre=False writes no θ_pre: the loader brings the model at θ_pre (here: the same seed); BatchNorm buffers
    and the head come back from the files."""

    def cnn(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4),
                             nn.ReLU(), nn.Flatten(), nn.Linear(64, BLOB_CLASSES))

    probe = eval_outputs()
    strategy = blob_strategy(cnn(0), probe=probe)
    for i, exp in enumerate(blob_bm.train_stream[:2]):
        torch.manual_seed(100 + i)
        strategy.train(exp)
    strategy.eval(blob_bm.test_stream[:2])
    want = {j: [t.clone() for t in probe.out[j]] for j in (0, 1)}
    strategy.save(tmp_path / "run", pre=False)
    assert not (tmp_path / "run" / "pre.safetensors").exists()
    model, again = cnn(0), eval_outputs()
    loaded = GraftStrategy.load(tmp_path / "run", model=model, optimizer=optimizer(model), eval_mb_size=16,
                                evaluator=EvaluationPlugin(loggers=[]), plugins=[again])
    loaded.eval(blob_bm.test_stream[:2])
    for j in (0, 1):
        assert all(torch.equal(a, b) for a, b in zip(want[j], again.out[j], strict=True))
    with pytest.raises(UserError, match="θ_pre differs"):
        GraftStrategy.load(tmp_path / "run", model=cnn(1), optimizer=optimizer(cnn(1)))


def test_export_task_writes_one_head_and_loads_in_one_call(blob_bm, blob_run, tmp_path):
    strategy, probe, _, _ = blob_run
    strategy.eval(blob_bm.test_stream)
    export_task(strategy.graft.owners, strategy.model, "1", tmp_path / "task1")
    saved = load_file(str(tmp_path / "task1" / "model.safetensors"))
    heads = {n.split(".")[2] for n in saved if n.startswith("classifier.classifiers.") and "active_units" not in n}
    assert heads == {"1"}                                              # head parameters: task 1's only
    model = load_task_model(tmp_path / "task1", model=mlp(seed=9))
    x = torch.stack([blob_bm.test_stream[1].dataset[i][0] for i in range(16)])
    with torch.no_grad():
        assert torch.equal(model(x, torch.ones(16, dtype=torch.long)), probe.out[1][0])
    with pytest.raises(UserError, match="pass model="):
        load_task_model(tmp_path / "task1")


CHECKPOINT = SETUP + textwrap.dedent("""
    import shutil
    import sys
    from avalanche.checkpointing import maybe_load_checkpoint, save_checkpoint
    from avalanche.training.plugins import EvaluationPlugin
    from safetensors.torch import save_file
    from cl_graft.strategies import GraftStrategy

    mode, kept = sys.argv[1], int(sys.argv[2])
    blob_bm = benchmark()
    model = mlp()
    strategy = GraftStrategy(model=model, optimizer=optimizer(model), evaluator=EvaluationPlugin(loggers=[]),
                             **settings())
    strategy, start = maybe_load_checkpoint(strategy, "checkpoint.pkl")
    for i, exp in enumerate(blob_bm.train_stream[start:], start):
        torch.manual_seed(100 + i)                               # one seed per experience
        strategy.train(exp)
        strategy.eval(blob_bm.test_stream)
        save_checkpoint(strategy, "checkpoint.pkl", exclude=["optimizer"])   # Avalanche cannot pickle it
        if i == kept:                                            # what a process killed after experience i leaves
            shutil.copyfile("checkpoint.pkl", f"checkpoint_after_{i}.pkl")
    state = {n: p.detach().contiguous() for n, p in strategy.model.named_parameters()}
    metrics = strategy.evaluator.get_all_metrics()
    acc = {k: torch.tensor(v[1]) for k, v in metrics.items() if k.startswith("Top1_Acc_Exp")}
    save_file({**state, **{f"metric/{k}": v for k, v in acc.items()}, "start": torch.tensor(start)},
              f"{mode}.safetensors")
""")


def test_avalanche_checkpoint_kill_and_resume_is_bit_identical(tmp_path):
    """The uninterrupted run keeps a copy of its checkpoint after experience 0 (the file a process killed then
    leaves behind); a new process resumes from that copy alone and must end bit-identical."""
    (tmp_path / "resumed").mkdir()
    (tmp_path / "whole").mkdir()
    _python(CHECKPOINT, "whole", 0, cwd=tmp_path / "whole")
    (tmp_path / "whole" / "checkpoint_after_0.pkl").rename(tmp_path / "resumed" / "checkpoint.pkl")
    _python(CHECKPOINT, "resumed", -1, cwd=tmp_path / "resumed")            # a new process resumes
    resumed = load_file(str(tmp_path / "resumed" / "resumed.safetensors"))
    whole = load_file(str(tmp_path / "whole" / "whole.safetensors"))
    assert int(resumed.pop("start")) == 1 and int(whole.pop("start")) == 0      # it did resume
    assert sorted(resumed) == sorted(whole)
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)


def test_avalanche_cannot_pickle_the_optimizer_naive_neither(blob_bm, tmp_path):
    """Why the checkpoint above excludes the optimizer: Avalanche's save_checkpoint fails on the optimizer
    (dill) for Naive as well as for GraftStrategy (Avalanche 0.6.0 with torch 2.14)."""
    from avalanche.checkpointing import save_checkpoint

    model = mlp()
    naive = Naive(model=model, optimizer=optimizer(model), evaluator=EvaluationPlugin(loggers=[]))
    for strategy in (naive, blob_strategy()):
        with pytest.raises(Exception, match="pickle"):
            save_checkpoint(strategy, tmp_path / "full.pkl")
