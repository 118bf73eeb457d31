"""Named run sizes, one registry for every command: data sizes, the fine-tuning recipe, and the sizes of the
continual comparison (``cl-graft run``) and of the skill-map experiment (``cl-graft multitask``).

- ``smoke``: a plumbing check, about a minute per task; accuracy is not meaningful.
- ``quick``: a few minutes per task on a CPU with meaningful accuracy (512 examples per class).
- ``paper``: the paper's 4096 examples per class and 1000 SGD steps; meant for a GPU.

Costs measured on 2 CPU cores with MiniLM are in the README and ``benchmarks/results/``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import UserError
from .regions.config import LocalizeConfig
from .training.finetune import FinetuneConfig


@dataclass(frozen=True)
class ContinualSizes:
    """Sizes of the continual comparison (the recipe is the preset's ``finetune`` with these steps)."""

    eval_cap: int | None         # test rows per task
    steps: int                   # optimizer steps per experience
    batch_size: int
    replay_mem: int              # Replay's memory in rows
    localize: LocalizeConfig     # region finding after each experience (graft)


@dataclass(frozen=True)
class SkillmapSizes:
    """Sizes of the skill-map experiment."""

    steps_per_task: int          # multi-task steps = steps_per_task × number of tasks
    single_steps: int            # steps of each single-task baseline
    eval_cap: int | None         # test rows per task (the T × T transfer matrix dominates the cost)
    localize: LocalizeConfig


@dataclass(frozen=True)
class Preset:
    """One run size."""

    name: str
    k: int                       # training examples per class
    dev_k: int                   # dev examples per class, drawn from the rest of train
    eval_cap: int | None         # at most this many test rows (deterministic subsample); None = all
    max_length: int              # tokens per input
    finetune: FinetuneConfig
    continual: ContinualSizes
    skillmap: SkillmapSizes


# Continual ``quick`` regions hold 5% of the graftable parameters per task: over three seeds that kept 99% of
# single-task accuracy against 97% at 1% (benchmarks/results/continual.md); pass a smaller region size for long
# streams. Skill-map regions grow from empty (base_fraction=0): with the usual top-|Δ| base every task starts
# from the same elements of θ_mt − θ_pre and keeps most of them (MiniLM, 4 tasks: pairwise IoU 0.90–0.98), so
# the overlaps would measure the shared base rather than the tasks; 0.5% of the graftable set recovers most of
# the gain where 0.1% did not (benchmarks/results/multitask.md).
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("smoke", k=16, dev_k=16, eval_cap=200, max_length=64,
           finetune=FinetuneConfig(lr=0.05, batch_size=8, steps=30, eval_every=15),
           continual=ContinualSizes(eval_cap=64, steps=10, batch_size=8, replay_mem=32, localize=LocalizeConfig(
               region_size=0.01, steps=2, batch_size=8, n_batches=1, select_rows=16, eval_every=2)),
           skillmap=SkillmapSizes(steps_per_task=8, single_steps=8, eval_cap=48, localize=LocalizeConfig(
               region_size=5e-3, steps=4, lr=3.0, batch_size=8, n_batches=1, select_rows=16, eval_every=2,
               base_fraction=0.0))),
    Preset("quick", k=512, dev_k=64, eval_cap=1000, max_length=64,
           finetune=FinetuneConfig(lr=0.05, batch_size=16, steps=400, eval_every=100),
           continual=ContinualSizes(eval_cap=500, steps=200, batch_size=16, replay_mem=256, localize=LocalizeConfig(
               region_size=0.05, steps=8, lr=2.0, batch_size=16, n_batches=2, select_rows=64, eval_every=4)),
           skillmap=SkillmapSizes(steps_per_task=150, single_steps=400, eval_cap=500, localize=LocalizeConfig(
               region_size=5e-3, steps=10, lr=3.0, batch_size=16, n_batches=4, select_rows=128, eval_every=2,
               base_fraction=0.0))),
    Preset("paper", k=4096, dev_k=512, eval_cap=None, max_length=128,
           finetune=FinetuneConfig(lr=0.05, batch_size=16, steps=1000, eval_every=100),
           continual=ContinualSizes(eval_cap=None, steps=1000, batch_size=16, replay_mem=1024,
                                    localize=LocalizeConfig(region_size=0.01, steps=20, batch_size=16, n_batches=8,
                                                            select_rows=256, eval_every=2)),
           skillmap=SkillmapSizes(steps_per_task=500, single_steps=1000, eval_cap=None, localize=LocalizeConfig(
               region_size=5e-3, steps=20, lr=2.0, batch_size=16, n_batches=8, select_rows=256, eval_every=2,
               base_fraction=0.0))),
)}


def get_preset(name: str, *, seed: int | None = None, k: int | None = None, **finetune_overrides) -> Preset:
    """The named preset, with the seed, ``k`` and fine-tuning overrides (``steps``, ``lr``, ...; None = keep)
    applied and validated."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
    if k is not None and k < 1:
        raise UserError(f"--k must be >= 1, got {k}")
    overrides = {key: v for key, v in finetune_overrides.items() if v is not None}
    if seed is not None:
        overrides["seed"] = seed
    return replace(preset, finetune=replace(preset.finetune, **overrides), **({"k": k} if k is not None else {}))
