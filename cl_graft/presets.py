"""Named run sizes: how much data and how many steps. Costs measured on 2 CPU cores with MiniLM (README).

- ``smoke``: a plumbing check, about a minute per task; accuracy is not meaningful.
- ``quick``: a few minutes per task on a CPU with meaningful accuracy (512 examples per class).
- ``paper``: the paper's 4096 examples per class and 1000 SGD steps; meant for a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UserError
from .finetune import FinetuneConfig


@dataclass(frozen=True)
class Preset:
    """Data sizes (per class) and the fine-tuning recipe of one run size."""

    name: str
    k: int                       # training examples per class
    dev_k: int                   # dev examples per class, drawn from the rest of train
    eval_cap: int | None         # at most this many test rows (deterministic subsample); None = all
    max_length: int              # tokens per input
    finetune: FinetuneConfig


PRESETS: dict[str, Preset] = {
    "smoke": Preset("smoke", k=16, dev_k=16, eval_cap=200, max_length=64,
                    finetune=FinetuneConfig(lr=0.05, batch_size=8, steps=30, eval_every=15)),
    "quick": Preset("quick", k=512, dev_k=64, eval_cap=1000, max_length=64,
                    finetune=FinetuneConfig(lr=0.05, batch_size=16, steps=400, eval_every=100)),
    "paper": Preset("paper", k=4096, dev_k=512, eval_cap=None, max_length=128,
                    finetune=FinetuneConfig(lr=0.05, batch_size=16, steps=1000, eval_every=100)),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
