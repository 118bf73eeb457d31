"""Toy streams for Avalanche's own loops: the two-task conflicting stream of tiny-BERT text tasks (the second task
swaps the first's labels) and the blob stream (three tasks of two Gaussian blobs, Avalanche's ``MTSimpleMLP``), with
the plugins their tests watch training through (:class:`LrPerExperience`, :class:`Probe`, :class:`EvalOutputs`,
made on first use so that importing this module does not import Avalanche)."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from cl_graft.task import TaskRows, TaskSpec

from helpers import SENTIMENT, sentiment_rows, tiny_bert

# ----------------------------------------------------------------------------- the two-task conflicting stream

FLIP = TaskSpec("flip", ("positive", "negative"))                # conflicts with SENTIMENT: labels swapped
TASKS = ["toy", "flip"]
LR = [1e-2, 1e-1]                    # per experience: the second task is trained aggressively (AdamW)


def build_model():
    model = tiny_bert()
    model.add_task(SENTIMENT, seed=1)
    model.add_task(FLIP, seed=2)
    return model


def stream_rows() -> list[TaskRows]:
    """The two-task conflicting stream's rows: sentiment, then sentiment with swapped labels."""
    return [TaskRows(SENTIMENT, train=sentiment_rows(64, 1, False), dev=[], test=sentiment_rows(48, 2, False)),
            TaskRows(FLIP, train=sentiment_rows(64, 3, True), dev=[], test=sentiment_rows(48, 4, True))]


def make_stream():
    """The two-task conflicting stream as an Avalanche benchmark."""
    from cl_graft.benchmarks.streams import make_benchmark

    return make_benchmark(stream_rows(), build_model())


def evaluator():
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    return EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])


def make_opt(model, kind: str):
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)
    return torch.optim.AdamW(model.parameters(), lr=LR[0], weight_decay=0.01)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def acc(result: dict, j: int) -> float:
    return result[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"]


# ----------------------------------------------------------------------------- the blob stream (Avalanche's own loops)

BLOB_DIM, BLOB_CLASSES, BLOB_TASKS = 16, 6, 3
"""The blob stream: input size, classes, tasks (two classes each)."""


def points(n: int, seed: int) -> TensorDataset:
    """Six Gaussian blobs in 16 dims (class c around a fixed random centre), with ``targets`` for Avalanche."""
    centres = torch.randn(BLOB_CLASSES, BLOB_DIM, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.arange(BLOB_CLASSES).repeat(n // BLOB_CLASSES)
    noise = torch.randn(len(y), BLOB_DIM, generator=torch.Generator().manual_seed(seed))
    ds = TensorDataset(centres[y] + noise, y)
    ds.targets = y.tolist()
    return ds


def benchmark():
    """Three tasks of two classes each (Avalanche's nc_benchmark, task labels 0, 1, 2)."""
    from avalanche.benchmarks import nc_benchmark

    return nc_benchmark(points(96, 1), points(48, 2), n_experiences=BLOB_TASKS, task_labels=True, seed=0,
                        fixed_class_order=list(range(BLOB_CLASSES)))


def mlp(seed: int = 0):
    """Avalanche's multi-head ``MTSimpleMLP`` for the blobs, seeded."""
    from avalanche.models import MTSimpleMLP

    torch.manual_seed(seed)
    return MTSimpleMLP(input_size=BLOB_DIM, hidden_size=32)


def optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)


def settings() -> dict:
    """The strategy settings every blob-stream run shares."""
    from cl_graft.strategies import LocalizeConfig, LocalizeFinder

    return {"train_mb_size": 16, "train_epochs": 2, "eval_mb_size": 16,
            "finder": LocalizeFinder("graft", LocalizeConfig(region_size=0.2, steps=3, select_rows=48))}


def blob_strategy(model=None, probe=None, **kw):
    """A ``GraftStrategy`` on the blobs (:func:`settings`), evaluating accuracy, forgetting and task inference."""
    from avalanche.evaluation.metrics import accuracy_metrics, forgetting_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from cl_graft.strategies import GraftStrategy, TaskInferenceAccuracy

    model = model or mlp()
    evaluator = kw.pop("evaluator", None) or EvaluationPlugin(
        accuracy_metrics(experience=True, stream=True), forgetting_metrics(experience=True, stream=True),
        TaskInferenceAccuracy(), loggers=[])
    plugins = [*kw.pop("plugins", []), *([probe] if probe else [])]
    return GraftStrategy(model=model, optimizer=optimizer(model), evaluator=evaluator, plugins=plugins,
                         **{**settings(), **kw})


def exp_key(j: int, metric: str = "Top1_Acc_Exp") -> str:
    """The name of Avalanche's metric ``metric`` for test experience ``j``."""
    return f"{metric}/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"


def _avalanche_plugins() -> dict[str, type]:
    """:class:`LrPerExperience`, :class:`Probe` and :class:`EvalOutputs`, Avalanche plugins: made on first use
    (see the module's docstring), then bound as this module's attributes."""
    from avalanche.core import SupervisedPlugin

    class LrPerExperience(SupervisedPlugin):
        """Sets the learning rate of experience i to ``LR[i]``."""

        def before_training_exp(self, strategy, **kw):
            for group in strategy.optimizer.param_groups:
                group["lr"] = LR[strategy.experience.current_experience]

    class Probe(SupervisedPlugin):
        """Records eval logits per experience and model states after each training experience."""

        def __init__(self):
            super().__init__()
            self.logits: dict[int, list[torch.Tensor]] = {}
            self.states: list[dict[str, torch.Tensor]] = []
            self.calls: list[str] = []

        def before_eval_exp(self, strategy, **kw):
            self.calls.append("before_eval_exp")
            self.logits[strategy.experience.current_experience] = []

        def after_eval_iteration(self, strategy, **kw):
            self.logits[strategy.experience.current_experience].append(strategy.mb_output.detach().clone())

        def after_training_exp(self, strategy, **kw):
            self.calls.append("after_training_exp")
            self.states.append({n: p.detach().clone() for n, p in strategy.model.clf.named_parameters()})

    class EvalOutputs(SupervisedPlugin):
        """Records every eval mini-batch's output, per experience, in ``.out`` (experience id → list of
        ``(B, C)`` tensors; an experience's list restarts when it is evaluated)."""

        def __init__(self):
            super().__init__()
            self.out: dict[int, list[torch.Tensor]] = {}

        def before_eval_exp(self, strategy, **kw):
            self.out[strategy.experience.current_experience] = []

        def after_eval_iteration(self, strategy, **kw):
            self.out[strategy.experience.current_experience].append(strategy.mb_output.detach().clone())

    plugins = {"LrPerExperience": LrPerExperience, "Probe": Probe, "EvalOutputs": EvalOutputs}
    for name, cls in plugins.items():
        cls.__qualname__ = name                                   # picklable as helpers.toy_streams.<name>
    return plugins


def __getattr__(name: str):
    """``from helpers import Probe`` (or ``LrPerExperience``, ``EvalOutputs``) makes the plugin classes on first
    use."""
    if name in ("LrPerExperience", "Probe", "EvalOutputs"):
        globals().update(_avalanche_plugins())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
