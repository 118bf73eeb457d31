"""``gem``: Avalanche's GEM (Lopez-Paz & Ranzato 2017): each step's gradient projected so that no experience's
memory loss rises. It needs the ``quadprog`` solver (``pip install -e ".[baselines]"``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, StrategyEntry
from ..interface.settings import Settings
from .common import (
    GEM_PATTERNS_HELP,
    MODEL,
    plugin_of,
    positive,
    stock,
    tensor_bytes,
    with_model,
)


@dataclass(frozen=True)
class GEMSettings(Settings):
    """``gem``'s."""

    gem_patterns: int = field(default=32, metadata={"help": GEM_PATTERNS_HELP})
    gem_strength: float = field(default=0.5, metadata={
        "help": "GEM's memory strength γ (offset of the projected gradient towards backward transfer)."})

    def __post_init__(self) -> None:
        positive("gem_patterns", self.gem_patterns)
        if self.gem_strength < 0:
            raise UserError(f"gem_strength must be >= 0, got {self.gem_strength}")


GRID = ({"gem_strength": 0.0}, {"gem_strength": 0.5}, {"gem_strength": 1.0}, {"gem_strength": 0.25},
        {"gem_strength": 2.0})


def build(ctx: BuildContext):
    """GEM, after checking that its solver is installed."""
    try:
        import quadprog  # noqa: F401
    except ImportError:
        raise UserError('gem needs the quadprog solver: pip install -e ".[baselines]"') from None
    return stock("GEM", patterns_per_exp="gem_patterns", memory_strength="gem_strength")(ctx)


@with_model
def kept(strategy) -> dict[str, int]:
    """GEM: ``gem_patterns`` rows per experience and the gradient of each experience's memory (E × P
    floats)."""
    plugin = plugin_of(strategy, "GEMPlugin")
    return {"memory": tensor_bytes(plugin.memory_x), "gradients": tensor_bytes(plugin.G)}


ENTRY = StrategyEntry(
    name="gem", help="Avalanche GEM (each step's gradient projected so that no experience's memory loss "
    "rises)",
    stores=MODEL + ", gem_patterns rows per experience and one gradient per experience",
    build=build, kept_bytes=kept, settings=GEMSettings, grid=GRID)
