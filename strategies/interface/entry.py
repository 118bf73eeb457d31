"""What a strategy of ``cl-graft run`` declares: one :class:`StrategyEntry`, kept beside its method.

As peft keeps each method's config and model in the method's folder, each method here owns its entry: its
settings class with its ``--tune`` grid, how to build its Avalanche template, the bytes it keeps, its state
between experiences and whether it can serve rows without task labels. :mod:`..comparison.registry` only
collects the entries; the runner (:mod:`..comparison.runner`) and the command (``cl_graft.cli.run``) read
these fields and name no strategy. The capabilities are explicit objects rather than something the runner
infers from the plugins:

- ``state``: a :class:`StrategyState` (saved after every experience, loaded by ``--resume``); None: the
  strategy starts over when a run is resumed;
- ``routes``: a :class:`Routing` (scores test rows with their task labels withheld: ``--task-inference``);
  None: it cannot;
- ``peers``: strategies whose results it reads (:attr:`BuildContext.peers`); they must run before it;
- ``report_lines`` and ``progress_fields``: what the tables and the progress line show of its results beyond
  the accuracies every strategy has (e.g. each task's region size and its search);
- ``reference``: the part it plays in every other strategy's report (:data:`REFERENCES`), and ``default``: its
  place in ``cl-graft run``'s default ``--strategies``; the harness reads these rather than names.

A method's folder declares its entries in its ``__init__.py`` (``ENTRIES``, a tuple); the harness's registry
finds them there (:mod:`.registration`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from cl_graft.errors import UserError
from cl_graft.task import SCENARIOS
from cl_graft.training.finetune import trainable_names
from cl_graft.training.models import TextClassifier

from .config import ContinualConfig
from .settings import NoSettings, Settings, has_setting

if TYPE_CHECKING:
    from cl_graft.benchmarks.families import ContinualStream


REFERENCES = {
    "plain": "plain fine-tuning, experience after experience: a strategy whose accuracy matrix equals its is "
             "flagged as probably misconfigured, and the summary table gives each strategy's wall time as a "
             "multiple of its",
    "alone": "each task fine-tuned alone: the summary table gives each strategy's average as a share of its",
}
"""The references a report compares every strategy with (role → what the report does with it); at most one
entry plays each."""

FITS = ("stream", "whole-stream", "separate")
"""How a strategy walks the stream: one ``train`` per experience, evaluated after each (``stream``); one
``train`` on the whole stream with T × the steps (``whole-stream``); a fresh model per task, stored T times
(``separate``)."""


@dataclass(frozen=True)
class SavedState:
    """What :meth:`StrategyState.load_` found.

    Attributes:
        value: what the builder continues from (:attr:`BuildContext.resumed`).
        experiences: how many experiences it holds: those the progress file commits, or one more when a save
            ended after the state's files and before the progress file (its accuracy row is then measured
            again, not its training).
    """

    value: Any
    experiences: int


class StrategyState(Protocol):
    """How a resumable strategy keeps what it learned between experiences (``cl-graft run --resume``).

    After each experience the runner calls :meth:`save`, then writes its progress file (accuracy rows, settings,
    seconds and the record :meth:`save` returned): the progress file is the commit point. On ``--resume``,
    :meth:`load_` gets the number of experiences the progress file commits; what a save wrote beyond them is the
    state's to drop or keep (:attr:`SavedState.experiences`).
    """

    def save(self, strategy: Any, directory: Path) -> dict:
        """Writes what ``strategy`` learned so far under ``directory``; returns a JSON record for the progress
        file (handed back to :meth:`load_`)."""

    def load_(self, directory: Path, model: torch.nn.Module, *, committed: int, record: dict) -> SavedState:
        """Reads the state under ``directory`` into ``model`` (a fresh copy of the run's base model, changed IN
        PLACE), checked against ``record``.

        Raises:
            UserError: files that do not belong to this run's progress (one line naming the file).
        """


class Routing(Protocol):
    """How a strategy scores test rows whose task labels are withheld (``--task-inference``): ``rules`` it
    knows; :meth:`route` switches its evaluation to one of them (None: back to the task labels);
    :meth:`identified` is each task's share of test rows routed to it in the last routed evaluation (None: it
    routed none, e.g. a single head that answers every class of the class scenario without routing). ``strict``
    (optional, default False): a row answered in another task's classes always counts wrong (Avalanche alone
    would count it right where that task's class index equals the row's label); recorded with the result."""

    rules: tuple[str, ...]

    def route(self, strategy: Any, rule: str | None) -> None: ...

    def identified(self, strategy: Any, n_tasks: int) -> list[float] | None: ...


@dataclass
class BuildContext:
    """What a strategy's builder gets.

    Attributes:
        model: the model to train (a fresh copy of the run's base model for this strategy: a
            :class:`~cl_graft.strategies.adapter.TaskAdapter` around a text classifier, or a digits model).
        cfg: the settings every strategy shares.
        settings: this strategy's own settings (an instance of its entry's ``settings`` class).
        template: keyword arguments every Avalanche template gets (model, optimizer, criterion, batch sizes,
            ``train_epochs`` = the optimizer steps of one ``train`` call, device, evaluator).
        plugins: the recipe plugins every strategy gets (gradient clipping, step limit).
        stream: the tasks, their rows and the benchmark (a builder that needs every experience up front reads it
            whole; a text stream's dev rows are its ``benchmark.valid_stream``).
        resumed: what the entry's :class:`StrategyState` loaded (``--resume``), else None.
        progress: show progress bars.
        peers: the results of the strategies named in the entry's ``peers`` (name → the
            :class:`~..comparison.runner.StrategyResult` of the same run: ``bytes``, ``info``, ``matrix``).
        task_inference: the rule of ``routes`` a task-agnostic evaluation will use after training
            (``--task-inference``), else None.
    """

    model: torch.nn.Module
    cfg: ContinualConfig
    settings: Settings
    template: dict[str, Any]
    plugins: list
    stream: ContinualStream
    resumed: Any = None
    progress: bool = False
    peers: Mapping[str, Any] = field(default_factory=dict)
    task_inference: str | None = None

    @property
    def scenario(self) -> str:
        """``"task"`` (the task label at test for every strategy) or ``"class"`` (none at test)."""
        return self.stream.scenario


@dataclass(frozen=True, kw_only=True)
class StrategyEntry:
    """A named strategy of the comparison (see the module docstring).

    Attributes:
        name: what ``--strategies`` calls it (Avalanche's class name in lower case with hyphens).
        help: one line for ``--help`` and docs.
        stores: what it keeps beyond the model it starts from, in words (``--help``).
        build: ``build(ctx) -> template`` (an Avalanche ``SupervisedTemplate``).
        kept_bytes: ``kept_bytes(strategy, model) -> (bytes kept beyond the model it started from, extras for
            results.json)``.
        settings: its settings class (:mod:`.settings`; ``cl-graft run`` has an option per field).
        grid: its candidate points for ``--tune`` (keys of ``settings``), in the order to try them: a run's
            tuning budget takes the first ones, the same number for every strategy
            (:mod:`..comparison.tuning`).
        fit: one of :data:`FITS`.
        state: saves after every experience and resumes with ``--resume`` (:class:`StrategyState`), or None.
        routes: scores test rows without their task labels (:class:`Routing`), or None.
        peers: strategies whose results its builder reads; they run before it in the same run.
        scenarios: the scenarios it serves (``task``: the task label at test, ``class``: none); a run in another
            is refused before any strategy trains (:meth:`check_scenario`).
        phase_after_training: ``phase_after_training(strategy) -> label`` of what it does between an experience's
            last training step and evaluation when that takes time (the progress line shows it), or None.
        check: ``check(settings, stream)`` raises a one-line ``UserError`` (naming the option) for settings or a
            stream it cannot run; called before any strategy of the run trains, or None.
        report_lines: ``report_lines(info) -> lines`` its table (``cl-graft run``'s per-strategy table) shows
            under the accuracies, from its result's ``info``, or None.
        progress_fields: ``progress_fields(info, i) -> fields`` the result line of task ``i`` shows after the
            averages, from the extras of its ``kept_bytes`` just after that task, or None.
        reference: its role in the report (a key of :data:`REFERENCES`), or None.
        default: its place in the default ``--strategies`` of ``cl-graft run`` (0 first), or None: it runs
            only when named.
    """

    name: str
    help: str
    stores: str
    build: Callable[[BuildContext], Any]
    kept_bytes: Callable[[Any, torch.nn.Module], tuple[int, dict]]
    settings: type[Settings] = NoSettings
    grid: tuple[Mapping[str, Any], ...] = ()
    fit: str = "stream"
    state: StrategyState | None = None
    routes: Routing | None = None
    peers: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    phase_after_training: Callable[[Any], str | None] | None = None
    check: Callable[[Settings, Any], None] | None = None
    report_lines: Callable[[dict], list[str]] | None = None
    progress_fields: Callable[[dict, int], list[str]] | None = None
    reference: str | None = None
    default: int | None = None

    def __post_init__(self) -> None:
        if self.fit not in FITS:
            raise ValueError(f"{self.name}: fit must be one of {FITS}, got {self.fit!r}")
        unknown = [k for point in self.grid for k in point if not has_setting(self.settings, k)]
        if unknown:
            raise ValueError(f"{self.name}: grid key {unknown[0]!r} is not a field of {self.settings.__name__}")
        if self.name in self.peers:
            raise ValueError(f"{self.name}: a strategy cannot read its own result")
        if not self.scenarios or set(self.scenarios) - set(SCENARIOS):
            raise ValueError(f"{self.name}: scenarios must be some of {SCENARIOS}, got {self.scenarios!r}")
        if self.reference is not None and self.reference not in REFERENCES:
            raise ValueError(f"{self.name}: reference must be one of {tuple(REFERENCES)}, "
                             f"got {self.reference!r}")

    def check_scenario(self, scenario: str) -> None:
        """Refuses a run in a ``scenario`` this strategy does not serve.

        Raises:
            UserError: ``scenario`` is not one of :attr:`scenarios` (one line saying which it serves).
        """
        if scenario not in self.scenarios:
            wanted = " or ".join(f"--scenario {s}" for s in self.scenarios)
            raise UserError(f"{self.name} is a {SCENARIOS[self.scenarios[0]]} method: it runs with {wanted}, "
                            f"not in the {SCENARIOS[scenario]} scenario")


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes of every tensor fine-tuning moves (what a trained copy of the model adds to θ_pre): of a
    :class:`TextClassifier` (or the adapter around one) its trainable tensors, of any other model every tensor."""
    names = moved_names(model)
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n in names)


def moved_names(model: torch.nn.Module) -> set[str]:
    """The parameters :func:`model_bytes` counts (those fine-tuning moves), by their names in ``model`` itself
    (an adapter's or a DDP wrapper's prefixes kept): the names a plugin's per-parameter state is keyed by."""
    inner = getattr(model, "module", model)
    clf = getattr(inner, "clf", inner)
    names = set(trainable_names(clf)) if isinstance(clf, TextClassifier) else None
    moved = {id(p) for n, p in clf.named_parameters() if names is None or n in names}
    return {n for n, p in model.named_parameters() if id(p) in moved}


def row_bytes(item) -> int:
    """Bytes a memory of training rows keeps for one row: a text row's token ids (int32), else its input tensor."""
    if isinstance(item, dict):
        return 4 * len(item["input_ids"])
    return item[0].numel() * item[0].element_size()
