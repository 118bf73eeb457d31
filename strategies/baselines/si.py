"""``si``: SI (Zenke et al. 2017) as Naive with the copied-snapshot SI plugin
(:mod:`cl_graft.strategies.plugins.synaptic_intelligence`: Avalanche's ``SynapticIntelligence`` learns no
importance on CPU, so it trains exactly as Naive)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..interface.entry import BuildContext, StrategyEntry
from ..interface.settings import Settings
from .common import MODEL, positive, tensor_bytes, with_model


@dataclass(frozen=True)
class SISettings(Settings):
    """``si``'s: Avalanche clips each importance at 1e-3, so a useful λ is ~100× the paper's c, and the
    damping ξ is the paper's order (Avalanche's 1e-7 diverges)."""

    si_lambda: float = field(default=100.0, metadata={"help": "SI penalty weight (tune with --tune)."})
    si_eps: float = field(default=0.1, metadata={"help": "SI damping ξ of the importance denominator."})

    def __post_init__(self) -> None:
        positive("si_lambda", self.si_lambda)
        positive("si_eps", self.si_eps)


GRID = ({"si_lambda": 1e2}, {"si_lambda": 1e3}, {"si_lambda": 1e1}, {"si_lambda": 1e4}, {"si_lambda": 1.0})
"""Small λ among the first three: the importances are capped at 1e-3."""


def build(ctx: BuildContext):
    """Naive with the copied-snapshot SI plugin."""
    from avalanche.training import Naive

    from ..plugins.synaptic_intelligence import CopiedSynapticIntelligence

    plugin = CopiedSynapticIntelligence(si_lambda=ctx.settings.si_lambda, eps=ctx.settings.si_eps)
    return Naive(**ctx.template, plugins=[*ctx.plugins, plugin])


@with_model
def kept(strategy) -> dict[str, int]:
    """SI: the parameters after the last experience, their importances, the running path integral; and the
    per-step scratch copies Avalanche keeps (old and new parameters, gradients, trajectory: 4 more × P)."""
    plugin = next(p for p in strategy.plugins if hasattr(p, "syn_data"))
    syn = plugin.syn_data
    return {"old_params": tensor_bytes(plugin.ewc_data[0]), "importances": tensor_bytes(plugin.ewc_data[1]),
            "path_integral": tensor_bytes(syn["cum_trajectory"]),
            "step_scratch": tensor_bytes([syn[k] for k in ("old_theta", "new_theta", "grad", "trajectory")])}


ENTRY = StrategyEntry(name="si", help="Avalanche's SynapticIntelligence plugin with copied weight snapshots "
                      "(path-integral importances, quadratic penalty)",
                      stores=MODEL + ", the weights after the last experience, their importances and path "
                      "integral, and Avalanche's per-step copies (4 × the weights)",
                      build=build, kept_bytes=kept, settings=SISettings, grid=GRID)
