"""Avalanche's Synaptic Intelligence with copied snapshots: the workaround for an Avalanche 0.6 bug on CPU.

Avalanche's ``SynapticIntelligencePlugin`` keeps the weights before each step (``syn_data["old_theta"]``) and
at the start of each experience (``ewc_data[0]``) as ``param.detach().cpu().flatten()`` assigned to a
``ParamData``. On a CPU model ``.cpu()`` returns the parameter itself and ``flatten()`` a view of it, so the
"snapshots" follow the live weights: every step's ``new_theta − old_theta`` is 0, the path integral and the
importances are exactly 0, and the penalty is 0 — SI trains exactly like Naive (on a GPU ``.cpu()`` copies and
the plugin works). :class:`CopiedSynapticIntelligence` clones both snapshots right after the parent's hooks
took them; everything else is Avalanche's (the importance, its ``clip_to`` = 0.001 ceiling, the penalty).

Use it as ``Naive(..., plugins=[CopiedSynapticIntelligence(si_lambda=..., eps=...)])``. Two settings matter
(measured on permuted digits, ``benchmarks/results/sanity.md``): ``eps`` (the damping ξ of Zenke et al. 2017)
at Avalanche's 1e-7 gives weights that barely moved huge negative importances (only the top is clipped), the
penalty turns negative and training diverges; ξ = 0.1 (the paper's order) is stable. Because every importance
is capped at 0.001, ``si_lambda`` must be ~100× the paper's c to have an effect.
"""
from __future__ import annotations

from avalanche.training.plugins import SynapticIntelligencePlugin

DAMPING = 0.1
"""The damping ξ (Avalanche's ``eps``) that keeps importances bounded (Avalanche's own 1e-7 diverges here)."""


class CopiedSynapticIntelligence(SynapticIntelligencePlugin):
    """Avalanche's ``SynapticIntelligencePlugin`` whose weight snapshots are copies, not views of the live
    parameters (see the module docstring); same arguments, ``eps`` defaulting to :data:`DAMPING`."""

    def __init__(self, *, si_lambda: float, eps: float = DAMPING, **kwargs) -> None:
        super().__init__(si_lambda=si_lambda, eps=eps, **kwargs)

    def before_training_exp(self, strategy, **kwargs) -> None:
        super().before_training_exp(strategy, **kwargs)
        _own_copies_(self.ewc_data[0])

    def before_training_iteration(self, strategy, **kwargs) -> None:
        super().before_training_iteration(strategy, **kwargs)
        _own_copies_(self.syn_data["old_theta"])


def _own_copies_(snapshots: dict) -> None:
    """Replaces each ``ParamData``'s tensor by a copy (a no-op in value; breaks the alias with the parameter)."""
    for data in snapshots.values():
        data.data = data.data.clone()
