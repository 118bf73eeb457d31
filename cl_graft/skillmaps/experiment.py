"""The multi-task skill-map experiment (Panigrahi et al. 2023, §5.1, https://arxiv.org/abs/2302.06600).

1. Fine-tune one model θ_mt on all tasks together (:func:`~cl_graft.training.multitask.finetune_multitask_`), and,
   for comparison, one model per task (optional).
2. For each task i, learn its region γ_i with θ_pre and θ_mt (:func:`~cl_graft.regions.learned.learn_region`).
   θ_pre here is the pre-trained backbone with θ_mt's task heads: grafting takes heads from θ_mt, so the
   empty region scores acc_pre,j and the full region acc_mt,j.
3. Evaluate θ_pre + γ_i ⊙ (θ_mt − θ_pre) on every task j (the transfer matrix), and, per task group, the
   union of its regions before and after a few gradient steps on the union only (compositionality).
4. Write regions, ``skillmap.json`` and figures (:mod:`cl_graft.skillmaps.results`).

Nothing here loads data: the caller passes the rows (``cl-graft multitask`` loads them from ``benchmarks``).
"""
from __future__ import annotations

import functools
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..errors import UserError
from ..grafting.graft import graft_model
from ..presets import Preset, get_preset
from ..regions.config import LocalizeConfig
from ..regions.learned import learn_region
from ..regions.region import Region
from ..task import TaskRows
from ..training.evaluate import evaluate
from ..training.finetune import FinetuneConfig, finetune_
from ..training.models import TextClassifier, clone_model
from ..training.multitask import finetune_multitask_
from . import analysis
from .report import draw_figures
from .results import FIGURES_DIR, REGIONS_DIR, SkillMap, save_skillmap

DEFAULT_GROUPS: dict[str, tuple[str, ...]] = {
    "sentiment": ("sst2", "cr", "mpqa", "imdb", "yelp"), "nli": ("mnli", "snli", "qnli", "rte"),
    "paraphrase": ("qqp", "mrpc"), "topic": ("agnews",),
}


@dataclass(frozen=True)
class SkillmapConfig:
    """How the experiment runs (data sizes are the caller's business).

    Attributes:
        multitask: recipe of the multi-task model; ``steps`` is the total over all tasks.
        localize: region finding for each task on θ_pre and θ_mt.
        single: recipe of the single-task baselines, or None to skip them.
        union_steps: gradient steps on each group's union region (the paper's 10), with ``multitask``'s lr.
        groups: group name → tasks; None = :data:`DEFAULT_GROUPS` restricted to the run's tasks.
    """

    multitask: FinetuneConfig
    localize: LocalizeConfig
    single: FinetuneConfig | None = None
    union_steps: int = 10
    groups: Mapping[str, tuple[str, ...]] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.union_steps < 0:
            raise UserError(f"union_steps must be >= 0, got {self.union_steps}")

    def to_json(self) -> dict:
        return {"multitask": self.multitask.to_json(), "localize": self.localize.to_json(),
                "single": None if self.single is None else self.single.to_json(),
                "union_steps": self.union_steps,
                "groups": None if self.groups is None else {g: list(t) for g, t in self.groups.items()}}

    @classmethod
    def from_json(cls, d: dict) -> SkillmapConfig:
        return cls(multitask=FinetuneConfig(**d["multitask"]),
                   localize=LocalizeConfig.from_json(d["localize"]),
                   single=None if d["single"] is None else FinetuneConfig(**d["single"]),
                   union_steps=d["union_steps"],
                   groups=None if d["groups"] is None else {g: tuple(t) for g, t in d["groups"].items()})


def skillmap_setup(preset: str, n_tasks: int, *, seed: int, single: bool = True,
                   groups: Mapping[str, tuple[str, ...]] | None = None) -> tuple[Preset, SkillmapConfig]:
    """The data preset (eval cap replaced) and the experiment config for ``n_tasks`` tasks."""
    data = get_preset(preset)
    sp = data.skillmap
    mt = replace(data.finetune, seed=seed, steps=sp.steps_per_task * n_tasks,
                 eval_every=max(1, sp.steps_per_task * n_tasks // 4))
    st = replace(data.finetune, seed=seed, steps=sp.single_steps, eval_every=max(1, sp.single_steps // 4))
    cfg = SkillmapConfig(multitask=mt, localize=replace(sp.localize, seed=seed),
                         single=st if single else None, groups=groups)
    return replace(data, eval_cap=sp.eval_cap), cfg


def resolve_groups(groups: Mapping[str, tuple[str, ...]] | None, tasks: list[str]) -> dict[str, list[str]]:
    """Explicit groups (checked against the tasks), or the defaults with at least one task in the run."""
    if groups is not None:
        analysis.membership(groups, tasks)
        return {g: list(members) for g, members in groups.items() if members}
    out = {g: [t for t in members if t in tasks] for g, members in DEFAULT_GROUPS.items()}
    return {g: members for g, members in out.items() if members}


def _accuracy(model: TextClassifier, splits: Mapping[str, TaskRows]) -> tuple[np.ndarray, dict[str, dict]]:
    """(T,) test accuracy of ``model`` on every task, and the full metrics per task."""
    metrics = {t: evaluate(model, s.test, t)[0] for t, s in splits.items()}
    return np.array([metrics[t]["accuracy"] for t in splits]), metrics


def _single_task(base: TextClassifier, splits: Mapping[str, TaskRows], cfg: FinetuneConfig,
                 progress: bool) -> dict[str, dict]:
    """Test metrics of one model fine-tuned per task (the baseline the multi-task model is compared with)."""
    out = {}
    for k, (t, split) in enumerate(splits.items()):
        model = clone_model(base)
        model.add_task(split.spec, seed=cfg.seed + k)
        finetune_(model, split.train, split.dev, cfg, task=t, progress=progress)
        out[t] = evaluate(model, split.test, t)[0]
    return out


def _regions(pre: TextClassifier, mt: TextClassifier, splits: Mapping[str, TaskRows], cfg: LocalizeConfig,
             out: Path, progress: bool) -> tuple[list[Region], dict[str, float]]:
    """γ_i for each task (θ_pre, θ_mt, task i's rows), saved with task i's multi-task head."""
    regions, seconds = [], {}
    for t, split in splits.items():
        res = learn_region(pre, mt, split.train, split.dev, cfg, task=t, progress=progress)
        region = Region(res.region.masks, {**res.region.meta, "task": t, "multitask_tasks": list(splits)})
        heads = {n: p for n, p in mt.named_parameters() if n.startswith(f"heads.{t}.")}
        region.save(out / REGIONS_DIR / t, heads=heads or None)
        regions.append(region)
        seconds[t] = round(res.seconds, 1)
    return regions, seconds


def _unions(pre: TextClassifier, mt: TextClassifier, splits: Mapping[str, TaskRows], regions: list[Region],
            groups: dict[str, list[str]], cfg: SkillmapConfig, progress: bool) -> tuple[np.ndarray, ...]:
    """Per group: |union|, (T,) accuracy of θ_pre + union ⊙ Δ, and the same after ``union_steps`` on it."""
    tasks = list(splits)
    steps = max(cfg.union_steps, 1)
    step_cfg = replace(cfg.multitask, steps=steps, eval_every=steps)
    size = np.zeros(len(groups), dtype=np.int64)
    before, after = np.zeros((len(groups), len(tasks))), np.zeros((len(groups), len(tasks)))
    for g, members in enumerate(tqdm(list(groups.values()), desc="group unions", disable=not progress)):
        union = functools.reduce(operator.or_, [regions[tasks.index(t)] for t in members])
        size[g] = union.size
        model = graft_model(pre, mt, union)
        before[g] = after[g] = _accuracy(model, splits)[0]
        if cfg.union_steps and not union.is_empty:
            rows = {t: splits[t].train for t in members}
            finetune_multitask_(model, rows, {}, step_cfg, region=union, progress=False)
            after[g] = _accuracy(model, splits)[0]
    return size, before, after


def run_skillmap(base: TextClassifier, splits: Mapping[str, TaskRows], cfg: SkillmapConfig, *,
                 out: str | Path, info: Mapping | None = None, progress: bool = True) -> SkillMap:
    """Runs the experiment and writes ``out/{skillmap.json, regions/<task>/, figures/*.png}``.

    Args:
        base: the pre-trained classifier (no tasks needed); never modified.
        splits: task → rows, at least two tasks.
        cfg: the experiment config.
        out: results folder (the caller checks that it holds no earlier results).
        info: extra JSON recorded under ``info["run"]`` (command, data source, versions).
        progress: show progress bars.

    Returns:
        The :class:`~cl_graft.skillmaps.results.SkillMap` that was saved.
    """
    tasks = list(splits)
    if len(tasks) < 2:
        raise UserError(f"a skill map needs at least two tasks, got {tasks}")
    groups = resolve_groups(cfg.groups, tasks)
    out, seconds, clock = Path(out), {}, [time.perf_counter()]

    def lap(key: str) -> None:
        now = time.perf_counter()
        seconds[key] = round(now - clock[-1], 1)
        clock.append(now)

    pre = clone_model(base)
    for k, t in enumerate(tasks):
        pre.add_task(splits[t].spec, seed=cfg.multitask.seed + k)
    mt = clone_model(pre)
    mt_run = finetune_multitask_(mt, {t: s.train for t, s in splits.items()},
                                 {t: s.dev for t, s in splits.items()}, cfg.multitask, progress=progress)
    acc_mt, m_mt = _accuracy(mt, splits)
    lap("multitask")
    m_single = _single_task(base, splits, cfg.single, progress) if cfg.single is not None else None
    lap("single")
    regions, loc_seconds = _regions(pre, mt, splits, cfg.localize, out, progress)
    lap("localize")
    acc_pre, m_pre = _accuracy(graft_model(pre, mt, Region.empty(regions[0].shapes)), splits)  # MT heads
    acc_graft = np.stack([_accuracy(graft_model(pre, mt, r), splits)[0]
                          for r in tqdm(regions, desc="graft × tasks", disable=not progress)])  # (T, T)
    lap("transfer")
    union_size, acc_union, acc_steps = _unions(pre, mt, splits, regions, groups, cfg, progress)
    lap("composition")
    anatomy = {}
    for axis in analysis.ANATOMY_AXES:
        labels, share, density = analysis.anatomy([r.breakdown() for r in regions], by=axis)
        anatomy[axis] = {"labels": labels, "share": share, "density": density}
    seconds["total"] = round(clock[-1] - clock[0], 1)
    sm = SkillMap(
        tasks=tasks, groups=groups, acc_pre=acc_pre, acc_mt=acc_mt, acc_graft=acc_graft,
        acc_single=None if m_single is None else np.array([m_single[t]["accuracy"] for t in tasks]),
        acc_union=acc_union, acc_union_steps=acc_steps, region_elements=np.array([r.size for r in regions]),
        numel=regions[0].numel, intersections=analysis.intersection_counts(regions), union_size=union_size,
        anatomy=anatomy, info={
            "run": dict(info or {}), "config": cfg.to_json(), "seconds": seconds,
            "localize_seconds": loc_seconds, "regions": {t: f"{REGIONS_DIR}/{t}" for t in tasks},
            "multitask": {"best_step": mt_run.best_step, "best_dev": mt_run.best_dev, "dev": mt_run.dev,
                          "steps_per_task": mt_run.steps_per_task},
            "metrics": {"pre": m_pre, "mt": m_mt, "single": m_single},
            "n_rows": {t: {"train": len(s.train), "dev": len(s.dev), "test": len(s.test)}
                       for t, s in splits.items()},
        })
    save_skillmap(sm, out)
    draw_figures(sm, out / FIGURES_DIR)
    return sm
