"""``agem``: Avalanche's A-GEM (Chaudhry et al. 2019): one averaged memory gradient constrains each step."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..interface.entry import BuildContext, StrategyEntry
from ..interface.settings import Settings
from .common import GEM_PATTERNS_HELP, MODEL, plugin_of, positive, rows_bytes, tensor_bytes, with_model


@dataclass(frozen=True)
class AGEMSettings(Settings):
    """``agem``'s."""

    gem_patterns: int = field(default=32, metadata={"help": GEM_PATTERNS_HELP})
    agem_sample: int = field(default=256, metadata={
        "help": "A-GEM: memory rows per reference gradient (split evenly over the experiences kept; at least "
                "one per experience)."})

    def __post_init__(self) -> None:
        positive("gem_patterns", self.gem_patterns)
        positive("agem_sample", self.agem_sample)


GRID = ({"agem_sample": 64}, {"agem_sample": 256}, {"agem_sample": 1024}, {"agem_sample": 32},
        {"agem_sample": 512})


def python_seed():
    """A plugin that seeds Python's ``random`` from torch's seed before each training experience: A-GEM
    samples its memory with ``random.shuffle``, and the runner seeds only torch (per experience), so without
    it a run does not repeat (made on first use: Avalanche is imported here)."""
    import random

    import torch
    from avalanche.core import SupervisedPlugin

    class PythonSeed(SupervisedPlugin, supports_distributed=True):
        def before_training_exp(self, strategy, **kwargs) -> None:
            random.seed(torch.initial_seed())

    return PythonSeed()


def build(ctx: BuildContext):
    """A-GEM; its reference sample has at least one row of every experience (Avalanche divides the sample by
    the number of experiences kept and fails on 0)."""
    from avalanche.training import AGEM

    sample = max(ctx.settings.agem_sample, len(ctx.stream.tasks))
    return AGEM(**ctx.template, plugins=[*ctx.plugins, python_seed()],
                patterns_per_exp=ctx.settings.gem_patterns, sample_size=sample)


@with_model
def kept(strategy) -> dict[str, int]:
    """A-GEM: ``gem_patterns`` rows per experience and the reference gradient (P floats)."""
    plugin = plugin_of(strategy, "AGEMPlugin")
    return {"memory": sum(rows_bytes(b) for b in plugin.buffers),
            "reference_gradient": tensor_bytes(plugin.reference_gradients)}


ENTRY = StrategyEntry(name="agem", help="Avalanche AGEM (one averaged memory gradient constrains each step)",
                      stores=MODEL + ", gem_patterns rows per experience and a reference gradient",
                      build=build, kept_bytes=kept, settings=AGEMSettings, grid=GRID)
