"""Settings of a continual-learning comparison (``cl-graft run``): one recipe for every strategy.

Every strategy trains each experience with the same optimizer recipe
(:class:`~cl_graft.training.finetune.FinetuneConfig`: SGD, lr, batch size, ``steps`` optimizer steps per experience,
weight decay, clipping, frozen embeddings); the baselines' own knobs are Avalanche's defaults unless stated.
Presets (:data:`cl_graft.presets.PRESETS`, their ``continual`` sizes) size the data and the steps; costs are in
``benchmarks/results/continual.md``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from cl_graft.errors import UserError
from cl_graft.presets import Preset, get_preset
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.methods import REGION_METHODS
from cl_graft.training.finetune import FinetuneConfig


@dataclass(frozen=True)
class ContinualConfig:
    """How every strategy trains and how grafting localizes."""

    recipe: FinetuneConfig = field(metadata={"help": "optimizer recipe; steps = optimizer steps per experience"})
    localize: LocalizeConfig = field(metadata={"help": "region finding after each experience (graft)"})
    method: str = field(default="graft", metadata={"help": "region method (cl_graft.regions.methods)"})
    auto_size: bool = field(default=True, metadata={"help": "choose each task's region size on dev rows "
                                                    "(cl_graft.strategies.sizing); False: localize.sparsity"})
    reconstruct: str = field(default="experience", metadata={"help": "experience, minibatch or all"})
    eval_batch: int = field(default=64, metadata={"help": "evaluation batch size"})
    ewc_lambda: float = field(default=1e4, metadata={"help": "EWC penalty weight (tune with --tune)"})
    lwf_alpha: float = field(default=1.0, metadata={"help": "LwF distillation weight (Avalanche default)"})
    lwf_temperature: float = field(default=2.0, metadata={"help": "LwF temperature (Avalanche default)"})
    replay_mem: int = field(default=256, metadata={"help": "Replay memory size in rows"})
    packnet_prune_at: float = field(default=0.75, metadata={"help": "PackNet prunes after this share of steps"})
    packnet_keep: float | None = field(default=None, metadata={"help": "PackNet's kept share (None: even split)"})

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


def continual_setup(name: str, *, seed: int, steps: int | None = None, sparsity: float | None = None,
                    method: str | None = None, k: int | None = None) -> tuple[Preset, ContinualConfig]:
    """The named preset's data sizes (test cap and recipe of the comparison) and the comparison's settings,
    with the seed and optional overrides applied (validated). Region sizes are chosen per task
    (``auto_size``) unless ``sparsity`` fixes them."""
    data = get_preset(name, seed=seed, k=k)
    sizes = data.continual
    steps = sizes.steps if steps is None else steps
    recipe = replace(data.finetune, steps=steps, batch_size=sizes.batch_size, eval_every=steps)
    localize = replace(sizes.localize, seed=seed, **({"sparsity": sparsity} if sparsity is not None else {}))
    cfg = ContinualConfig(recipe=recipe, localize=localize, replay_mem=sizes.replay_mem, auto_size=sparsity is None,
                          **({"method": method} if method is not None else {}))
    return replace(data, eval_cap=sizes.eval_cap, finetune=recipe), cfg
