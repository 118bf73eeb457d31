"""Settings every strategy of a continual-learning comparison (``cl-graft run``) shares: one recipe for all.

Every strategy trains each experience with the same optimizer recipe
(:class:`~cl_graft.training.finetune.FinetuneConfig`: SGD, lr, batch size, ``steps`` optimizer steps per experience,
weight decay, clipping, frozen embeddings) and is evaluated with the same batch size. What only one strategy reads
(a penalty's weight, a memory's size, a region's size...) is that strategy's own settings class, beside its entry
(:mod:`.entry`). Presets (:data:`cl_graft.presets.PRESETS`, their ``continual`` sizes) size the data and the steps;
costs are in ``benchmarks/results/continual.md``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from cl_graft.errors import UserError
from cl_graft.presets import Preset, get_preset
from cl_graft.training.finetune import FinetuneConfig


@dataclass(frozen=True)
class ContinualConfig:
    """How every strategy trains and is evaluated."""

    recipe: FinetuneConfig = field(metadata={"help": "optimizer recipe; steps = optimizer steps per experience"})
    eval_batch: int = field(default=64, metadata={"help": "evaluation batch size"})

    def __post_init__(self) -> None:
        if self.eval_batch < 1:
            raise UserError(f"eval_batch must be >= 1, got {self.eval_batch}")

    def to_json(self) -> dict:
        return {**asdict(self), "recipe": self.recipe.to_json()}


def continual_setup(name: str, *, seed: int, steps: int | None = None, k: int | None = None,
                    eval_cap: int | None = None) -> tuple[Preset, ContinualConfig]:
    """The named preset's data sizes (test cap and recipe of the comparison) and the shared settings, with the
    seed and optional overrides (``steps``, ``k``, ``eval_cap``: test rows per task; None = the preset's) applied
    (validated). Each strategy's own settings start from
    ``Settings.from_preset`` of the returned preset (:func:`..comparison.registry.strategy_settings`)."""
    data = get_preset(name, seed=seed, k=k)
    sizes = data.continual
    steps = sizes.steps if steps is None else steps
    recipe = replace(data.finetune, steps=steps, batch_size=sizes.batch_size, eval_every=steps)
    if eval_cap is not None and eval_cap < 1:
        raise UserError(f"--eval-cap must be >= 1, got {eval_cap}")
    return (replace(data, eval_cap=sizes.eval_cap if eval_cap is None else eval_cap, finetune=recipe),
            ContinualConfig(recipe=recipe))
