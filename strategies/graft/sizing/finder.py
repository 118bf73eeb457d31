"""The sized finder (:class:`SizedFinder`): steps 3–4 of the size search (package docstring) for one task after it
trained: the ladder chooses the rung, the region finder runs once at that size from the rung's region, and its region
is kept where it scores higher on the held-out rows (with ``RegionSize(refine=False)`` the rung's top-|Δ| region);
the size record goes in ``meta["sizing"]``.

The finder runs without selection passes of its own (``eval_every=0``: its region after the last step): the rung's
region was already scored on the held-out rows, so one pass of the finder's region there decides, where the finder
used to score both regions again on training and dev rows of its own first (the quick preset: two passes of 128 rows
per task saved; a preset that selects every few steps saves more).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.data import RegionData
from cl_graft.regions.problem import Problem
from cl_graft.regions.region import Region

from ..finders import LocalizeFinder
from .ladder import Ladder, accuracy
from .precision import products
from .rules import RegionSize


@dataclass(frozen=True)
class SizedFinder:
    """A region finder that chooses each region's size (a :class:`~..finders.RegionFinder`).

    Args:
        finder: the finder run at the chosen size; it must have a ``config``
            (:class:`~cl_graft.regions.config.LocalizeConfig`, whose ``region_elements`` is set per task). Default:
            :class:`~..finders.LocalizeFinder` (the learned region).
        region_size: the size search's rules.
        allowance: share of each tensor's free elements this call may select (set per task by the plugin from
            :meth:`RegionSize.allowance`); 1.0 = every candidate.
    """

    finder: object = field(default_factory=LocalizeFinder)
    region_size: RegionSize = field(default_factory=RegionSize)
    allowance: float = 1.0

    def __post_init__(self) -> None:
        if getattr(self.finder, "config", None) is None:
            raise UserError("automatic region size needs a finder with a LocalizeConfig (.config)")

    @property
    def config(self):
        return self.finder.config

    def to_json(self) -> dict:
        inner = self.finder.to_json() if hasattr(self.finder, "to_json") else {"finder": type(self.finder).__name__}
        return {"region_size": self.region_size.to_json(), **inner}

    @torch.no_grad()
    def __call__(self, pre: nn.Module, ft: nn.Module, data: RegionData, *, names: list[str],
                 candidates: Region | None) -> Region:
        cfg = self.finder.config
        ladder = Ladder(self.region_size, cfg, self.allowance, pre, ft, data, names=names, candidates=candidates)
        prob = ladder.prob
        chosen = ladder.search()
        if not self.region_size.refine:                                      # the rung's top-|Δ| region
            region = ladder.region(chosen["mask"], task=data.task, ft=ft)
            region.meta["sizing"] = ladder.record(region.size, chosen, chosen["out"], chosen["more"])
            return region
        inner = replace(self.finder, config=replace(cfg, region_elements=chosen["elements"], eval_every=0))
        with torch.enable_grad(), products(ladder.dtype, ladder.device):
            region = inner(pre, ft, data, names=names, candidates=_unflatten(prob, prob.cand))
        flat = torch.cat([region.masks[n].reshape(-1) for n in prob.names]).to(prob.device)
        same = torch.equal(flat, chosen["mask"])                             # the finder kept the rung's region
        out, more, gain = chosen["out"], chosen["more"], 0.0
        if not same:                                                         # one more pass: the finder's region
            ladder.graft_(flat)
            found, _ = ladder.outputs(more=False)                            # the choice reads held-out hits only
            gain = accuracy(found.hits) - accuracy(out.hits)                 # against the rung's region
            if gain > 0:
                out, more = found, None
            else:                                                            # the rung's region scored as high
                region = ladder.region(chosen["mask"], task=data.task, ft=ft, refined_score=accuracy(out.hits))
        region.meta["sizing"] = ladder.record(region.size, chosen, out, more, refined_gain=gain, refined_same=same)
        return region


def _unflatten(prob: Problem, flat: Tensor) -> Region:
    """The region of a flat ``(N,)`` bool mask over ``prob``'s tensors."""
    flat = flat.cpu()
    return Region.adopt({n: flat[a:z].reshape(prob.shapes[n]).clone() for n, (a, z) in zip(prob.names, prob.spans)},
                        {"method": "allowance"})


