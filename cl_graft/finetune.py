"""Fine-tuning that produces θ_ft, following Panigrahi et al. (2023), App. A.

SGD by default (weight decay 1e-4 except biases and LayerNorms, gradient clipping 1.0, frozen input
embeddings, frozen LM head for prompt-based heads), AdamW as an option, evaluation on dev every
``eval_every`` steps keeping the best checkpoint, seeded batch order.
"""
from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import torch
from tqdm.auto import tqdm

from .errors import UserError
from .evaluate import evaluate

OPTIMIZERS = ("sgd", "adamw")


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
                 tensors: Mapping[str, torch.Tensor] | None = None) -> None:
    """Stops a diverged run: a one-line :class:`UserError` naming ``where`` (e.g. ``"finetune step 7"``) when
    ``loss`` or any of ``tensors`` is NaN or infinite. The one guard of fine-tuning, multi-task training,
    localization and the continual strategies."""
    value = float(loss.detach()) if isinstance(loss, torch.Tensor) else loss
    if value is not None and not math.isfinite(value):
        raise UserError(f"{where}: the loss is {value}; training diverged (lower the learning rate)")
    for name, t in (tensors or {}).items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise UserError(f"{where}: {name} holds NaN or infinite values; training diverged "
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


def finetune_(model, train_rows: list[dict], dev_rows: list[dict], cfg: FinetuneConfig, *,
              task: str | None = None, progress: bool = True) -> FinetuneResult:
    """Fine-tune ``model`` IN PLACE on ``train_rows`` and leave it at the best-on-dev checkpoint."""
    if not train_rows:
        raise UserError("no training rows")
    task = model._resolve_task(task)
    torch.manual_seed(cfg.seed)
    names = trainable_names(model, freeze_embeddings=cfg.freeze_embeddings)
    params = dict(model.named_parameters())
    for n, p in params.items():
        p.requires_grad_(n in names)
    opt = make_optimizer(model, names, cfg)
    device = next(model.parameters()).device
    best = {"step": 0, "dev": None, "state": None}
    history: list[dict] = []
    model.train()
    bar = tqdm(batches(train_rows, cfg.batch_size, cfg.steps, cfg.seed), total=cfg.steps, desc=f"finetune {task}",
               disable=not progress)
    for step, batch in enumerate(bar, start=1):
        enc = {k: v.to(device) for k, v in model.encode(batch, task).items()}
        labels = torch.tensor([r["label"] for r in batch], device=device)
        loss = torch.nn.functional.cross_entropy(model(**enc, task=task), labels)
        check_finite(f"finetune {task} step {step}", loss=loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_([params[n] for n in names], cfg.clip)
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if dev_rows and (step % cfg.eval_every == 0 or step == cfg.steps):
            dev = evaluate(model, dev_rows, task)[0]["score"]
            history.append({"step": step, "dev": dev, "loss": loss.item()})
            if best["dev"] is None or dev > best["dev"]:
                best = {"step": step, "dev": dev,
                        "state": {n: params[n].detach().clone() for n in names}}
            model.train()
    if best["state"] is not None:
        with torch.no_grad():
            for n, v in best["state"].items():
                params[n].copy_(v)
    check_finite(f"finetune {task} after step {cfg.steps}", tensors={n: params[n] for n in names})
    for p in params.values():
        p.requires_grad_(True)
    model.eval()
    return FinetuneResult(best_step=best["step"] or cfg.steps, best_dev=best["dev"], history=history)
