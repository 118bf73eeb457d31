"""Fine-tuning that produces θ_ft, following Panigrahi et al. (2023), App. A.

SGD by default (weight decay 1e-4 except biases and LayerNorms, gradient clipping 1.0, frozen input
embeddings, frozen LM head for prompt-based heads), AdamW as an option, evaluation on dev every
``eval_every`` steps keeping the best checkpoint, seeded batch order.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from .. import distributed
from ..errors import UserError
from .evaluate import evaluate
from .freeze import ElementFreeze

OPTIMIZERS = ("sgd", "adamw")


class Masks(Protocol):
    """What training reads of a region: ``masks``, name → bool tensor of the parameter's shape.

    :class:`cl_graft.regions.region.Region` is one; training needs nothing else of it.
    """

    masks: Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class FinetuneConfig:
    """Hyper-parameters of one fine-tuning run."""

    optimizer: str = field(default="sgd", metadata={"help": "sgd (localizes, as in the paper) or adamw"})
    lr: float = field(default=0.05, metadata={"help": "learning rate"})
    batch_size: int = field(default=16, metadata={"help": "examples per step"})
    steps: int = field(default=400, metadata={"help": "optimizer steps"})
    weight_decay: float = field(default=1e-4, metadata={"help": "L2 / decoupled decay, not on biases/LayerNorms"})
    clip: float = field(default=1.0, metadata={"help": "gradient-norm clip (0 = off)"})
    eval_every: int = field(default=100, metadata={"help": "dev evaluation period in steps"})
    freeze_embeddings: bool = field(default=True, metadata={"help": "keep input embeddings at θ_pre"})
    seed: int = field(default=0, metadata={"help": "seed for batch order and dropout"})

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("lr", "batch_size", "steps", "eval_every"):
            if not getattr(self, name) > 0:
                raise UserError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("lr", "weight_decay", "clip"):
            if not math.isfinite(getattr(self, name)):
                raise UserError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.weight_decay < 0 or self.clip < 0:
            raise UserError("weight_decay and clip must be >= 0")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class FinetuneResult:
    """What a run did: the chosen step, its dev score, and the (step, dev score, loss) history."""

    best_step: int
    best_dev: float | None
    history: list[dict]


def check_finite(where: str, *, loss: float | torch.Tensor | None = None,
                 tensors: Mapping[str, torch.Tensor] | None = None, outputs: torch.Tensor | None = None) -> None:
    """Stops a diverged run: a one-line :class:`UserError` naming ``where`` (e.g. ``"finetune step 7"``) when
    ``loss``, any of ``tensors`` or the model's ``outputs`` (e.g. logits (B, C) of a batch: finite weights can
    still give NaN outputs) is NaN or infinite. The one guard of fine-tuning, multi-task training,
    localization, the continual strategies and loading a saved model."""
    value = float(loss.detach()) if isinstance(loss, torch.Tensor) else loss
    if value is not None and not math.isfinite(value):
        raise UserError(f"{where}: the loss is {value}; training diverged (lower the learning rate)")
    for name, t in (tensors or {}).items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise UserError(f"{where}: {name} holds NaN or infinite values; training diverged "
                            f"(lower the learning rate)")
    if outputs is not None and not bool(torch.isfinite(outputs.detach()).all()):
        raise UserError(f"{where}: the model's outputs hold NaN or infinite values; training diverged "
                        f"(lower the learning rate)")


def trainable_names(model, *, freeze_embeddings: bool = True) -> list[str]:
    """Parameters that fine-tuning moves: all but input embeddings (optional) and, for prompt heads, the LM head."""
    frozen = set(model.embedding_parameter_names()) if freeze_embeddings else set()
    if model.head_kind != "linear":
        frozen |= set(model.head_parameter_names())
    pooler = {n for n, _ in model.named_parameters() if ".pooler." in n}      # unused by every head here
    return [n for n, _ in model.named_parameters() if n not in frozen | pooler]


def no_decay(name: str) -> bool:
    """Biases and LayerNorm weights get no weight decay (the paper's and BERT's convention)."""
    low = name.lower()
    return name.endswith(".bias") or "layernorm" in low or "layer_norm" in low or ".ln_" in low or "norm." in low


def make_optimizer(model, names: list[str], cfg: FinetuneConfig) -> torch.optim.Optimizer:
    params = dict(model.named_parameters())
    groups = [{"params": [params[n] for n in names if not no_decay(n)], "weight_decay": cfg.weight_decay},
              {"params": [params[n] for n in names if no_decay(n)], "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr)
    return torch.optim.AdamW(groups, lr=cfg.lr)


def batches(rows: list[dict], batch_size: int, steps: int, seed: int):
    """``steps`` mini-batches of rows, reshuffling every epoch with a seeded RNG."""
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < batch_size:
            fresh = list(range(len(rows)))
            rng.shuffle(fresh)
            order += fresh
        yield [rows[i] for i in order[:batch_size]]
        order = order[batch_size:]


def region_trainable(region: Masks, names: Sequence[str], *, whole: Sequence[str] = ()) -> dict:
    """:class:`~.freeze.ElementFreeze`'s ``trainable`` map for training only ``region`` among ``names``.

    Tensors of ``names`` with selected elements map to the region's mask, ``whole`` (e.g. task heads) to None
    (the whole tensor trains); every other tensor stays frozen.

    Raises:
        UserError: a region tensor the model lacks, or nothing left to train.
    """
    known = set(names) | set(whole)
    trainable: dict = {n: m for n, m in region.masks.items() if n in known and bool(m.any())}
    trainable.update({n: None for n in whole})
    if not trainable:
        raise UserError("nothing to train: the region selects no trainable parameter")
    return trainable


def train_(model, draws: Iterable[tuple[str, list[dict]]], cfg: FinetuneConfig, *, names: Sequence[str],
           select: Callable[[], tuple[float, Any]] | None, trainable: Mapping | None = None, desc: str,
           progress: bool = True) -> tuple[int, float | None, Any, list[dict]]:
    """The training loop of every recipe here: ``cfg.steps`` steps, dev selection, best checkpoint kept.

    Args:
        model: the classifier, trained IN PLACE and left at the best checkpoint in eval mode.
        draws: ``(task, batch of rows)`` per step, at least ``cfg.steps`` of them.
        cfg: optimizer, lr, clipping, evaluation period, seed.
        names: the parameters that train (the others get ``requires_grad=False``).
        select: ``() -> (score, details)`` on dev rows every ``eval_every`` steps and at the last one, or None
            (then the last step is kept).
        trainable: name → bool mask / None, to train only those elements of ``names``
            (:class:`~.freeze.ElementFreeze`; everything else bit-exact), or None to train ``names`` whole.
        desc: progress-bar label.

    Under torchrun (:mod:`cl_graft.distributed`) each rank trains on its slice of every global batch, gradients
    averaged by ``DistributedDataParallel``; dev selection runs on every rank (same rows, same result).

    Returns:
        ``(best step, best score, its details, history of {"step", "dev", "loss"})``.
    """
    torch.manual_seed(cfg.seed)
    params = dict(model.named_parameters())
    for n, p in params.items():
        p.requires_grad_(n in names)
    opt = make_optimizer(model, list(names), cfg)
    freeze = ElementFreeze({n: params[n] for n in names}, trainable) if trainable is not None else None
    if freeze is not None:
        freeze.begin_(opt)
    distributed.check_batch(cfg.batch_size)
    parallel = distributed.wrap(model, unused=len(model.tasks) > 1)  # DDP over torchrun's ranks, else model
    device = next(model.parameters()).device
    best: dict = {"step": 0, "dev": None, "details": None, "state": None}
    history: list[dict] = []
    model.train()
    bar = tqdm(zip(range(1, cfg.steps + 1), draws), total=cfg.steps, desc=desc, disable=not progress)
    for step, (task, batch) in bar:
        batch = distributed.shard(batch)                              # this rank's slice of the global batch
        enc = {k: v.to(device) for k, v in model.encode(batch, task).items()}
        labels = torch.tensor([r["label"] for r in batch], device=device)
        loss = torch.nn.functional.cross_entropy(parallel(**enc, task=task), labels)
        shown = distributed.all_mean_(loss.detach().clone())          # the global batch's loss, on every rank
        check_finite(f"{desc} step {step}" + ("" if task in desc else f" ({task})"), loss=shown)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if freeze is not None:
            freeze.before_update_()
        live = [params[n] for n in names if params[n].grad is not None]  # other tasks' heads get no gradient
        if cfg.clip and live:
            torch.nn.utils.clip_grad_norm_(live, cfg.clip)
        opt.step()
        if freeze is not None:
            freeze.after_update_()
        bar.set_postfix(task=task, loss=f"{shown.item():.3f}")
        if select is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
            with torch.no_grad():                                    # no dev score from NaN outputs
                check_finite(f"{desc} step {step}", outputs=model.eval()(**enc, task=task))
            score, details = select()
            history.append({"step": step, "dev": details, "loss": shown.item()})
            if best["dev"] is None or score > best["dev"]:
                best = {"step": step, "dev": score, "details": details,
                        "state": {n: params[n].detach().clone() for n in names}}
            model.train()
    if freeze is not None:
        freeze.end_(opt)
    if best["state"] is not None:
        with torch.no_grad():
            for n, v in best["state"].items():
                params[n].copy_(v)
    with torch.no_grad():                                            # the last batch again, at the kept weights
        check_finite(f"{desc} after step {cfg.steps}", tensors={n: params[n] for n in names},
                     outputs=model.eval()(**enc, task=task))
    for p in params.values():
        p.requires_grad_(True)
    model.eval()
    return best["step"] or cfg.steps, best["dev"], best["details"], history


def finetune_(model, train_rows: list[dict], dev_rows: list[dict], cfg: FinetuneConfig, *,
              task: str | None = None, region: Masks | None = None, progress: bool = True) -> FinetuneResult:
    """Fine-tune ``model`` IN PLACE on ``train_rows`` and leave it at the best-on-dev checkpoint.

    With ``region`` (a :class:`~cl_graft.regions.region.Region` or anything with ``masks``), only its elements
    and the task's linear head train (graft re-training, BitFit: see :mod:`cl_graft.regions.finetune`); every
    other element stays bit-exact.
    """
    if not train_rows:
        raise UserError("no training rows")
    task = model.resolve_task(task)
    names = trainable_names(model, freeze_embeddings=cfg.freeze_embeddings)
    trainable = None
    if region is not None:
        heads = model.task_head_names(task) if model.head_kind == "linear" else []
        trainable = region_trainable(region, [n for n in names if n not in heads], whole=heads)
        names = list(trainable)

    def select() -> tuple[float, float]:
        score = evaluate(model, dev_rows, task)[0]["score"]
        return score, score

    draws = ((task, b) for b in batches(train_rows, cfg.batch_size, cfg.steps, cfg.seed))
    step, best, _, history = train_(model, draws, cfg, names=names, select=select if dev_rows else None,
                                    trainable=trainable, desc=f"finetune {task}", progress=progress)
    return FinetuneResult(best_step=step, best_dev=best, history=history)
