"""Multi-task fine-tuning: one shared backbone, one head per task, each step a batch of one random task.

Panigrahi et al. (2023, §5.1, https://arxiv.org/abs/2302.06600) train one model on all tasks together,
"each batch from a randomly chosen task", then localize each task's skill in it. The recipe is the
single-task one of :mod:`cl_graft.training.finetune` (its optimizer, parameter groups and batch order are reused);
the task of each step is drawn uniformly with a seeded RNG, and the best checkpoint is the one with the
best mean dev score over tasks.

With ``region`` the same loop trains *only the region's elements* (the paper's "10 quick gradient steps on
the union"), frozen bit-exactly elsewhere by :class:`~.freeze.ElementFreeze`, as every recipe here does.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import UserError
from .evaluate import evaluate
from .finetune import FinetuneConfig, Masks, batches, region_trainable, train_, trainable_names


@dataclass
class MultitaskResult:
    """What a multi-task run did.

    Attributes:
        best_step: the step whose weights were kept.
        best_dev: mean dev score over tasks at that step (None without dev rows).
        dev: per-task dev score at that step.
        steps_per_task: how many steps each task got.
        history: ``{"step", "dev", "loss"}`` at every evaluation (``dev`` = per-task scores).
    """

    best_step: int
    best_dev: float | None
    dev: dict[str, float]
    steps_per_task: dict[str, int]
    history: list[dict]


def task_schedule(tasks: Sequence[str], steps: int, seed: int) -> list[str]:
    """The task of each step: uniform draws with a seeded RNG (same seed → same schedule)."""
    if not tasks:
        raise UserError("multi-task training needs at least one task")
    rng = random.Random(seed)
    return [tasks[rng.randrange(len(tasks))] for _ in range(steps)]


def _check(model, train: Mapping[str, list[dict]]) -> list[str]:
    tasks = list(train)
    for t in tasks:
        model.resolve_task(t)
        if not train[t]:
            raise UserError(f"no training rows for task {t!r}")
    return tasks


def _mean_dev(model, dev: Mapping[str, list[dict]]) -> dict[str, float]:
    return {t: evaluate(model, rows, t)[0]["score"] for t, rows in dev.items() if rows}


def finetune_multitask_(model, train: Mapping[str, list[dict]], dev: Mapping[str, list[dict]],
                        cfg: FinetuneConfig, *, region: Masks | None = None,
                        progress: bool = True) -> MultitaskResult:
    """Fine-tune ``model`` IN PLACE on several tasks at once and leave it at the best-on-dev checkpoint.

    Args:
        model: a :class:`~cl_graft.training.models.TextClassifier` with every task of ``train`` registered.
        train: task → training rows; each step draws a task uniformly, then the task's next batch.
        dev: task → dev rows (may be empty: then the last step is kept).
        cfg: the recipe (optimizer, lr, batch size, total steps, evaluation period, seed).
        region: a :class:`~cl_graft.regions.region.Region` (anything with ``masks``); if given, only its
            elements move; heads and everything else stay bit-exact.
        progress: show a tqdm bar.
    """
    tasks = _check(model, train)
    params = dict(model.named_parameters())
    names = trainable_names(model, freeze_embeddings=cfg.freeze_embeddings)
    trainable = None
    if region is not None:
        missing = [n for n in region.masks if n not in params]
        if missing:
            raise UserError(f"region tensor {missing[0]!r} is not in the model")
        trainable = region_trainable(region, names)
        names = list(trainable)
    streams = {t: iter(batches(train[t], cfg.batch_size, cfg.steps, cfg.seed + k)) for k, t in enumerate(tasks)}
    schedule = task_schedule(tasks, cfg.steps, cfg.seed)

    def select() -> tuple[float, dict[str, float]]:
        per_task = _mean_dev(model, dev)
        return sum(per_task.values()) / len(per_task), per_task

    step, best, per_task, history = train_(
        model, ((t, next(streams[t])) for t in schedule), cfg, names=names,
        select=select if any(dev.values()) else None, trainable=trainable,
        desc="multitask" if region is None else "region steps", progress=progress)
    return MultitaskResult(best_step=step, best_dev=best, dev=per_task or {},
                           steps_per_task={t: schedule.count(t) for t in tasks}, history=history)
