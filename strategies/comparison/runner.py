"""Run continual-learning strategies on one benchmark and collect their accuracy matrices.

Every strategy starts from a copy of the same pre-trained classifier (same seeded heads), trains each
experience with the same recipe (:mod:`~cl_graft.strategies.plugins.recipe`: optimizer, clipping, exactly
``steps`` optimizer steps, seed ``1000 · seed + i`` for experience ``i``), and is evaluated on the whole test
stream after every experience with Avalanche's own ``EvaluationPlugin``. The strategies, their settings, how
each is built, walks the stream and is stored, are the entries of :data:`.registry.STRATEGIES`.
"""
from __future__ import annotations

import copy
import itertools
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from cl_graft import distributed
from cl_graft.console import Console
from cl_graft.errors import UserError
from cl_graft.files import write_json
from cl_graft.schema import ListOf, Obj, read_checked
from cl_graft.training.models import TextClassifier, clone_model

from ..adapter import TaskAdapter
from ..graft.owner_map import OwnerMap
from ..plugins.recipe import ClipGrad, FiniteGuard, StepLimit, WholeEval, recipe_optimizer
from .config import ContinualConfig
from .metrics import summarize
from .progress import Report
from .registry import STRATEGIES, BuildContext, owner_plugin
from .settings import Settings, apply_point
from .tuning import tune

if TYPE_CHECKING:
    from cl_graft.benchmarks.digits import DigitsStream
    from cl_graft.benchmarks.streams import Stream

RESULT_FILE = "result.json"
PROGRESS_FILE = "progress.json"
SKILLS_DIR = "skills"
RESULT_SCHEMA = Obj({"name": str, "tasks": ListOf(str), "matrix": ListOf(ListOf(float)), "seconds": float,
                     "bytes": int, "info": dict})
PROGRESS_SCHEMA = Obj({"tasks": ListOf(str), "config": dict, "rows": ListOf(ListOf(float)), "seconds": float})


@dataclass
class StrategyResult:
    """What one strategy did on the stream.

    Attributes:
        name: the strategy.
        tasks: the stream's tasks, in order.
        matrix: accuracy rows; row ``i`` = every task's test accuracy after experience ``i`` (one row for
            ``joint`` and ``single``: the final accuracies).
        seconds: wall time, training + localization + evaluation.
        bytes: what must be stored beyond θ_pre to serve every task (regions + heads, or the trained model).
        info: extras: ``cpu_seconds`` (process CPU time, less sensitive to other load on the machine than
            wall time), region sizes and search times, replay memory rows.
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


def fresh_model(base: torch.nn.Module, tasks: list[str]) -> torch.nn.Module:
    """One strategy's copy of ``base`` (never modified): a :class:`TextClassifier` in a :class:`TaskAdapter`
    over ``tasks``, any other model (a digits model) deep-copied."""
    if isinstance(base, TextClassifier):
        return TaskAdapter(clone_model(base), tasks)
    return copy.deepcopy(base)


def _build(name: str, adapter: torch.nn.Module, cfg: ContinualConfig, settings: Settings, steps: int, *,
           stream: Stream, owners: OwnerMap | None, report: Report | None, peers: Mapping | None = None):
    """The registry entry's template, with the recipe every strategy shares (``steps`` per ``train``) and, with
    ``report``, the plugin that moves the console's progress line (Avalanche's own log when it is verbose).

    Under torchrun (Avalanche's distributed mode) the model is wrapped in ``DistributedDataParallel``, each rank
    takes ``batch_size / world size`` rows of every mini-batch, and a strategy with a plugin that does not
    declare ``supports_distributed`` is refused.
    """
    verbose = report is not None and report.console.verbose
    optimizer = recipe_optimizer(adapter, cfg.recipe)                    # sets requires_grad: before wrapping
    template = {"model": distributed.wrap(adapter, unused=True), "optimizer": optimizer,
                "device": next(adapter.parameters()).device, "criterion": torch.nn.CrossEntropyLoss(),
                "train_mb_size": distributed.check_batch(cfg.recipe.batch_size), "train_epochs": steps,
                "eval_mb_size": cfg.eval_batch, "evaluator": _evaluator(verbose)}
    plugins = [ClipGrad(cfg.recipe.clip), StepLimit(steps), FiniteGuard(), WholeEval()]
    if report is not None:
        plugins.append(report.plugin(stream.tasks, steps, joint=STRATEGIES[name].fit == "joint"))
    strategy = STRATEGIES[name].build(BuildContext(adapter, cfg, settings, template, plugins, stream, owners,
                                                   verbose, dict(peers or {})))
    unsupported = [type(p).__name__ for p in strategy.plugins if not getattr(p, "supports_distributed", False)]
    if distributed.world_size() > 1 and unsupported:
        raise UserError(f"strategy {name!r} cannot run under torchrun: Avalanche's {unsupported[0]} does not "
                        f"support distributed training")
    return strategy


def _train(strategy, experience, seed: int) -> None:
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)         # Avalanche's own (replay buffer update)
        strategy.train(experience)


def run_strategy(name: str, base: torch.nn.Module, stream: Stream | DigitsStream, cfg: ContinualConfig,
                 settings: Settings | None = None, *, state_dir: Path | None = None,
                 task_inference: str | None = None, report: Report | None = None,
                 peers: Mapping[str, StrategyResult] | None = None) -> StrategyResult:
    """Runs one strategy on ``stream`` from a copy of ``base`` (never modified, :func:`fresh_model`).

    Args:
        name: a strategy of :data:`~.registry.STRATEGIES`.
        base: the pre-trained classifier with every task of the stream registered (same heads for all), or the
            model a digits stream starts from (:func:`cl_graft.benchmarks.digits.digits_model`).
        stream: the tasks, their rows (dev rows select regions: graft) and their benchmark; a
            :class:`~cl_graft.benchmarks.digits.DigitsStream` names its scenario (``class``: strategies that
            keep an owner map route test rows by features, :attr:`.registry.BuildContext.task_inference`).
        cfg: the settings every strategy shares.
        settings: the strategy's own (an instance of its entry's ``settings`` class; default: the class's
            defaults, :func:`.registry.strategy_settings` gives a preset's).
        state_dir: where a resumable strategy saves its state after every experience and resumes from.
        task_inference: ``"entropy"``, ``"max-softmax"`` or ``"features"``: after the stream, evaluate the test
            stream again with task labels withheld (strategies that keep an owner map: graft, graft-paper,
            packnet); the result goes to ``info["task_inference"]`` (not counted in ``seconds``).
        report: where progress and a result line per task go (:class:`.progress.Report`; its console's
            ``verbose`` adds Avalanche's interactive logger); None: nothing is shown.
        peers: results of strategies that ran before it in the same run (``replay-matched`` reads graft's).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    entry = STRATEGIES[name]
    settings = entry.settings() if settings is None else settings
    bm, tasks = stream.benchmark, stream.tasks
    n, steps, seed = len(tasks), cfg.recipe.steps, cfg.recipe.seed
    build = {"stream": stream, "report": report, "peers": peers}
    if report is not None:
        report.console.phase(f"{report.label} · set-up")          # graft-paper fine-tunes every task here
    if entry.fit == "separate":
        row = []
        for i, exp in enumerate(bm.train_stream):
            adapter = fresh_model(base, tasks)
            strategy = _build(name, adapter, cfg, settings, steps, owners=None, **build)
            _train(strategy, exp, 1000 * seed + i)
            row.append(_accuracy(strategy.eval([bm.test_stream[i]]), i))
            if report is not None:
                report.task_line(i, tasks, row, (i + 1) * entry.storage(strategy, adapter)[0], {},
                                 time.perf_counter() - t0)
        size = n * entry.storage(strategy, adapter)[0]
        return StrategyResult(name, tasks, [row], round(time.perf_counter() - t0, 1), size,
                              {"cpu_seconds": round(time.process_time() - c0, 1)})
    adapter = fresh_model(base, tasks)
    rows, owners, before = [], None, 0.0
    resumable = entry.resumable and state_dir is not None
    if resumable and (state_dir / PROGRESS_FILE).exists():
        owners, rows, before = _resume(state_dir, getattr(adapter, "clf", adapter), tasks, cfg, settings)
    strategy = _build(name, adapter, cfg, settings, steps * (n if entry.fit == "joint" else 1), owners=owners,
                      **build)
    if entry.fit == "joint":
        _train(strategy, bm.train_stream, 1000 * seed)
        rows = [_row(strategy.eval(bm.test_stream), n)]
        if report is not None:
            report.stream_line(tasks, rows[0], entry.storage(strategy, adapter)[0],
                               time.perf_counter() - t0)
    else:
        if owners is not None and len(owners.tasks) == len(rows) + 1:  # saved skills, not their eval row
            rows.append(_row(strategy.eval(bm.test_stream), n))
        for i, exp in enumerate(bm.train_stream):
            if i < len(rows):
                continue
            _train(strategy, exp, 1000 * seed + i)
            rows.append(_row(strategy.eval(bm.test_stream), n))
            if report is not None:
                stored, info = entry.storage(strategy, adapter)
                report.task_line(i, tasks, rows[-1], stored, info, before + time.perf_counter() - t0)
            if resumable:
                seconds = before + time.perf_counter() - t0
                _save_progress(state_dir, owner_plugin(strategy).owners, tasks, cfg, settings, rows, seconds)
    size, info = entry.storage(strategy, adapter)
    info["cpu_seconds"] = round(time.process_time() - c0, 1)            # this session (not resumed parts)
    seconds = round(before + time.perf_counter() - t0, 1)
    if task_inference and any(isinstance(getattr(p, "owners", None), OwnerMap) for p in strategy.plugins):
        info["task_inference"] = task_agnostic_eval(strategy, bm, n, task_inference)
    return StrategyResult(name, tasks, rows, seconds, size, info)


def task_agnostic_eval(strategy, bm, n_tasks: int, how: str) -> dict:
    """Accuracy per task with task labels withheld (each input routed to a task by the rule ``how``, T forward
    passes per input), task-identification accuracy per task and the seconds it took."""
    plugin = owner_plugin(strategy)
    plugin.task_inference = how
    t0 = time.perf_counter()
    try:
        row = _row(strategy.eval(bm.test_stream), n_tasks)
    finally:
        plugin.task_inference = None
    ids = [plugin.task_id[j][0] / plugin.task_id[j][1] for j in range(n_tasks)]
    return {"how": how, "accuracy": row, "task_id": ids, "seconds": round(time.perf_counter() - t0, 1)}


def _save_progress(state_dir: Path, owners: OwnerMap, tasks: list[str], cfg: ContinualConfig, settings: Settings,
                   rows: list, seconds: float) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    owners.save(state_dir / SKILLS_DIR)
    write_json(state_dir / PROGRESS_FILE, {"tasks": tasks, "config": cfg.to_json(), "settings": settings.to_json(),
                                           "rows": rows, "seconds": round(seconds, 1),
                                           "pre_fingerprint": owners.pre_fingerprint})


def _resume(state_dir: Path, clf: torch.nn.Module, tasks: list[str], cfg: ContinualConfig, settings: Settings):
    """Owner map (applied to ``clf``), accuracy rows and seconds of an interrupted graft stream."""
    state = read_checked(state_dir / PROGRESS_FILE, PROGRESS_SCHEMA)
    if (state.get("tasks"), state.get("config"), state.get("settings")) != (tasks, cfg.to_json(),
                                                                            settings.to_json()):
        raise UserError(f"{state_dir}: saved state is from another stream or configuration; use a new --out")
    owners = OwnerMap.load(state_dir / SKILLS_DIR, clf)
    done = len(owners.tasks)
    if owners.tasks != tasks[:done] or done not in (len(state["rows"]), len(state["rows"]) + 1):
        raise UserError(f"{state_dir}: saved skills ({owners.tasks}) do not match its progress file")
    owners.apply_(clf)
    return owners, [list(r) for r in state["rows"]], float(state["seconds"])


def run_continual(base: torch.nn.Module, stream: Stream | DigitsStream, strategies: Mapping[str, Settings],
                  cfg: ContinualConfig, *, out: Path, tune_stream: Stream | DigitsStream | None = None,
                  chosen: dict[str, dict] | None = None, resume: bool = False, task_inference: str | None = None, console: Console | None = None,
                  on_result: Callable[[StrategyResult], None] | None = None) -> dict[str, StrategyResult]:
    """Runs ``strategies`` (name → its settings, :func:`.registry.strategy_settings`) in order; each writes
    ``out/<name>/result.json`` when done.

    With ``tune_stream`` (train and dev rows only, :func:`.tuning.split_dev`), each strategy first tries its grid
    on it (:func:`.tuning.tune`) and runs on ``stream`` with the point of the best final average dev accuracy;
    the search is recorded in ``result.info["tuning"]``. With ``chosen`` (:func:`.tuning.chosen_settings`:
    strategy → ``{"chosen": point, "from": ...}``) a strategy runs with the point an earlier tuning chose instead,
    recorded the same way; a strategy with ``settings_of`` runs with the point chosen for that strategy when it
    ran earlier in ``strategies``. With ``resume``, finished strategies are read back and resumable ones
    (``graft``) continue from their last saved experience (``out/<name>/state``); other unfinished strategies
    start over. ``on_result`` is called with each result as it is ready. With ``console``, a live progress line
    and a result line per task (:mod:`.progress`; the tuning runs move the line and print nothing).
    """
    def dev_average(name: str, settings: Settings, point: int) -> float:
        report = Report(console, f"{name} · tune {point}/{len(STRATEGIES[name].grid)}", lines=False) \
            if console is not None else None
        return run_strategy(name, base, tune_stream, cfg, settings, report=report).summary()["average"]

    results = {}
    for name, settings in strategies.items():
        path = out / name / RESULT_FILE
        if resume and path.exists():
            results[name] = StrategyResult.from_json(read_checked(path, RESULT_SCHEMA))
        else:
            state = out / name / "state" if STRATEGIES[name].resumable else None   # --overwrite emptied it
            (out / name).mkdir(parents=True, exist_ok=True)
            tuning = {}
            if tune_stream is not None:
                settings, tuning = tune(name, settings, lambda s, name=name, points=itertools.count(1):
                                        dev_average(name, s, next(points)))
            elif chosen and name in chosen:
                settings, tuning = apply_point(settings, chosen[name]["chosen"]), chosen[name]
            source = results.get(STRATEGIES[name].settings_of)
            if source is not None and source.info.get("tuning"):
                settings = apply_point(settings, source.info["tuning"]["chosen"])
            report = Report(console, name) if console is not None else None
            results[name] = run_strategy(name, base, stream, cfg, settings, report=report, state_dir=state,
                                         task_inference=task_inference, peers=results)
            if tuning:
                results[name].info["tuning"] = tuning
            write_json(path, results[name].to_json())
        if on_result is not None:
            on_result(results[name])
    return results
