"""Settings of a continual-learning comparison (``cl-graft run``): one recipe for every strategy.

Every strategy trains each experience with the same optimizer recipe
(:class:`~cl_graft.finetune.FinetuneConfig`: SGD, lr, batch size, ``steps`` optimizer steps per experience,
weight decay, clipping, frozen embeddings); the baselines' own knobs are Avalanche's defaults unless stated.
Presets size the data and the steps. Measured with MiniLM on a 2-core CPU, ``quick`` on qnli → agnews → sst2:
graft 529 s, naive 460 s (graft + naive 16.7 minutes; 14 minutes on a faster machine of the same kind); ``smoke``:
under 2 minutes. ``quick`` regions hold 5% of the graftable parameters per task: over three seeds that kept 99% of
single-task accuracy against 97% at 1% (benchmarks/results/continual.md); pass a smaller sparsity for long streams.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from cl_graft.errors import UserError
from cl_graft.finetune import FinetuneConfig
from cl_graft.localize import LocalizeConfig
from cl_graft.presets import PRESETS, Preset
from cl_graft.region_methods import REGION_METHODS


@dataclass(frozen=True)
class ContinualConfig:
    """How every strategy trains and how grafting localizes."""

    recipe: FinetuneConfig = field(metadata={"help": "optimizer recipe; steps = optimizer steps per experience"})
    localize: LocalizeConfig = field(metadata={"help": "region finding after each experience (graft)"})
    method: str = field(default="graft", metadata={"help": "region method (cl_graft.region_methods)"})
    reconstruct: str = field(default="experience", metadata={"help": "experience, minibatch or all"})
    eval_batch: int = field(default=64, metadata={"help": "evaluation batch size"})
    ewc_lambda: float = field(default=1e4, metadata={"help": "EWC penalty weight (untuned)"})
    lwf_alpha: float = field(default=1.0, metadata={"help": "LwF distillation weight (Avalanche default)"})
    lwf_temperature: float = field(default=2.0, metadata={"help": "LwF temperature (Avalanche default)"})
    replay_mem: int = field(default=256, metadata={"help": "Replay memory size in rows"})
    packnet_prune_at: float = field(default=0.75, metadata={"help": "PackNet prunes after this share of steps"})

    def __post_init__(self) -> None:
        if self.method not in REGION_METHODS:
            raise UserError(f"unknown region method {self.method!r}; choose from {', '.join(REGION_METHODS)}")
        if self.reconstruct not in ("experience", "minibatch", "all"):
            raise UserError(f"reconstruct must be experience, minibatch or all, got {self.reconstruct!r}")
        if self.eval_batch < 1 or self.replay_mem < 1:
            raise UserError("eval_batch and replay_mem must be >= 1")

    def to_json(self) -> dict:
        return {**asdict(self), "recipe": self.recipe.to_json(), "localize": self.localize.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> ContinualConfig:
        d = dict(d)
        return cls(recipe=FinetuneConfig(**d.pop("recipe")), localize=LocalizeConfig.from_json(d.pop("localize")),
                   **d)


@dataclass(frozen=True)
class ContinualPreset:
    """Data sizes (a :class:`~cl_graft.presets.Preset` with its own test cap) and the comparison's settings."""

    data: Preset
    config: ContinualConfig


def _preset(name: str, *, eval_cap: int | None, steps: int, batch_size: int, localize: LocalizeConfig,
            replay_mem: int) -> ContinualPreset:
    data = replace(PRESETS[name], eval_cap=eval_cap)
    recipe = replace(data.finetune, steps=steps, batch_size=batch_size, eval_every=steps)
    return ContinualPreset(data, ContinualConfig(recipe=recipe, localize=localize, replay_mem=replay_mem))


CONTINUAL_PRESETS: dict[str, ContinualPreset] = {
    "smoke": _preset("smoke", eval_cap=64, steps=10, batch_size=8, replay_mem=32, localize=LocalizeConfig(
        sparsity=0.01, steps=2, batch_size=8, n_batches=1, select_rows=16, eval_every=2)),
    "quick": _preset("quick", eval_cap=500, steps=200, batch_size=16, replay_mem=256, localize=LocalizeConfig(
        sparsity=0.05, steps=8, lr=2.0, batch_size=16, n_batches=2, select_rows=64, eval_every=4)),
    "paper": _preset("paper", eval_cap=None, steps=1000, batch_size=16, replay_mem=1024, localize=LocalizeConfig(
        sparsity=0.01, steps=20, batch_size=16, n_batches=8, select_rows=256, eval_every=2)),
}


def continual_preset(name: str, *, seed: int, steps: int | None = None, sparsity: float | None = None,
                     method: str | None = None) -> ContinualPreset:
    """The named preset with the seed and optional overrides applied (validated)."""
    if name not in CONTINUAL_PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(CONTINUAL_PRESETS)}")
    p = CONTINUAL_PRESETS[name]
    cfg = p.config
    recipe = replace(cfg.recipe, seed=seed,
                     **({"steps": steps, "eval_every": steps} if steps is not None else {}))
    localize = replace(cfg.localize, seed=seed, **({"sparsity": sparsity} if sparsity is not None else {}))
    cfg = replace(cfg, recipe=recipe, localize=localize, **({"method": method} if method is not None else {}))
    return ContinualPreset(replace(p.data, finetune=recipe), cfg)
