"""Graft's entries in ``cl-graft run`` (:class:`~..interface.entry.StrategyEntry`; declared by the folder's
``__init__.py``, found by :mod:`cl_graft.strategies.comparison.registry`):

- ``graft``: :class:`~.strategy.GraftStrategy` in stream mode (Panigrahi et al. 2023, §5.2): each experience
  trains outside the earlier regions and keeps its learned region; resumable (:mod:`.run_state`);
- ``graft-paper``: the paper's mode: regions from independent fine-tuning and localization of each task (text
  streams).

Both keep an owner map; what it stores is :func:`region_kept_bytes`, what their reports show :func:`region_lines`
and :func:`region_field` (PackNet, which keeps one too, uses all three); how they serve rows without task labels
is the routing room's (:mod:`cl_graft.strategies.routing.rules`).
"""
from __future__ import annotations

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, StrategyEntry
from ..routing.rules import RegionRouting, class_scenario_rule
from .run_state import OwnerMapState, region_plugin, task_seconds
from .settings import SIZE_GRID, GraftSettings
from .sizing import RegionSize, size_line

STORES = ("each task's region (a value and a gap-coded index per weight), its head and its feature statistics; in the "
          "class scenario the router's sums")


def region_kept_bytes(strategy, model) -> tuple[int, dict]:
    """Regions + heads + feature statistics of the owner map, in all and per task, with each task's region
    element count (``region_elements``; results written before call it ``region_sizes``, read both with
    :func:`cl_graft.regions.names.region_elements`), its density, the free share after it, the size search's record
    and the seconds of each search and of each task's feature statistics (a resumed run's earlier sessions
    included, :func:`.run_state.task_seconds`)."""
    from .sizing import sizing_records

    plugin = region_plugin(strategy)
    owners = plugin.owners
    elements = [p.region.size for p in owners.patches]
    numel = sum(o.numel() for o in owners.owner.values())
    stored = owners.bytes()
    return stored["total"], {"region_elements": elements, "graftable": numel, "bytes": stored,
                             "task_bytes": owners.task_bytes(),
                             "region_density": [e / numel for e in elements],
                             "free_share": [1 - sum(elements[:i + 1]) / numel for i in range(len(elements))],
                             "sizing": sizing_records(owners), **task_seconds(plugin),
                             **({"router": owners.class_heads.record()} if owners.class_heads is not None else {}),
                             **plugin.seen.info()}


def region_lines(info: dict) -> list[str]:
    """The strategy table's line per task (``report_lines``): its region's share of the graftable elements
    and, when the size was searched, what the search found (``info["sizing"]``, :func:`.sizing.size_line`)."""
    return [size_line(r["task"], r) for r in info.get("sizing", [])]


def region_field(info: dict, i: int) -> list[str]:
    """The result line's field of task ``i`` (``progress_fields``): its region's share of the graftable
    elements (``info["region_density"]``)."""
    density = info.get("region_density") or []
    return [f"region {100 * density[i]:.2f}%"] if len(density) > i else []


def search_label(strategy) -> str:
    """The progress line's label for the region search after training: ``size search`` when each task's size is
    chosen, else ``localize``."""
    from .sizing import SizedFinder

    return "size search" if isinstance(region_plugin(strategy).finder, SizedFinder) else "localize"


def _finder(ctx: BuildContext):
    """The region finder: sized per task (:mod:`.sizing`) unless the size is fixed."""
    from .finders import LocalizeFinder
    from .sizing import SizedFinder

    settings: GraftSettings = ctx.settings
    finder = LocalizeFinder(settings.method, settings.localize_config(), progress=ctx.progress)
    return SizedFinder(finder, settings.region_size) if isinstance(settings.region_size, RegionSize) else finder


def _stream_mode(ctx: BuildContext):
    from .strategy import GraftStrategy
    from .trained_test import TrainedTestScore

    strategy = GraftStrategy(**ctx.template, plugins=ctx.plugins, mode="stream", finder=_finder(ctx),
                             reconstruct=ctx.settings.reconstruct,
                             task_inference=class_scenario_rule(ctx.scenario, "features"),
                             feature_stats=True if ctx.task_inference == "features" else None,
                             router=ctx.settings.router, answer=ctx.settings.answer,
                             valid_stream=getattr(ctx.stream.benchmark, "valid_stream", None), owners=ctx.resumed)
    if ctx.settings.trained_test:                                           # sizing["trained_test"], read later
        TrainedTestScore.attach(strategy, ctx.stream.benchmark.test_stream)
    return strategy


def check_size(settings: GraftSettings, stream) -> None:
    """Refuses a fixed ``--region-size`` that the stream's tasks cannot all have (before any training).

    Raises:
        UserError: size × tasks above the graftable elements.
    """
    size, tasks = settings.region_size, len(stream.tasks)
    if not isinstance(size, RegionSize) and size * tasks > 1 + 1e-9:
        raise UserError(f"--region-size {size:g} for {tasks} tasks needs {size * tasks:.0%} of the graftable "
                        f"elements; at most {1 / tasks:.4g} per task fits (or --region-size auto)")


def check_paper(settings: GraftSettings, stream) -> None:
    """Refuses a stream graft-paper cannot run: it fine-tunes each task from its text rows with its own head.

    Raises:
        UserError: a stream without text rows, or the class scenario.
    """
    if not stream.splits or stream.scenario != "task":
        raise UserError("graft-paper fine-tunes each task from its text rows with its own head: it runs on text "
                        "streams in the task scenario only")
    check_size(settings, stream)


def _paper_mode(ctx: BuildContext):
    from .finders import independent_regions
    from .strategy import GraftStrategy

    check_paper(ctx.settings, ctx.stream)
    data = {s.spec.name: ([e for e in exp.dataset], s.dev)
            for s, exp in zip(ctx.stream.splits, ctx.stream.benchmark.train_stream)}
    regions = independent_regions(ctx.model.clf, data, ctx.cfg.recipe, _finder(ctx), progress=ctx.progress)
    return GraftStrategy(**ctx.template, plugins=ctx.plugins, mode="paper", finder=_finder(ctx), regions=regions,
                         reconstruct=ctx.settings.reconstruct, owners=ctx.resumed)


ENTRIES = (
    StrategyEntry(name="graft", help="GraftStrategy, stream mode: train outside earlier regions, keep the learned "
                  "region", stores=STORES, build=_stream_mode, kept_bytes=region_kept_bytes, settings=GraftSettings,
                  grid=SIZE_GRID, state=OwnerMapState(), routes=RegionRouting(),
                  phase_after_training=search_label, check=check_size, report_lines=region_lines,
                  progress_fields=region_field, default=0),
    StrategyEntry(name="graft-paper", help="GraftStrategy, paper mode: regions from independent fine-tuning of each "
                  "task", stores=STORES, build=_paper_mode, kept_bytes=region_kept_bytes, settings=GraftSettings,
                  grid=SIZE_GRID, routes=RegionRouting(), check=check_paper, report_lines=region_lines,
                  progress_fields=region_field),
)
