"""Run continual-learning strategies on one benchmark and collect their accuracy matrices.

Every strategy starts from a copy of the same pre-trained classifier (same seeded heads), trains each
experience with the same recipe (:mod:`~cl_graft.strategies.plugins.recipe`: optimizer, clipping, exactly
``steps`` optimizer steps, seed ``1000 · seed + i`` for experience ``i``), and is evaluated on the whole test
stream after every experience with Avalanche's own ``EvaluationPlugin``. The strategies, their settings, how
each is built, walks the stream, what it keeps, its state between experiences and whether it serves rows without
task labels, are the entries of the registry (:func:`.registry.entry_of`, :class:`~..interface.entry.StrategyEntry`);
this module reads their fields and names none of them.
"""
from __future__ import annotations

import copy
import functools
import itertools
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from cl_graft import distributed
from cl_graft.console import Console
from cl_graft.errors import UserError
from cl_graft.files import write_json
from cl_graft.provenance import MemoryPeak
from cl_graft.training.models import TextClassifier, clone_model

from ..adapter import SharedHead, TaskAdapter
from ..interface.config import ContinualConfig
from ..interface.entry import BuildContext, Routing, StrategyEntry
from ..interface.scenario import OWN_HEADS, SINGLE_HEAD, scenario_model
from ..interface.settings import Settings, apply_point
from ..plugins.recipe import ClipGrad, FiniteGuard, StepLimit, WholeEval, recipe_optimizer
from .clock import Clock
from .committed import PROGRESS_FILE, resume_stream, write_progress
from .metrics import summarize
from .progress import Report
from .registry import entry_of
from .results_file import read_result
from .tuning import TUNE_BUDGET, TrialStore, tune

if TYPE_CHECKING:
    from cl_graft.benchmarks.families import ContinualStream

RESULT_FILE = "result.json"
STATE_DIR = "state"


@dataclass
class StrategyResult:
    """What one strategy did on the stream.

    Attributes:
        name: the strategy.
        tasks: the stream's tasks, in order.
        matrix: accuracy rows; row ``i`` = every task's test accuracy after experience ``i`` (one row for a
            strategy that does not walk the stream experience by experience: the final accuracies).
        seconds: wall time, training + localization + evaluation.
        bytes: what must be stored beyond the model it started from to serve every task (its entry's
            ``kept_bytes``).
        info: extras: ``cpu_seconds`` (process CPU time, less sensitive to other load on the machine than
            wall time), ``train_seconds`` and ``eval_seconds`` (wall time inside the strategy's ``train`` and
            ``eval`` calls; the rest is building and saving) with ``train_cpu_seconds`` and
            ``eval_cpu_seconds`` (their CPU time), each with the earlier processes' share when the run resumed
            from saved state (``resumed_after``: the experiences they ran), ``peak_rss_mb`` (the process's peak
            resident memory while the strategy ran, :class:`~cl_graft.provenance.MemoryPeak`; None where it
            cannot be told apart from earlier work) and those of its entry's ``kept_bytes``.
    """

    name: str
    tasks: list[str]
    matrix: list[list[float]]
    seconds: float
    bytes: int
    info: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {**summarize(np.array(self.matrix)), "bytes": self.bytes, "seconds": self.seconds}

    def to_json(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    @classmethod
    def from_json(cls, d: dict) -> StrategyResult:
        return cls(**{k: d[k] for k in ("name", "tasks", "matrix", "seconds", "bytes", "info")})


def _evaluator(verbose: bool):
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.logging import InteractiveLogger
    from avalanche.training.plugins import EvaluationPlugin

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                           # "no loggers" when not verbose
        loggers = [InteractiveLogger()] if verbose and distributed.is_main() else []   # Avalanche: rank 0 logs
        return EvaluationPlugin(accuracy_metrics(experience=True), loggers=loggers)


def _accuracy(metrics: dict, j: int) -> float:
    """Task ``j``'s accuracy from Avalanche's eval metrics (experience ``j`` of the test stream)."""
    return float(metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{j:03d}/Exp{j:03d}"])


def _row(metrics: dict, n_tasks: int) -> list[float]:
    return [_accuracy(metrics, j) for j in range(n_tasks)]


def fresh_model(base: torch.nn.Module, stream: ContinualStream, seed: int) -> tuple[torch.nn.Module, str]:
    """One strategy's copy of ``base`` (never modified) in the stream's scenario, and how it uses the task
    label (:func:`..interface.scenario.scenario_model`): a :class:`TextClassifier` in a :class:`TaskAdapter`
    over the stream's tasks, or, when one of its heads answers every experience (a class-incremental text
    stream), in a :class:`SharedHead`; any other model (a digits model) deep-copied, and a single-head one
    made multi-head in the task-incremental scenario (the same model for every strategy)."""
    if isinstance(base, TextClassifier):
        if stream.head is not None:                                     # a text stream's
            return SharedHead(clone_model(base), stream.tasks, head=stream.head), SINGLE_HEAD
        return TaskAdapter(clone_model(base), stream.tasks), OWN_HEADS
    model, how = scenario_model(base, stream.benchmark.train_stream, stream.scenario, seed)
    return (copy.deepcopy(model) if model is base else model), how     # a multi-head copy is already a copy


def _build(entry: StrategyEntry, model: torch.nn.Module, cfg: ContinualConfig, settings: Settings, steps: int, *,
           stream: ContinualStream, resumed=None, report: Report | None, peers: Mapping | None = None,
           task_inference: str | None = None):
    """The entry's template, with the recipe every strategy shares (``steps`` per ``train``) and, with
    ``report``, the plugin that moves the console's progress line (Avalanche's own log when it is verbose).

    Under torchrun (Avalanche's distributed mode) the model is wrapped in ``DistributedDataParallel``, each rank
    takes ``batch_size / world size`` rows of every mini-batch, and a strategy with a plugin that does not
    declare ``supports_distributed`` is refused.
    """
    verbose = report is not None and report.console.verbose
    optimizer = recipe_optimizer(model, cfg.recipe)                      # sets requires_grad: before wrapping
    template = {"model": distributed.wrap(model, unused=True), "optimizer": optimizer,
                "device": next(model.parameters()).device, "criterion": torch.nn.CrossEntropyLoss(),
                "train_mb_size": distributed.check_batch(cfg.recipe.batch_size), "train_epochs": steps,
                "eval_mb_size": cfg.eval_batch, "evaluator": _evaluator(verbose)}
    plugins = [ClipGrad(cfg.recipe.clip), StepLimit(steps), FiniteGuard(), WholeEval()]
    if report is not None:
        plugins.append(report.plugin(stream.tasks, steps, whole_stream=entry.fit == "whole-stream",
                                     phase_after_training=entry.phase_after_training))
    peers = {p: (peers or {})[p] for p in entry.peers}
    strategy = entry.build(BuildContext(model=model, cfg=cfg, settings=settings, template=template, plugins=plugins,
                                        stream=stream, resumed=resumed, progress=verbose, peers=peers,
                                        task_inference=task_inference))
    unsupported = [type(p).__name__ for p in strategy.plugins if not getattr(p, "supports_distributed", False)]
    if distributed.world_size() > 1 and unsupported:
        raise UserError(f"strategy {entry.name!r} cannot run under torchrun: Avalanche's {unsupported[0]} does not "
                        f"support distributed training")
    return strategy


def run_strategy(name: str, base: torch.nn.Module, stream: ContinualStream, cfg: ContinualConfig,
                 settings: Settings | None = None, *, state_dir: Path | None = None,
                 task_inference: str | None = None, report: Report | None = None,
                 peers: Mapping[str, StrategyResult] | None = None) -> StrategyResult:
    """Runs one strategy on ``stream`` from a copy of ``base`` (never modified, :func:`fresh_model`).

    Args:
        name: a strategy of the registry (:func:`~.registry.entry_of`: built in or a plugin's).
        base: the pre-trained classifier with every task of the stream registered (same heads for all), or the
            model a digits stream starts from (:func:`cl_graft.benchmarks.digits.digits_model`).
        stream: the tasks, their rows (dev rows select regions), their benchmark and scenario (a stream of any
            family, :class:`~cl_graft.benchmarks.families.ContinualStream`).
        cfg: the settings every strategy shares.
        settings: the strategy's own (an instance of its entry's ``settings`` class; default: the class's
            defaults, :func:`.registry.strategy_settings` gives a preset's).
        state_dir: where a strategy whose entry has a ``state`` saves it after every experience and resumes from
            (the progress file there is the commit point, :class:`~..interface.entry.StrategyState`).
        task_inference: a rule of the entry's ``routes`` (:class:`~..interface.entry.Routing`): after the
            stream, evaluate the test stream again with task labels withheld; the result goes to
            ``info["task_inference"]`` (not counted in ``seconds``). Strategies that cannot route by it ignore
            it.
        report: where progress and a result line per task go (:class:`.progress.Report`; its console's
            ``verbose`` adds Avalanche's interactive logger); None: nothing is shown.
        peers: results of strategies that ran before it in the same run (those its entry's ``peers`` names).

    Raises:
        UserError: a peer the entry reads is not in ``peers``, or saved state that does not belong to this run.
    """
    t0, c0, memory = time.perf_counter(), time.process_time(), MemoryPeak()
    clock = Clock(None if isinstance(base, TextClassifier) else list(stream.tasks))
    entry = entry_of(name)
    settings = entry.settings() if settings is None else settings
    missing = [p for p in entry.peers if p not in (peers or {})]
    if missing:
        raise UserError(f"{name} reads the result of {missing[0]} in the same run: put {missing[0]} before it")
    bm, tasks = stream.benchmark, stream.tasks
    n, steps, seed = len(tasks), cfg.recipe.steps, cfg.recipe.seed
    build = {"stream": stream, "report": report, "peers": peers, "task_inference": task_inference}
    if report is not None:
        report.console.phase(f"{report.label} · set-up")          # a builder may train here (e.g. the paper mode)
    if entry.fit == "separate":
        row = []
        for i, exp in enumerate(bm.train_stream):
            model, how = fresh_model(base, stream, seed)
            strategy = _build(entry, model, cfg, settings, steps, **build)
            clock.train(strategy, exp, 1000 * seed + i)
            row.append(_accuracy(clock.eval(strategy, [bm.test_stream[i]]), i))
            if report is not None:
                report.task_line(i, tasks, row, (i + 1) * entry.kept_bytes(strategy, model)[0], [],
                                 time.perf_counter() - t0)
        size = n * entry.kept_bytes(strategy, model)[0]
        return StrategyResult(name, tasks, [row], round(time.perf_counter() - t0, 1), size,
                              {"cpu_seconds": round(time.process_time() - c0, 1), "task_aware": how,
                               "peak_rss_mb": memory.mb(), **clock.record()})
    model, how = fresh_model(base, stream, seed)
    rows, saved, before, spent = [], None, 0.0, {}
    state = entry.state if state_dir is not None else None
    if state is not None and (state_dir / PROGRESS_FILE).exists():
        rows, before, spent, saved = resume_stream(state_dir, entry, model, tasks=tasks, config=cfg.to_json(),
                                                   settings=settings.to_json())
        clock.add_(spent)
    resumed_after = len(rows)

    def cpu_so_far() -> float:
        """This run's CPU seconds: this process's since it started the run, and earlier processes' (``spent``)."""
        return spent.get("cpu_seconds", 0.0) + time.process_time() - c0

    whole = entry.fit == "whole-stream"
    strategy = _build(entry, model, cfg, settings, steps * (n if whole else 1),
                      resumed=saved.value if saved is not None else None, **build)
    if whole:
        clock.train(strategy, bm.train_stream, 1000 * seed)
        rows = [_row(clock.eval(strategy, bm.test_stream), n)]
        if report is not None:
            report.stream_line(tasks, rows[0], entry.kept_bytes(strategy, model)[0], time.perf_counter() - t0)
    else:
        if saved is not None and saved.experiences == len(rows) + 1:     # saved state, not its accuracy row
            rows.append(_row(strategy.eval(bm.test_stream), n))
        for i, exp in enumerate(bm.train_stream):
            if i < len(rows):
                continue
            clock.train(strategy, exp, 1000 * seed + i)
            rows.append(_row(clock.eval(strategy, bm.test_stream), n))
            if report is not None:
                stored, info = entry.kept_bytes(strategy, model)
                fields = entry.progress_fields(info, i) if entry.progress_fields is not None else []
                report.task_line(i, tasks, rows[-1], stored, fields, before + time.perf_counter() - t0)
            if state is not None:
                _save_progress(state_dir, state.save(strategy, state_dir), tasks, cfg, settings, rows,
                               before + time.perf_counter() - t0, {**clock.record(), "cpu_seconds": cpu_so_far()})
    size, info = entry.kept_bytes(strategy, model)
    info["cpu_seconds"] = round(cpu_so_far(), 1)                                     # resumed parts too
    info["peak_rss_mb"] = memory.mb()                                     # this strategy's, this session
    info["task_aware"] = how
    info.update(clock.record())                                          # resumed parts too, like cpu_seconds
    if resumed_after:
        info["resumed_after"] = resumed_after                             # experiences an earlier process ran
    seconds = round(before + time.perf_counter() - t0, 1)
    if task_inference and entry.routes is not None and task_inference in entry.routes.rules:
        info["task_inference"] = task_agnostic_eval(strategy, entry.routes, bm, n, task_inference)
    if stream.scenario == "class" and entry.routes is not None and len(rows) == n:
        identified = entry.routes.identified(strategy, n)              # of the last evaluation, routed
        if identified is not None:
            info["task_id"] = identified
    return StrategyResult(name, tasks, rows, seconds, size, info)


def task_agnostic_eval(strategy, routes: Routing, bm, n_tasks: int, how: str) -> dict:
    """Accuracy per task with task labels withheld (each input routed to a task by the rule ``how`` of
    ``routes``), how it was counted (``"strict"`` or ``"avalanche"``, :class:`~..interface.entry.Routing`),
    task-identification accuracy per task and the seconds it took."""
    routes.route(strategy, how)
    t0 = time.perf_counter()
    try:
        row = _row(strategy.eval(bm.test_stream), n_tasks)
    finally:
        routes.route(strategy, None)
    return {"how": how, "accuracy": row, "count": "strict" if getattr(routes, "strict", False) else "avalanche",
            "task_id": routes.identified(strategy, n_tasks),
            "seconds": round(time.perf_counter() - t0, 1)}


def _save_progress(state_dir: Path, record: dict, tasks: list[str], cfg: ContinualConfig, settings: Settings,
                   rows: list, seconds: float, spent: dict[str, float]) -> None:
    """Commits the experiences of ``rows``: written after the strategy's state (``record``: what its save
    returned), so a progress file never names more than the state holds; ``seconds`` (wall) and ``spent`` (CPU
    seconds, the training and evaluation clocks) of every process so far."""
    write_progress(state_dir, tasks=tasks, config=cfg.to_json(), settings=settings.to_json(), rows=rows,
                   seconds=seconds, spent=spent, state=record)


def run_continual(base: torch.nn.Module, stream: ContinualStream, strategies: Mapping[str, Settings],
                  cfg: ContinualConfig, *, out: Path, tune_stream: ContinualStream | None = None,
                  tune_budget: int = TUNE_BUDGET, chosen: dict[str, dict] | None = None, resume: bool = False,
                  task_inference: str | None = None, console: Console | None = None,
                  on_result: Callable[[StrategyResult], None] | None = None) -> dict[str, StrategyResult]:
    """Runs ``strategies`` (name → its settings, :func:`.registry.strategy_settings`) in order; each writes
    ``out/<name>/result.json`` when done.

    With ``tune_stream`` (train and dev rows only, :func:`cl_graft.benchmarks.data.split_dev`), each strategy first
    tries the first ``tune_budget`` points of its grid on it (:func:`.tuning.tune`) and runs on ``stream`` with the
    point of the best final average dev accuracy; the search is recorded in ``result.info["tuning"]``. With ``chosen``
    (:func:`.tuning.chosen_settings`: strategy → ``{"chosen": point, "from": ...}``) a strategy runs with the point
    an earlier tuning chose instead, recorded the same way. A strategy reads the results of the strategies its
    entry's ``peers`` names (they run before it). With ``resume``, finished strategies are read back and those
    whose entry has a ``state`` continue from their last committed experience (``out/<name>/state``); other
    unfinished strategies start over. A tuning run keeps its score and state in ``out/<name>/tune``
    (:class:`.tuning.TrialStore`), so an interrupted search continues from its last finished experience too. Each
    result's ``info["settings"]`` holds the settings that ran (after tuning or an earlier choice). ``on_result`` is
    called with each result as it is ready. With ``console``, a live progress line and a result line per task
    (:mod:`.progress`; the tuning runs move the line and print nothing).
    """
    def dev_average(name: str, points: Iterator[int], settings: Settings) -> float:
        i, trials = next(points), TrialStore(out / name / "tune")
        done = trials.score(i, settings)
        if done is not None:
            return done
        label = f"{name} · tune {i}/{min(tune_budget, len(entry_of(name).grid))}"
        report = Report(console, label, lines=False) if console is not None else None
        result = run_strategy(name, base, tune_stream, cfg, settings, report=report, peers=results,
                              state_dir=trials.state_dir(i))
        return trials.record(i, settings, result.summary()["average"])

    refused = []                                               # before any strategy trains, every one at once
    for name, settings in strategies.items():
        entry = entry_of(name)
        try:
            entry.check_scenario(stream.scenario)
            if entry.check is not None:
                entry.check(settings, stream)
        except UserError as e:
            refused.append(str(e))
    if refused:
        raise UserError("; ".join(dict.fromkeys(refused)))                # one line, each problem once
    results: dict[str, StrategyResult] = {}
    for name, settings in strategies.items():
        path = out / name / RESULT_FILE
        if resume and path.exists():
            results[name] = StrategyResult.from_json(read_result(path))
        else:
            (out / name).mkdir(parents=True, exist_ok=True)
            tuning = {}
            if tune_stream is not None:
                settings, tuning = tune(name, settings, functools.partial(dev_average, name, itertools.count(1)),
                                        budget=tune_budget)
            elif chosen and name in chosen:
                settings, tuning = apply_point(settings, chosen[name]["chosen"]), chosen[name]
            report = Report(console, name) if console is not None else None
            results[name] = run_strategy(name, base, stream, cfg, settings, report=report,
                                         state_dir=out / name / STATE_DIR, task_inference=task_inference,
                                         peers=results)
            if tuning:
                results[name].info["tuning"] = tuning
            results[name].info["settings"] = settings.to_json()          # what ran (after tuning)
            write_json(path, results[name].to_json())
        if on_result is not None:
            on_result(results[name])
    return results
