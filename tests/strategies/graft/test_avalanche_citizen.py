"""GraftStrategy in the loops, plugins, checkpoints and files Avalanche users already use: ``eval(test_stream)``
after every experience, periodic evaluation and early stopping, unlabelled test data on ``MTSimpleMLP``, one
save/load in a new process, Avalanche's own checkpointing, the newer benchmark API, and help() that reads alone."""
from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys
import textwrap
from functools import partial

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

avalanche = pytest.importorskip("avalanche")

from avalanche.benchmarks import nc_benchmark
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import (
    accuracy_matrix_metrics,
    accuracy_metrics,
    forgetting_metrics,
    forward_transfer_metrics,
)
from avalanche.models import MTSimpleMLP
from avalanche.models.utils import avalanche_forward
from avalanche.training import Naive
from avalanche.training.plugins import EarlyStoppingPlugin, EvaluationPlugin
from cl_graft.strategies import (
    GraftPlugin,
    GraftStrategy,
    LocalizeConfig,
    LocalizeFinder,
    TaskInferenceAccuracy,
    export_task,
    load_task_model,
)
from safetensors.torch import load_file

from cl_graft.errors import UserError

DIM, CLASSES, TASKS = 16, 6, 3


def points(n: int, seed: int) -> TensorDataset:
    """Six Gaussian blobs in 16 dims (class c around a fixed random centre), with ``targets`` for Avalanche."""
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.arange(CLASSES).repeat(n // CLASSES)
    ds = TensorDataset(centres[y] + torch.randn(len(y), DIM, generator=torch.Generator().manual_seed(seed)), y)
    ds.targets = y.tolist()
    return ds


def benchmark():
    """Three tasks of two classes each (Avalanche's nc_benchmark, task labels 0, 1, 2)."""
    return nc_benchmark(points(96, 1), points(48, 2), n_experiences=TASKS, task_labels=True, seed=0,
                        fixed_class_order=list(range(CLASSES)))


def mlp(seed: int = 0) -> MTSimpleMLP:
    torch.manual_seed(seed)
    return MTSimpleMLP(input_size=DIM, hidden_size=32)


def optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)


def settings() -> dict:
    """The strategy settings every run here shares."""
    return {"train_mb_size": 16, "train_epochs": 2, "eval_mb_size": 16,
            "finder": LocalizeFinder("graft", LocalizeConfig(sparsity=0.2, steps=3, select_rows=48))}


FINDER = settings()["finder"]
# The same data, model and settings in the subprocesses below: these functions' own source.
SETUP = "\n".join([
    "import torch", "from torch import nn", "from torch.utils.data import TensorDataset",
    "from avalanche.benchmarks import nc_benchmark", "from avalanche.models import MTSimpleMLP",
    "from cl_graft.strategies import LocalizeConfig, LocalizeFinder", f"DIM, CLASSES, TASKS = {DIM}, {CLASSES}, {TASKS}",
    *(inspect.getsource(f) for f in (points, benchmark, mlp, optimizer, settings))])


def graft(model=None, probe=None, **kw) -> GraftStrategy:
    model = model or mlp()
    evaluator = kw.pop("evaluator", None) or EvaluationPlugin(
        accuracy_metrics(experience=True, stream=True), forgetting_metrics(experience=True, stream=True),
        TaskInferenceAccuracy(), loggers=[])
    plugins = [*kw.pop("plugins", []), *([probe] if probe else [])]
    return GraftStrategy(model=model, optimizer=optimizer(model), evaluator=evaluator, plugins=plugins,
                         **{**settings(), **kw})


def key(j: int, metric: str = "Top1_Acc_Exp") -> str:
    return f"{metric}/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"


@pytest.fixture(scope="module")
def bm():
    return benchmark()


@pytest.fixture(scope="module")
def standard(bm, eval_outputs):
    """The standard Avalanche loop: train on each experience, then evaluate the whole test stream (with the
    periodic evaluation Avalanche's forward transfer metric asks for)."""
    probe = eval_outputs()
    evaluator = EvaluationPlugin(
        accuracy_metrics(experience=True, stream=True), forgetting_metrics(experience=True, stream=True),
        forward_transfer_metrics(experience=True, stream=True), accuracy_matrix_metrics(), TaskInferenceAccuracy(),
        loggers=[])
    strategy = graft(probe=probe, eval_every=0, evaluator=evaluator)
    full, sliced = [], []
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(100 + i)
        strategy.train(exp, eval_streams=[bm.test_stream])
        full.append(strategy.eval(bm.test_stream))
        sliced.append(strategy.eval(bm.test_stream[:i + 1]))
    return strategy, probe, full, sliced


def test_standard_loop_gives_the_sliced_numbers_and_avalanche_metrics(bm, standard):
    _, _, full, sliced = standard
    for i in range(TASKS):
        for j in range(i + 1):
            assert full[i][key(j)] == sliced[i][key(j)]
            assert full[i][key(j)] == full[j][key(j)] >= 0.9                     # nothing forgotten
        for j in range(i + 1, TASKS):
            assert key(j) in full[i]                                           # a future task is scored too
    assert full[-1]["StreamForgetting/eval_phase/test_stream"] == 0
    assert "StreamForwardTransfer/eval_phase/test_stream" in full[-1]
    matrix = full[-1]["EvalStream/Acc_Matrix"]
    assert tuple(matrix.shape) == (TASKS, TASKS)
    assert all(float(matrix[i, j]) == full[i][key(j)] for i in range(TASKS) for j in range(TASKS))


def test_a_task_not_trained_yet_is_scored_like_naive(bm, eval_outputs):
    """Before any training the logits are Naive's; later an untrained task runs on the model as it is."""
    probe, naive_probe = eval_outputs(), eval_outputs()
    strategy = graft(probe=probe)
    model = mlp()
    naive = Naive(model=model, optimizer=optimizer(model), eval_mb_size=16, evaluator=EvaluationPlugin(loggers=[]),
                  plugins=[naive_probe])
    strategy.eval(bm.test_stream)
    naive.eval(bm.test_stream)
    for j in range(TASKS):
        assert all(torch.equal(a, b) for a, b in zip(probe.out[j], naive_probe.out[j], strict=True))
    torch.manual_seed(100)
    strategy.train(bm.train_stream[0])
    strategy.eval(bm.test_stream)
    x = torch.stack([bm.test_stream[2].dataset[i][0] for i in range(16)])
    strategy.model.eval()
    with torch.no_grad():
        assert torch.equal(probe.out[2][0], avalanche_forward(strategy.model, x, torch.full((16,), 2)))


def test_eval_every_and_early_stopping_score_the_tasks_as_they_are(bm, eval_outputs):
    """Periodic evaluation while task 1 trains: task 0 gives exactly its grafted model's logits (θ_pre back on
    the free elements task 1 is changing), task 1 its current training state; early stopping runs."""
    probe = eval_outputs()
    strategy = graft(probe=probe, eval_every=1, peval_mode="iteration", train_epochs=4,
                     plugins=[EarlyStoppingPlugin(patience=3, val_stream_name="test_stream", peval_mode="iteration")])
    torch.manual_seed(100)
    strategy.train(bm.train_stream[0], eval_streams=[bm.test_stream[:2]])
    strategy.eval(bm.test_stream[:1])                      # the last periodic eval came before the region search
    after_first = [t.clone() for t in probe.out[0]]
    seen = []

    class Watch(SupervisedPlugin):
        def after_eval_exp(self, s, **kw):
            if s.experience.current_experience == 0:
                seen.append([t.clone() for t in probe.out[0]])

    strategy.plugins.append(Watch())
    torch.manual_seed(101)
    strategy.train(bm.train_stream[1], eval_streams=[bm.test_stream[:2]])
    assert len(seen) >= 4                                     # before training, then every iteration until it stops
    assert strategy.clock.train_exp_iterations < 8                           # early stopping stopped it
    for outs in seen:
        assert all(torch.equal(a, b) for a, b in zip(outs, after_first, strict=True))
    metrics = strategy.eval(bm.test_stream[:2])
    assert metrics[key(1)] >= 0.9 and metrics["StreamForgetting/eval_phase/test_stream"] == 0


def test_unlabelled_test_data_on_a_multi_head_model(bm, standard):
    """Test data without task labels (Avalanche's benchmark_from_datasets, no task labels, no classes timeline)
    is routed; the logits equal task inference on the labelled stream; task inference is logged only then."""
    from avalanche.benchmarks.scenarios import benchmark_from_datasets
    from avalanche.benchmarks.utils import as_classification_dataset

    strategy, probe, _, _ = standard
    plain = []
    for exp in bm.test_stream:                                 # the same rows, without task labels
        rows = [exp.dataset[i] for i in range(len(exp.dataset))]
        ds = TensorDataset(torch.stack([r[0] for r in rows]), torch.tensor([int(r[1]) for r in rows]))
        ds.targets = ds.tensors[1].tolist()
        plain.append(as_classification_dataset(ds))
    unlabelled = benchmark_from_datasets(test=plain)
    assert not hasattr(unlabelled.test_stream[0], "task_labels")
    metrics = strategy.eval(unlabelled.test_stream)
    routed = {j: [t.clone() for t in probe.out[j]] for j in range(TASKS)}
    assert metrics["Top1_Acc_Stream/eval_phase/test_stream"] >= 0.5
    strategy.graft.task_inference = "entropy"
    try:
        inferred = strategy.eval(bm.test_stream)
    finally:
        strategy.graft.task_inference = None
    for j in range(TASKS):
        assert all(torch.equal(a, b) for a, b in zip(routed[j], probe.out[j], strict=True))
    stream_key = "TaskInference_Acc_Stream/eval_phase/test_stream"
    assert 0 <= inferred[stream_key] <= 1
    logged = len(strategy.evaluator.get_all_metrics()[stream_key][1])
    strategy.eval(bm.test_stream)                                            # task-aware: nothing inferred
    assert len(strategy.evaluator.get_all_metrics()[stream_key][1]) == logged


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


def test_save_and_load_in_a_new_process_from_the_constructor(bm, standard, tmp_path):
    strategy, probe, _, _ = standard
    strategy.eval(bm.test_stream)
    want = {f"{j}.{i}": t for j, outs in probe.out.items() for i, t in enumerate(outs)}
    strategy.save(tmp_path / "run")
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {"skills.json", "pre.safetensors", "model_rest.safetensors", "graft_run.json"} <= set(files)
    assert not [f for f in files if f.endswith((".pt", ".pkl", ".bin"))]
    _python(LOAD, tmp_path / "run", tmp_path / "logits.safetensors")
    got = load_file(str(tmp_path / "logits.safetensors"))
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_owner_map_alone_rebuilds_a_multi_head_model_from_its_constructor(bm, standard, tmp_path, eval_outputs):
    """OwnerMap.save(pre=True) / OwnerMap.load + apply_: the heads come back by replaying Avalanche's adaptation."""
    from cl_graft.strategies import OwnerMap

    strategy, probe, _, _ = standard
    strategy.eval(bm.test_stream)
    strategy.graft.owners.save(tmp_path / "skills", pre=True)
    model = mlp(seed=77)
    owners = OwnerMap.load(tmp_path / "skills", model)
    owners.apply_(model)
    again = eval_outputs()
    graft(model, probe=again, owners=owners).eval(bm.test_stream)
    for j in range(TASKS):
        assert all(torch.equal(a, b) for a, b in zip(probe.out[j], again.out[j], strict=True))


def test_load_keeps_task_metadata_and_refuses_another_model(standard, tmp_path):
    strategy, _, _, _ = standard
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
    other = MTSimpleMLP(input_size=DIM, hidden_size=16)
    with pytest.raises(UserError, match="another model"):
        GraftStrategy.load(tmp_path / "run", model=other, optimizer=optimizer(other))


def test_save_without_pre_and_a_single_head_cnn(bm, tmp_path, eval_outputs):
    """pre=False writes no θ_pre: the loader brings the model at θ_pre (here: the same seed); BatchNorm buffers
    and the head come back from the files."""

    def cnn(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4),
                             nn.ReLU(), nn.Flatten(), nn.Linear(64, CLASSES))

    probe = eval_outputs()
    strategy = graft(cnn(0), probe=probe)
    for i, exp in enumerate(bm.train_stream[:2]):
        torch.manual_seed(100 + i)
        strategy.train(exp)
    strategy.eval(bm.test_stream[:2])
    want = {j: [t.clone() for t in probe.out[j]] for j in (0, 1)}
    strategy.save(tmp_path / "run", pre=False)
    assert not (tmp_path / "run" / "pre.safetensors").exists()
    model, again = cnn(0), eval_outputs()
    loaded = GraftStrategy.load(tmp_path / "run", model=model, optimizer=optimizer(model), eval_mb_size=16,
                                evaluator=EvaluationPlugin(loggers=[]), plugins=[again])
    loaded.eval(bm.test_stream[:2])
    for j in (0, 1):
        assert all(torch.equal(a, b) for a, b in zip(want[j], again.out[j], strict=True))
    with pytest.raises(UserError, match="θ_pre differs"):
        GraftStrategy.load(tmp_path / "run", model=cnn(1), optimizer=optimizer(cnn(1)))


def test_export_task_writes_one_head_and_loads_in_one_call(bm, standard, tmp_path):
    strategy, probe, _, _ = standard
    strategy.eval(bm.test_stream)
    export_task(strategy.graft.owners, strategy.model, "1", tmp_path / "task1")
    saved = load_file(str(tmp_path / "task1" / "model.safetensors"))
    heads = {n.split(".")[2] for n in saved if n.startswith("classifier.classifiers.") and "active_units" not in n}
    assert heads == {"1"}                                              # head parameters: task 1's only
    model = load_task_model(tmp_path / "task1", model=mlp(seed=9))
    x = torch.stack([bm.test_stream[1].dataset[i][0] for i in range(16)])
    with torch.no_grad():
        assert torch.equal(model(x, torch.ones(16, dtype=torch.long)), probe.out[1][0])
    with pytest.raises(UserError, match="pass model="):
        load_task_model(tmp_path / "task1")


CHECKPOINT = SETUP + textwrap.dedent("""
    import sys
    from avalanche.checkpointing import maybe_load_checkpoint, save_checkpoint
    from avalanche.training.plugins import EvaluationPlugin
    from safetensors.torch import save_file
    from cl_graft.strategies import GraftStrategy

    mode, stop = sys.argv[1], int(sys.argv[2])
    bm = benchmark()
    model = mlp()
    strategy = GraftStrategy(model=model, optimizer=optimizer(model), evaluator=EvaluationPlugin(loggers=[]),
                             **settings())
    strategy, start = maybe_load_checkpoint(strategy, "checkpoint.pkl")
    for i, exp in enumerate(bm.train_stream[start:], start):
        torch.manual_seed(100 + i)                               # one seed per experience
        strategy.train(exp)
        strategy.eval(bm.test_stream)
        save_checkpoint(strategy, "checkpoint.pkl", exclude=["optimizer"])   # Avalanche cannot pickle it
        if i == stop:
            sys.exit(0)                                          # killed after experience i
    state = {n: p.detach().contiguous() for n, p in strategy.model.named_parameters()}
    metrics = strategy.evaluator.get_all_metrics()
    acc = {k: torch.tensor(v[1]) for k, v in metrics.items() if k.startswith("Top1_Acc_Exp")}
    save_file({**state, **{f"metric/{k}": v for k, v in acc.items()}}, f"{mode}.safetensors")
""")


def test_avalanche_checkpoint_kill_and_resume_is_bit_identical(tmp_path):
    (tmp_path / "resumed").mkdir()
    (tmp_path / "whole").mkdir()
    _python(CHECKPOINT, "resumed", 0, cwd=tmp_path / "resumed")             # killed after experience 0
    assert (tmp_path / "resumed" / "checkpoint.pkl").is_file()
    _python(CHECKPOINT, "resumed", -1, cwd=tmp_path / "resumed")            # a new process resumes
    _python(CHECKPOINT, "whole", -1, cwd=tmp_path / "whole")
    resumed = load_file(str(tmp_path / "resumed" / "resumed.safetensors"))
    whole = load_file(str(tmp_path / "whole" / "whole.safetensors"))
    assert sorted(resumed) == sorted(whole)
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)


def test_avalanche_cannot_pickle_the_optimizer_naive_neither(bm, tmp_path):
    """Why the checkpoint above excludes the optimizer: Avalanche's save_checkpoint fails on the optimizer
    (dill) for Naive as well as for GraftStrategy (Avalanche 0.6.0 with torch 2.14)."""
    from avalanche.checkpointing import save_checkpoint

    model = mlp()
    naive = Naive(model=model, optimizer=optimizer(model), evaluator=EvaluationPlugin(loggers=[]))
    for strategy in (naive, graft()):
        with pytest.raises(Exception, match="pickle"):
            save_checkpoint(strategy, tmp_path / "full.pkl")


def test_newer_benchmark_api_with_a_validation_stream():
    """benchmark_from_datasets-style scenarios: class_incremental_benchmark, split_validation_class_balanced,
    task_incremental_benchmark; regions selected on the validation stream; a single-head model."""
    from avalanche.benchmarks.scenarios import (
        benchmark_with_validation_stream,
        class_incremental_benchmark,
        split_validation_class_balanced,
        task_incremental_benchmark,
    )
    from avalanche.benchmarks.utils import as_classification_dataset

    data = {"train": as_classification_dataset(points(96, 1)), "test": as_classification_dataset(points(48, 2))}
    bm = class_incremental_benchmark(data, num_experiences=TASKS, class_order=list(range(CLASSES)))
    bm = task_incremental_benchmark(benchmark_with_validation_stream(
        bm, split_strategy=partial(split_validation_class_balanced, 0.25)))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    strategy = graft(model, valid_stream=bm.valid_stream)
    assert sorted(strategy.graft.valid) == list(range(TASKS))
    results = []
    for i, exp in enumerate(bm.train_stream):
        torch.manual_seed(100 + i)
        strategy.train(exp)
        results.append(strategy.eval(bm.test_stream))
    for j in range(TASKS):
        assert results[-1][key(j)] == results[j][key(j)] >= 0.9
    assert strategy.graft.owners.tasks == ["0", "1", "2"]


GRAFT_ARGS = ("mode", "finder", "regions", "reconstruct", "valid_stream", "graftable", "heads", "task_inference",
              "owners", "guard")


@pytest.mark.parametrize("cls", [GraftStrategy, GraftPlugin])
def test_help_lists_every_graft_argument_with_its_default(cls):
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    own = text[:text.index("Method resolution order")]
    for arg in GRAFT_ARGS:
        line = next((ln for ln in own.splitlines() if ln.lstrip(" |").startswith(f"{arg} (")), None)
        assert line is not None and "default" in line, arg
    assert "peval_mode" not in own and "see GraftPlugin" not in own
    init_doc = cls.__dict__["__init__"].__doc__ or ""                     # its own, not the base class's
    assert "class docstring" in init_doc and "peval_mode" not in init_doc


def test_strategies_export_what_a_user_passes():
    import cl_graft.strategies as s

    from cl_graft.regions.config import LocalizeConfig as Config

    assert s.LocalizeConfig is Config
    for name in ("LocalizeFinder", "RegionFinder", "experience_regions", "independent_regions",
                 "TaskInferenceAccuracy"):
        assert name in s.__all__ and getattr(s, name) is not None
