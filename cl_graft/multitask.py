"""Multi-task fine-tuning: one shared backbone, one head per task, each step a batch of one random task.

Panigrahi et al. (2023, §5.1, https://arxiv.org/abs/2302.06600) train one model on all tasks together,
"each batch from a randomly chosen task", then localize each task's skill in it. The recipe is the
single-task one of :mod:`cl_graft.finetune` (its optimizer, parameter groups and batch order are reused);
the task of each step is drawn uniformly with a seeded RNG, and the best checkpoint is the one with the
best mean dev score over tasks.

With ``region`` the same loop trains *only the region's elements* (the paper's "10 quick gradient steps on
the union"): gradients outside the region are zeroed and, after every step, elements outside it are put
back bit-exactly (weight decay would otherwise move them).
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .errors import UserError
from .evaluate import evaluate
from .finetune import FinetuneConfig, batches, check_finite, make_optimizer, trainable_names
from .region import Region


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
        model._resolve_task(t)
        if not train[t]:
            raise UserError(f"no training rows for task {t!r}")
    return tasks


def _mean_dev(model, dev: Mapping[str, list[dict]]) -> dict[str, float]:
    return {t: evaluate(model, rows, t)[0]["score"] for t, rows in dev.items() if rows}


def finetune_multitask_(model, train: Mapping[str, list[dict]], dev: Mapping[str, list[dict]],
                        cfg: FinetuneConfig, *, region: Region | None = None,
                        progress: bool = True) -> MultitaskResult:
    """Fine-tune ``model`` IN PLACE on several tasks at once and leave it at the best-on-dev checkpoint.

    Args:
        model: a :class:`~cl_graft.models.TextClassifier` with every task of ``train`` registered.
        train: task → training rows; each step draws a task uniformly, then the task's next batch.
        dev: task → dev rows (may be empty: then the last step is kept).
        cfg: the recipe (optimizer, lr, batch size, total steps, evaluation period, seed).
        region: if given, only its elements move; heads and everything else stay bit-exact.
        progress: show a tqdm bar.
    """
    tasks = _check(model, train)
    torch.manual_seed(cfg.seed)
    params = dict(model.named_parameters())
    names = trainable_names(model, freeze_embeddings=cfg.freeze_embeddings)
    masks: dict[str, torch.Tensor] = {}
    if region is not None:
        missing = [n for n in region.names if n not in params]
        if missing:
            raise UserError(f"region tensor {missing[0]!r} is not in the model")
        masks = {n: m.to(params[n].device) for n, m in region.masks.items() if bool(m.any())}
        names = [n for n in names if n in masks]
    if not names:
        raise UserError("nothing to train: the region selects no trainable parameter")
    keep = {n: params[n].detach().clone() for n in masks}                  # values outside the region
    for n, p in params.items():
        p.requires_grad_(n in names)
    opt = make_optimizer(model, names, cfg)
    device = next(model.parameters()).device
    streams = {t: iter(batches(train[t], cfg.batch_size, cfg.steps, cfg.seed + k))
               for k, t in enumerate(tasks)}
    schedule = task_schedule(tasks, cfg.steps, cfg.seed)
    best = {"step": 0, "dev": None, "per_task": {}, "state": None}
    history: list[dict] = []
    model.train()
    desc = "multitask" if region is None else "region steps"
    bar = tqdm(enumerate(schedule, start=1), total=cfg.steps, desc=desc, disable=not progress)
    for step, task in bar:
        batch = next(streams[task])
        enc = {k: v.to(device) for k, v in model.encode(batch, task).items()}
        labels = torch.tensor([r["label"] for r in batch], device=device)
        loss = torch.nn.functional.cross_entropy(model(**enc, task=task), labels)
        check_finite(f"{desc} step {step} ({task})", loss=loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        live = [params[n] for n in names if params[n].grad is not None]  # other tasks' heads get no gradient
        with torch.no_grad():
            for n in masks:
                if params[n].grad is not None:
                    params[n].grad.mul_(masks[n])
        if cfg.clip and live:
            torch.nn.utils.clip_grad_norm_(live, cfg.clip)
        opt.step()
        with torch.no_grad():
            for n, m in masks.items():
                params[n].copy_(torch.where(m, params[n], keep[n]))
        bar.set_postfix(task=task, loss=f"{loss.item():.3f}")
        if any(dev.values()) and (step % cfg.eval_every == 0 or step == cfg.steps):
            per_task = _mean_dev(model, dev)
            score = sum(per_task.values()) / len(per_task)
            history.append({"step": step, "dev": per_task, "loss": loss.item()})
            if best["dev"] is None or score > best["dev"]:
                best = {"step": step, "dev": score, "per_task": per_task,
                        "state": {n: params[n].detach().clone() for n in names}}
            model.train()
    if best["state"] is not None:
        with torch.no_grad():
            for n, v in best["state"].items():
                params[n].copy_(v)
    check_finite(f"{desc} after step {cfg.steps}", tensors={n: params[n] for n in names})
    for p in params.values():
        p.requires_grad_(True)
    model.eval()
    counts = {t: schedule.count(t) for t in tasks}
    return MultitaskResult(best_step=best["step"] or cfg.steps, best_dev=best["dev"], dev=best["per_task"],
                           steps_per_task=counts, history=history)
