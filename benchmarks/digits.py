"""Digit streams: scikit-learn's ``load_digits`` (1797 8×8 images, offline) as Avalanche benchmarks, and the
from-scratch models that learn them. The one loader of every digits experiment and of ``cl-graft run``.

Streams (:func:`parse_digits_stream`), all from one 70/30 stratified split (``random_state=0``):

- ``split-digits``: Avalanche's ``nc_benchmark``, 5 experiences × 2 classes with task labels 0..4 (class order
  by the seed); class ids from zero in each experience for multi-head models (each head has 2 units), the digit
  itself for a single-head one;
- ``permuted-digits:N``: N experiences, each all 10 digits under its own pixel permutation (seeded), task
  label i.

Models (:data:`MODELS`, seeded): ``mlp`` (single head: ``nn.Sequential`` 64-256-10, every layer graftable),
``mtmlp`` (Avalanche's ``MTSimpleMLP``, one head per task) and ``cnn`` (:func:`conv_trunk_model`, one head per
task). Scenarios (:data:`cl_graft.task.SCENARIOS`): ``task`` (task labels at test) and ``class`` (none at test: only a
single-head model can answer, :func:`check_scenario`). Avalanche is imported only when a benchmark or a model
is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from cl_graft.errors import UserError
from cl_graft.task import SCENARIOS

MODELS = {"mlp": "single-head MLP 64-256-10 (nn.Sequential)", "mtmlp": "Avalanche's MTSimpleMLP (one head per task)",
          "cnn": "two 3×3 convolutions, a 64-unit layer, one head per task"}
"""Model name → one line for ``--help``."""
MULTI_HEAD = ("mtmlp", "cnn")
HIDDEN = 256
MAX_PERMUTED = 254


def digits_arrays(*, tune: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, x_test, y_train, y_test)``: pixels scaled to [0, 1], a 70/30 stratified split. With ``tune``
    the training part alone, split again 80/20 (its 20% in the place of the test rows: no test row is in it)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x / 16.0, y, test_size=0.3, random_state=0, stratify=y)
    if tune:
        return train_test_split(xtr, ytr, test_size=0.2, random_state=0, stratify=ytr)
    return xtr, xte, ytr, yte


def split_digits(seed: int, *, from_zero: bool = True, tune: bool = False):
    """5 experiences × 2 classes with task labels 0..4 (class order by ``seed``). ``from_zero``: class ids 0, 1
    in every task (so each head of a ``MultiHeadClassifier`` has 2 units: with global ids it pads a head's
    output with zeros up to the largest class id seen, and a task whose logits are all negative loses rows to
    a padded 0 once later tasks add classes); else the digits themselves."""
    from avalanche.benchmarks import nc_benchmark

    xtr, xte, ytr, yte = digits_arrays(tune=tune)

    def dataset(xs, ys):
        ds = TensorDataset(torch.tensor(xs, dtype=torch.float32), torch.tensor(ys))
        ds.targets = ys.tolist()
        return ds

    return nc_benchmark(dataset(xtr, ytr), dataset(xte, yte), n_experiences=5, task_labels=True, seed=seed,
                        class_ids_from_zero_in_each_exp=from_zero)


def permuted_digits(n_tasks: int, seed: int, *, multi_head: bool = False, tune: bool = False):
    """``n_tasks`` experiences, each all 10 digits under its own pixel permutation (seeded), task label i.

    Built with Avalanche's ``benchmark_from_datasets``; for a multi-head model with the deprecated
    ``tensors_benchmark`` (the same tensors), because ``MultiHeadClassifier`` cannot index its active units with
    the set that the new API's ``with_classes_timeline`` gives (an IndexError in Avalanche's head adaptation)."""
    from avalanche.benchmarks.scenarios import benchmark_from_datasets, with_classes_timeline
    from avalanche.benchmarks.scenarios.task_aware import with_task_labels
    from avalanche.benchmarks.utils import DataAttribute, TaskAwareSupervisedClassificationDataset
    from avalanche.benchmarks.utils.data_attribute import TaskLabels
    from avalanche.benchmarks.utils.flat_data import ConstantSequence

    xtr, xte, ytr, yte = digits_arrays(tune=tune)

    def dataset(xs, ys, task):
        return TaskAwareSupervisedClassificationDataset(
            [TensorDataset(torch.tensor(xs, dtype=torch.float32), torch.tensor(ys))],
            data_attributes=[DataAttribute(ys.tolist(), "targets"), TaskLabels(ConstantSequence(task, len(ys)))])

    rng = np.random.default_rng(seed)
    perms = [rng.permutation(64) for _ in range(n_tasks)]
    if multi_head:
        from avalanche.benchmarks.scenarios.deprecated.generators import tensors_benchmark

        return tensors_benchmark(
            train_tensors=[(torch.tensor(xtr[:, p], dtype=torch.float32), torch.tensor(ytr)) for p in perms],
            test_tensors=[(torch.tensor(xte[:, p], dtype=torch.float32), torch.tensor(yte)) for p in perms],
            task_labels=list(range(n_tasks)))
    train = [dataset(xtr[:, p], ytr, t) for t, p in enumerate(perms)]
    test = [dataset(xte[:, p], yte, t) for t, p in enumerate(perms)]
    return with_classes_timeline(with_task_labels(benchmark_from_datasets(train=train, test=test)))


def conv_trunk_model():
    """A from-scratch convolutional model with one head per task (a ``MultiTaskModule``): the 64 pixels as an
    8×8 image, two 3×3 convolutions (16, 32 channels), 2×2 max-pooling, a 64-unit layer, Avalanche's
    ``MultiHeadClassifier``."""
    from avalanche.models import MultiHeadClassifier, MultiTaskModule
    from torch import nn

    class ConvDigits(MultiTaskModule):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Flatten(), nn.Linear(32 * 16, 64), nn.ReLU())
            self.classifier = MultiHeadClassifier(64)

        def forward_single_task(self, x, task_label):
            return self.classifier(self.features(x), task_label)

    return ConvDigits()


def digits_model(name: str, seed: int) -> torch.nn.Module:
    """Model ``name`` of :data:`MODELS`, initialised after ``torch.manual_seed(seed)``."""
    if name not in MODELS:
        raise UserError(f"a digits stream's --model is one of {', '.join(MODELS)}, got {name!r}")
    torch.manual_seed(seed)
    if name == "cnn":
        return conv_trunk_model()
    if name == "mtmlp":
        from avalanche.models import MTSimpleMLP

        return MTSimpleMLP(input_size=64, hidden_size=HIDDEN)
    return torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10))


def parse_digits_stream(text: str) -> int | None:
    """The number of tasks of a digits stream name (``split-digits``: 5, ``permuted-digits:N``: N), None for
    any other text (a text stream).

    Raises:
        UserError: ``permuted-digits`` without a task count in 1..:data:`MAX_PERMUTED`.
    """
    text = text.strip()
    if text == "split-digits":
        return 5
    if text != "permuted-digits" and not text.startswith("permuted-digits:"):
        return None
    _, _, count = text.partition(":")
    if not count.isdigit() or not 1 <= int(count) <= MAX_PERMUTED:
        raise UserError(f"--stream {text!r}: write permuted-digits:N with N tasks, 1 <= N <= {MAX_PERMUTED}")
    return int(count)


def check_scenario(model: str, scenario: str) -> None:
    """Refuses a scenario the model cannot serve: with ``class`` no task label reaches the model at test, so a
    multi-head model (which picks its head by it) cannot answer."""
    if scenario not in SCENARIOS:
        raise UserError(f"--scenario is one of {', '.join(SCENARIOS)}, got {scenario!r}")
    if scenario == "class" and model in MULTI_HEAD:
        raise UserError(f"--scenario class gives no task label at test; --model {model} picks its head by one "
                        f"(use --model mlp)")


@dataclass(frozen=True)
class DigitsStream:
    """A digits stream as ``cl-graft run`` takes it (the same attributes its runner reads of a text stream).

    Attributes:
        name: ``split-digits`` or ``permuted-digits:N``.
        model: the model name it was built for (:data:`MODELS`; multi-head models get per-task class ids).
        scenario: ``task`` or ``class`` (:data:`cl_graft.task.SCENARIOS`).
        tasks: task names in stream order (``digits41``: the digits 4 and 1; ``perm03``: permutation 3).
        benchmark: the Avalanche benchmark (``train_stream``, ``test_stream``; task label i for experience i,
            which names the experience in the metrics; in the ``class`` scenario no strategy reads it).
    """

    name: str
    model: str
    scenario: str
    tasks: list[str]
    benchmark: Any

    @classmethod
    def make(cls, name: str, model: str, *, seed: int, scenario: str = "task", tune: bool = False) -> DigitsStream:
        """The stream ``name`` for ``model`` (class order and permutations by ``seed``); ``tune``: train rows only
        (:func:`digits_arrays`)."""
        n = parse_digits_stream(name)
        if n is None:
            raise UserError(f"{name!r} is not a digits stream (split-digits, permuted-digits:N)")
        check_scenario(model, scenario)
        multi = model in MULTI_HEAD
        if name.strip() == "split-digits":
            bm = split_digits(seed, from_zero=multi, tune=tune)
            tasks = ["digits" + "".join(map(str, sorted(c))) for c in bm.original_classes_in_exp]
        else:
            bm = permuted_digits(n, seed, multi_head=multi, tune=tune)
            tasks = [f"perm{i:0{len(str(n - 1))}d}" for i in range(n)]
        return cls(name.strip(), model, scenario, tasks, bm)

    @property
    def splits(self) -> tuple:
        """No text rows (:class:`~cl_graft.benchmarks.families.ContinualStream`)."""
        return ()
