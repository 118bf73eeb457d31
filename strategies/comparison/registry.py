"""One registry of the continual-learning strategies that ``cl-graft run`` compares.

A strategy is one :class:`StrategyEntry`: its settings class (a small frozen dataclass of :mod:`.method_settings`,
with the grid ``--tune`` tries), how to build its Avalanche template from a :class:`BuildContext`, how it walks the
stream (``fit``), what it must store to serve every task (``storage``) and whether it can resume after an
interrupted experience. The runner (:mod:`.runner`) and the CLI (its options are the settings' fields) read only
this table, so a new baseline is one entry here plus its class. Avalanche is imported only when a strategy is built.

- ``graft`` — :class:`~cl_graft.strategies.graft.strategy.GraftStrategy`, stream mode (Panigrahi et al. 2023, §5.2);
- ``graft-paper`` — the paper's mode: regions from independent fine-tuning + localization of each task;
- ``packnet`` — :class:`~cl_graft.strategies.plugins.packnet.PackNetPlugin` on the transformer (Mallya & Lazebnik
  2018), released weights back to θ_pre; ``packnet-zero`` — released weights zeroed, as published;
- ``naive``, ``ewc``, ``lwf``, ``replay`` — Avalanche's stock strategies, unchanged;
- ``joint`` — Avalanche's ``JointTraining`` on the whole stream (steps × T steps; one result row);
- ``single`` — each task fine-tuned alone from θ_pre (the reference for "% of single-task fine-tuning").
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from cl_graft.errors import UserError
from cl_graft.presets import Preset
from cl_graft.training.finetune import trainable_names
from cl_graft.training.models import TextClassifier

from ..graft.owner_map import OwnerMap
from ..graft.sizing import RegionSize
from .config import ContinualConfig
from .method_settings import (
    KEEP_GRID,
    SIZE_GRID,
    EWCSettings,
    GraftSettings,
    LwFSettings,
    PackNetSettings,
    ReplaySettings,
)
from .settings import NoSettings, SettingOption, Settings, apply_point, has_setting, setting_options

if TYPE_CHECKING:
    from cl_graft.benchmarks.digits import DigitsStream
    from cl_graft.benchmarks.streams import Stream


FITS = ("stream", "joint", "separate")
GRID_SIZE = 3


# ----- entries -------------------------------------------------------------------------------------
@dataclass
class BuildContext:
    """What a strategy's builder gets.

    Attributes:
        adapter: the model to train (a fresh copy of the base classifier for this strategy).
        cfg: the settings every strategy shares.
        settings: this strategy's own settings (an instance of its entry's ``settings`` class).
        template: keyword arguments every Avalanche template gets (model, optimizer, criterion, batch sizes,
            ``train_epochs`` = the optimizer steps of one ``train`` call, device, evaluator).
        plugins: the recipe plugins every strategy gets (gradient clipping, step limit).
        stream: the tasks, their rows and the benchmark (builders that need every experience up front, e.g.
            ``graft-paper``, read it whole; its dev rows are the paper mode's selection rows, and stream-mode
            grafting selects regions on ``benchmark.valid_stream``, the same rows).
        owners: a saved owner map to continue from (resumed ``graft``), else None.
        progress: show progress bars.
        peers: the results of the strategies that ran before this one in the same run (name → a
            :class:`~.runner.StrategyResult`; ``replay-matched`` reads ``graft``'s bytes).
    """

    adapter: torch.nn.Module
    cfg: ContinualConfig
    settings: Settings
    template: dict[str, Any]
    plugins: list
    stream: Stream | DigitsStream
    owners: OwnerMap | None
    progress: bool
    peers: Mapping[str, Any] = field(default_factory=dict)

    @property
    def task_inference(self) -> str | None:
        """How a strategy that keeps an owner map routes test rows: in the class-incremental scenario (no task
        label at test; a single-head model, :func:`cl_graft.benchmarks.digits.check_scenario`) by the entropy
        of each task's model (:mod:`..graft.routing`; feature routing reads per-task heads' inputs, and a
        single-head model's output layer is every task's); None in the task-incremental one (the task label
        picks the task's model)."""
        return "entropy" if getattr(self.stream, "scenario", "task") == "class" else None


@dataclass(frozen=True)
class StrategyEntry:
    """A named strategy of the comparison.

    Attributes:
        name: what ``--strategies`` calls it.
        help: one line for ``--help`` and docs.
        build: ``build(ctx) -> template`` (an Avalanche ``SupervisedTemplate``).
        storage: ``storage(strategy, adapter) -> (bytes stored beyond θ_pre, extra info)``.
        settings: its settings class (:mod:`.settings`; ``cl-graft run`` has an option per field).
        fit: ``"stream"`` (one ``train`` per experience, evaluated after each), ``"joint"`` (one ``train`` on
            the whole stream with T × steps) or ``"separate"`` (a fresh model per task, stored T times).
        resumable: saves its state after every experience and continues from it with ``--resume``.
        grid: the settings ``--tune`` tries on dev rows (:mod:`.tuning`), points of ``settings`` keys; every
            strategy with settings of its own gets :data:`GRID_SIZE` points, the same budget.
        settings_of: another strategy whose chosen grid point this one runs with when both are in a run
            (``replay-matched`` sizes its memory by the region size chosen for ``graft``).
    """

    name: str
    help: str
    build: Callable[[BuildContext], Any]
    storage: Callable[[Any, torch.nn.Module], tuple[int, dict]]
    settings: type[Settings] = NoSettings
    fit: str = "stream"
    resumable: bool = False
    grid: tuple[dict, ...] = ()
    settings_of: str | None = None

    def __post_init__(self) -> None:
        if self.fit not in FITS:
            raise ValueError(f"fit must be one of {FITS}, got {self.fit!r}")
        if self.grid and len(self.grid) != GRID_SIZE:
            raise ValueError(f"{self.name}: a grid has {GRID_SIZE} points (the same budget for every strategy)")
        unknown = [k for point in self.grid for k in point if not has_setting(self.settings, k)]
        if unknown:
            raise ValueError(f"{self.name}: grid key {unknown[0]!r} is not a field of {self.settings.__name__}")


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes of every tensor fine-tuning moves (what a trained copy of the model adds to θ_pre): of a
    :class:`TextClassifier` (or the adapter around one) its trainable tensors, of any other model every tensor."""
    clf = getattr(model, "clf", model)
    names = set(trainable_names(clf)) if isinstance(clf, TextClassifier) else None
    return sum(p.numel() * p.element_size() for n, p in clf.named_parameters() if names is None or n in names)


def row_bytes(item) -> int:
    """Bytes a replay memory keeps for one row: a text row's token ids (int32), else its input tensor."""
    if isinstance(item, dict):
        return 4 * len(item["input_ids"])
    return item[0].numel() * item[0].element_size()


# ----- builders ------------------------------------------------------------------------------------
def _finder(ctx: BuildContext):
    """The region finder of ``graft``/``graft-paper``: sized per task (:mod:`.sizing`) unless the size is fixed."""
    from ..graft.finders import LocalizeFinder
    from ..graft.sizing import SizedFinder

    size, localize = ctx.settings.size, ctx.settings.localize
    if isinstance(size, RegionSize):
        return SizedFinder(LocalizeFinder(ctx.settings.method, localize, progress=ctx.progress), size)
    return LocalizeFinder(ctx.settings.method, replace(localize, sparsity=size), progress=ctx.progress)


def _graft(ctx: BuildContext):
    from ..graft.strategy import GraftStrategy

    return GraftStrategy(**ctx.template, plugins=ctx.plugins, mode="stream", finder=_finder(ctx),
                         reconstruct=ctx.settings.reconstruct, task_inference=ctx.task_inference,
                         valid_stream=getattr(ctx.stream.benchmark, "valid_stream", None), owners=ctx.owners)


def _graft_paper(ctx: BuildContext):
    from ..graft.finders import independent_regions
    from ..graft.strategy import GraftStrategy

    if not hasattr(ctx.stream, "splits"):
        raise UserError("graft-paper fine-tunes each task from its text rows; it runs on text streams only")
    data = {s.spec.name: ([e for e in exp.dataset], s.dev)
            for s, exp in zip(ctx.stream.splits, ctx.stream.benchmark.train_stream)}
    regions = independent_regions(ctx.adapter.clf, data, ctx.cfg.recipe, _finder(ctx), progress=ctx.progress)
    return GraftStrategy(**ctx.template, plugins=ctx.plugins, mode="paper", finder=_finder(ctx), regions=regions,
                         reconstruct=ctx.settings.reconstruct, owners=ctx.owners)


def _packnet(release: str) -> Callable[[BuildContext], Any]:
    """A builder of :class:`~cl_graft.strategies.plugins.packnet.PackNetPlugin` whose released elements become
    ``release``."""
    def build(ctx: BuildContext):
        from avalanche.training.templates import SupervisedTemplate

        from ..plugins.packnet import PackNetPlugin

        packnet = PackNetPlugin(steps=ctx.template["train_epochs"], prune_at=ctx.settings.packnet_prune_at,
                                keep=ctx.settings.packnet_keep, release=release, n_tasks=len(ctx.stream.tasks),
                                reconstruct=ctx.settings.reconstruct)
        packnet.task_inference = ctx.task_inference
        return SupervisedTemplate(**ctx.template, plugins=[packnet, *ctx.plugins])

    return build


def _avalanche(cls_name: str, fixed: Mapping[str, Any] | None = None, **settings: str) -> Callable[[BuildContext], Any]:
    """A builder of Avalanche's stock strategy ``cls_name`` (in ``avalanche.training``) with the keyword
    arguments ``fixed`` and, from the strategy's settings, ``settings`` (argument → settings field)."""
    def build(ctx: BuildContext):
        import avalanche.training

        kwargs = {**(fixed or {}), **{arg: getattr(ctx.settings, field) for arg, field in settings.items()}}
        return getattr(avalanche.training, cls_name)(**ctx.template, plugins=ctx.plugins, **kwargs)

    return build


def graft_bytes_estimate(ctx: BuildContext) -> int:
    """What ``graft`` with ``ctx.settings`` (:class:`GraftSettings`) stores for the stream, known before it runs:
    per task, its region budget (an int32 index and a value per element) and its head."""
    from cl_graft.regions.problem import resolve_budget
    from cl_graft.regions.region import graftable_names

    clf = ctx.adapter.clf
    params = dict(clf.named_parameters())
    names = graftable_names(params.items())
    numel = sum(params[n].numel() for n in names)
    size, localize = ctx.settings.size, ctx.settings.localize
    localize = localize if isinstance(size, RegionSize) else replace(localize, sparsity=size)
    per_task = resolve_budget(localize, numel) * (4 + params[names[0]].element_size())
    tasks = ctx.stream.tasks
    heads = sum(params[n].numel() * params[n].element_size() for t in tasks for n in clf.task_head_names(t))
    return len(tasks) * per_task + heads


def _replay_matched(ctx: BuildContext):
    """Replay whose memory holds as many bytes as ``graft`` stores: graft's actual bytes when it ran earlier in
    the run, else (text streams) :func:`graft_bytes_estimate`."""
    from avalanche.training import Replay

    graft = ctx.peers.get("graft")
    if graft is None and not isinstance(getattr(ctx.adapter, "clf", None), TextClassifier):
        raise UserError("replay-matched sizes its memory by graft's bytes: put graft before it in --strategies")
    target = graft.bytes if graft is not None else graft_bytes_estimate(ctx)
    rows = [row for exp in ctx.stream.benchmark.train_stream for row in exp.dataset]
    per_row = sum(row_bytes(r) for r in rows) / max(1, len(rows))
    mem = max(1, int(target / per_row))
    return Replay(**ctx.template, plugins=ctx.plugins, mem_size=mem)


# ----- storage -------------------------------------------------------------------------------------
def owner_plugin(strategy):
    """The strategy's plugin that keeps an :class:`OwnerMap` (graft, packnet)."""
    return next(p for p in strategy.plugins if isinstance(getattr(p, "owners", None), OwnerMap))


def _region_storage(strategy, adapter: torch.nn.Module) -> tuple[int, dict]:
    """Regions + heads + feature statistics of the owner map (graft, packnet), in all and per task."""
    from ..graft.sizing import sizing_records

    plugin = owner_plugin(strategy)
    owners = plugin.owners
    sizes = [p.region.size for p in owners.patches]
    numel = sum(o.numel() for o in owners.owner.values())
    stored = owners.bytes()
    return stored["total"], {"region_sizes": sizes, "graftable": numel, "bytes": stored,
                             "task_bytes": owners.task_bytes(),
                             "region_density": [s / numel for s in sizes],
                             "free_share": [1 - sum(sizes[:i + 1]) / numel for i in range(len(sizes))],
                             "sizing": sizing_records(owners), "localize_seconds": plugin.localize_seconds}


def _model_storage(strategy, adapter: torch.nn.Module) -> tuple[int, dict]:
    return model_bytes(adapter), {}


def _replay_storage(strategy, adapter: torch.nn.Module) -> tuple[int, dict]:
    """The model plus the replay memory's rows (:func:`row_bytes`)."""
    buffer = next(p for p in strategy.plugins if hasattr(p, "storage_policy")).storage_policy.buffer
    memory = sum(row_bytes(buffer[i]) for i in range(len(buffer)))
    return model_bytes(adapter) + memory, {"memory_rows": len(buffer), "memory_bytes": memory}


STRATEGIES: dict[str, StrategyEntry] = {e.name: e for e in (
    StrategyEntry("graft", "GraftStrategy, stream mode: train outside earlier regions, keep the learned region",
                  _graft, _region_storage, GraftSettings, resumable=True, grid=SIZE_GRID),
    StrategyEntry("graft-paper", "GraftStrategy, paper mode: regions from independent fine-tuning of each task",
                  _graft_paper, _region_storage, GraftSettings, grid=SIZE_GRID),
    StrategyEntry("packnet", "PackNet on the transformer: keep the largest free weights per task, release the "
                  "rest to θ_pre", _packnet("pre"), _region_storage, PackNetSettings, grid=KEEP_GRID),
    StrategyEntry("packnet-zero", "PackNet as published: released weights set to zero", _packnet("zero"),
                  _region_storage, PackNetSettings, grid=KEEP_GRID),
    StrategyEntry("naive", "Avalanche Naive: plain fine-tuning on each experience", _avalanche("Naive"),
                  _model_storage),
    StrategyEntry("ewc", "Avalanche EWC (separate penalties per task)",
                  _avalanche("EWC", {"mode": "separate"}, ewc_lambda="ewc_lambda"), _model_storage, EWCSettings,
                  grid=({"ewc_lambda": 1e2}, {"ewc_lambda": 1e3}, {"ewc_lambda": 1e4})),
    StrategyEntry("lwf", "Avalanche LwF (distillation from the previous model)",
                  _avalanche("LwF", alpha="lwf_alpha", temperature="lwf_temperature"), _model_storage, LwFSettings,
                  grid=({"lwf_alpha": 0.5, "lwf_temperature": 2.0}, {"lwf_alpha": 1.0, "lwf_temperature": 2.0},
                        {"lwf_alpha": 1.0, "lwf_temperature": 1.0})),
    StrategyEntry("replay", "Avalanche Replay (reservoir memory of earlier rows)",
                  _avalanche("Replay", mem_size="replay_mem"), _replay_storage, ReplaySettings,
                  grid=({"replay_mem": 64}, {"replay_mem": 256}, {"replay_mem": 1024})),
    StrategyEntry("replay-matched", "Avalanche Replay with a memory of as many bytes as graft stores",
                  _replay_matched, _replay_storage, GraftSettings, settings_of="graft"),
    StrategyEntry("joint", "Avalanche JointTraining on the whole stream (upper reference)",
                  _avalanche("JointTraining"), _model_storage, fit="joint"),
    StrategyEntry("single", "one model per task, each fine-tuned alone from θ_pre",
                  _avalanche("Naive"), _model_storage, fit="separate"),
)}
DEFAULT_STRATEGIES = ("graft", "naive", "ewc", "lwf", "replay", "joint")


def parse_strategies(text: str) -> list[str]:
    """Validated strategy names from ``"graft,naive,..."`` (no repeats, at least one)."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise UserError("--strategies is empty; choose from " + ", ".join(STRATEGIES))
    for n in names:
        if n not in STRATEGIES:
            raise UserError(f"unknown strategy {n!r}; choose from {', '.join(STRATEGIES)}")
    if len(set(names)) != len(names):
        raise UserError(f"a strategy appears twice in --strategies: {text!r}")
    return names


def registry_options(entries: Iterable[StrategyEntry] | None = None) -> list[SettingOption]:
    """One option per setting of the strategies (default: every entry of :data:`STRATEGIES`); a setting several
    strategies share (``graft``'s and ``graft-paper``'s sparsity) is one option.

    Raises:
        ValueError: two settings classes name different settings alike.
    """
    seen: dict[str, SettingOption] = {}
    for entry in STRATEGIES.values() if entries is None else entries:
        for opt in setting_options(entry.settings):
            prev = seen.setdefault(opt.name, opt)
            if (prev.key, prev.kind, prev.field.default) != (opt.key, opt.kind, opt.field.default):
                raise ValueError(f"{entry.name}: setting {opt.key!r} clashes with another strategy's {prev.key!r}")
    return list(seen.values())


def strategy_settings(name: str, preset: Preset, *, seed: int, given: Mapping[str, Any] | None = None) -> Settings:
    """Strategy ``name``'s settings in a run of ``preset`` with ``seed``: the preset's, changed by those of the
    ``given`` keys (e.g. command-line options) that its settings class has."""
    cls = STRATEGIES[name].settings
    return apply_point(cls.from_preset(preset, seed=seed),
                       {k: v for k, v in (given or {}).items() if has_setting(cls, k)})
