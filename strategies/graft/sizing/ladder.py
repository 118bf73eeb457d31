"""One task's size search over the rungs of a :class:`~.rules.RegionSize` (steps 1–3 of the package docstring):
the held-out passes, the evidence of each rung against the trained model, and the record of what was chosen.

:class:`~.finder.SizedFinder` runs it after an experience trained; :mod:`.retrain` runs it part-way through
training and keeps its reference to judge the region retrained after it.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from statistics import NormalDist

import torch
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.data import RegionData
from cl_graft.regions.problem import Problem
from cl_graft.regions.region import Region
from cl_graft.training.models import clone_model

from .evidence import Outputs, calibrate, chance_level, loss_evidence, settled, temperature, wilson_low, z_value
from .precision import products, search_dtype

log = logging.getLogger(__name__)


def has_dev(data: RegionData) -> bool:
    """Whether ``data`` holds held-out rows (ExperienceData's ``splits["dev"]``, TextRegionData's ``dev``)."""
    splits = getattr(data, "splits", None)
    if isinstance(splits, dict):
        return splits.get("dev") is not None and len(splits["dev"]) > 0
    return bool(getattr(data, "dev", None))


def allowed(prob: Problem, allowance: float) -> Tensor:
    """The candidates a task may take: in every tensor, the ⌊allowance · free⌋ free elements of largest |Δ|,
    ``(N,)`` bool."""
    out = torch.zeros_like(prob.cand)
    for a, z in prob.spans:
        cand = prob.cand[a:z]
        k = math.floor(allowance * int(torch.count_nonzero(cand)) + 1e-9)
        if k > 0:
            scores = torch.where(cand, prob.delta[a:z].abs(), torch.tensor(-math.inf, device=prob.device))
            out[a:z][scores.topk(k).indices] = True
    return out


def accuracy(hits: Tensor) -> float:
    """The share of ``hits`` ``(n,)`` bool that are right (0.0 for none)."""
    return int(hits.sum()) / len(hits) if len(hits) else 0.0


class Ladder:
    """The rungs of one task: θ_pre (``pre``), the trained model (``ft``) and the task's ``data``.

    Building it scores the trained model on the held-out rows (its reference, temperature-scaled on their labels)
    and on a sample of training inputs; :meth:`search` then tries the rungs top down. ``ft`` is not modified
    (rungs are grafted onto a private copy).

    Args:
        region_size: the :class:`~.rules.RegionSize` rules.
        cfg: the finder's :class:`~cl_graft.regions.config.LocalizeConfig` (its seed picks the rows).
        allowance: share of each tensor's free elements the task may take.
        names: graftable tensors; candidates: the free elements (None: all).
    """

    @torch.no_grad()
    def __init__(self, region_size, cfg, allowance: float, pre: nn.Module, ft: nn.Module, data: RegionData, *,
                 names: list[str], candidates: Region | None) -> None:
        self.t0 = time.perf_counter()
        self.region_size, self.cfg, self.allowance, self.data = region_size, cfg, allowance, data
        prob = self.prob = Problem.build(pre, ft, replace(cfg, region_elements=1), names=names, candidates=candidates)
        self.free_elements = int(torch.count_nonzero(prob.cand))
        prob.cand = allowed(prob, allowance)
        self.cap_elements = int(torch.count_nonzero(prob.cand))
        if self.cap_elements < 1:
            raise UserError(f"no graftable element is left for this task: its allowance, {allowance:.3g} of each "
                            f"tensor's free elements ({self.free_elements} free in all), selects none; plan for "
                            f"fewer tasks (--expected-tasks, --reserve; RegionSize expected_tasks=, reserve=) or "
                            f"give a larger model")
        self.split = "dev" if has_dev(data) else "train"
        self.device = prob.device
        self.dtype = search_dtype(region_size.precision, self.device, elements=prob.numel)
        self.work = clone_model(ft).eval()
        self.theta, _ = prob.bind(self.work)                                # (N,) buffer at θ_ft
        self.labels = data.labels(self.split, limit=region_size.rows, seed=cfg.seed)
        reference, ref_more = self._first_outputs()
        self.scale = temperature(reference.probs, self.labels)              # θ_ft calibrated on held-out labels
        self.reference = Outputs(calibrate(reference.probs, self.scale), self.labels)
        self.ref_more = calibrate(ref_more, self.scale) if ref_more is not None else None
        self.z = z_value(region_size.confidence)
        self.rungs = list(reversed(region_size.rungs(prob.numel, self.cap_elements)))       # top down: the cap first
        self.tried: list[dict] = []
        self.search_seconds = 0.0
        self._ranked: Tensor | None = None          # the largest rung's elements, best first (see base_mask)

    def base_mask(self, k: int) -> Tensor:
        """The rung of ``k`` elements, ``(N,)`` bool: the problem's top-k |Δ| candidates (``Problem.base_mask``,
        ties to the lower index). Rungs are nested, so the largest one asked for is ranked once (|Δ| descending,
        index ascending) and a smaller one is its first ``k`` elements, without another top-k over N."""
        if self._ranked is None or k > len(self._ranked):
            idx = self.prob.base_mask(k).nonzero().squeeze(1)                    # (k,) ascending index
            scores = self.prob.delta[idx].abs().to(torch.float32)
            self._ranked = idx[torch.sort(scores, descending=True, stable=True).indices]
        mask = torch.zeros_like(self.prob.cand)
        mask[self._ranked[:k]] = True
        return mask

    def _first_outputs(self) -> tuple[Outputs, Tensor | None]:
        """The trained model's outputs (:meth:`outputs`); with ``precision="auto"``, a model that fails with
        bfloat16 products (e.g. Avalanche's ``MultiHeadClassifier`` given a tensor of task labels writes them into
        a float32 tensor) makes every pass of this task float32 instead."""
        try:
            return self.outputs()
        except RuntimeError as err:
            if self.dtype == torch.float32 or self.region_size.precision != "auto":
                raise
            log.info("the model fails with bfloat16 products (%s); this task's size search runs in float32",
                     str(err).splitlines()[0])
            self.dtype = torch.float32
            return self.outputs()

    @torch.no_grad()
    def outputs(self, model: nn.Module | None = None, *, more: bool = True) -> tuple[Outputs, Tensor | None]:
        """``model``'s (default: the grafted copy's) probabilities on the held-out rows and, with ``more`` and
        when those are ``valid`` rows, on the sample of training inputs ``(m, C)`` (labels unread; else None); the
        same rows each time. ``model``'s train/eval mode is kept."""
        held = Outputs(self._probabilities(model, self.split), self.labels)
        return held, self._probabilities(model, "train") if more and self.split == "dev" else None

    def _probabilities(self, model: nn.Module | None, split: str) -> Tensor:
        """``model``'s (default: the grafted copy's) probabilities on the split's rows, ``(n, C)``."""
        model = self.work if model is None else model
        was_training = model.training
        model.eval()
        with products(self.dtype, self.device):
            probs = self.data.probabilities(model, split, limit=self.region_size.rows, seed=self.cfg.seed)
        model.train(was_training)
        return probs

    def graft_(self, mask: Tensor) -> None:
        """Grafts the ``(N,)`` bool ``mask`` of Δ onto θ_pre in the private copy."""
        self.theta.copy_(torch.where(mask, self.prob.ft_flat, self.prob.pre_flat))

    def evidence(self, out: Outputs, more: Tensor | None) -> dict:
        """:func:`~.evidence.loss_evidence` of outputs against the trained model's (on the training inputs too
        when ``more`` holds them)."""
        return loss_evidence(self.reference, out, z=self.z, tolerance=self.region_size.tolerance,
                             ref_more=self.ref_more if more is not None else None, graft_more=more)

    @torch.no_grad()
    def trial(self, k: int, *, settle: bool = True) -> dict:
        """One pass at rung ``k`` (the top-k |Δ| candidates): the held-out rows, then the training inputs, unless
        (with ``settle``) the held-out rows alone decide whether it is vouched for (:func:`~.evidence.settled`:
        the same answer as with every row; the record's ``settled`` is True then, and the beliefs' figures that
        need the training inputs are None)."""
        mask = self.base_mask(k)                                            # (N,) top-k |Δ| among candidates
        self.graft_(mask)
        out, _ = self.outputs(more=False)
        more_rows = len(self.ref_more) if self.ref_more is not None else 0
        known = settled(self.reference, out, z=self.z, tolerance=self.region_size.tolerance,
                        more_rows=more_rows) if settle and more_rows else None
        if known is None:
            more = self._probabilities(None, "train") if more_rows else None
            evidence = {**self.evidence(out, more), "settled": False}
        else:
            more, evidence = None, self.evidence(out, None)
            evidence.update(vouched=known, settled=True, beliefs_bound=None, beliefs=None, corrected=None,
                            bound=evidence["hits_bound"] if known else None)
        self.tried.append({"elements": k, "share": k / self.prob.numel, "mask": mask, "out": out, "more": more,
                           **evidence})
        return self.tried[-1]

    def search(self) -> dict:
        """The chosen rung (a :meth:`trial` record): the smallest vouched for, going down from a rung below the
        cap until one is not; else the cap (scored only then)."""
        for k in self.rungs[1:]:                                            # the cap needs no evidence
            if not self.trial(k)["vouched"]:
                break
        passed = [r for r in self.tried if r["vouched"]]
        chosen = passed[-1] if passed else self.trial(self.rungs[0], settle=False)
        self.search_seconds = time.perf_counter() - self.t0
        return chosen

    def below(self, chosen: dict, steps: int) -> int:
        """The rung ``steps`` rungs below ``chosen`` (the smallest rung at most), in elements."""
        up = self.rungs[::-1]                                               # increasing
        return up[max(0, up.index(chosen["elements"]) - steps)]

    def region(self, mask: Tensor, *, task: str | None, ft: nn.Module, **extra) -> Region:
        """The top-|Δ| Region of ``mask`` ``(N,)``."""
        elements = int(torch.count_nonzero(mask))
        return self.prob.region(mask, method="topk", cfg=replace(self.cfg, region_elements=elements), task=task, ft=ft,
                                **extra)

    def record(self, elements: int, chosen: dict, out: Outputs, more: Tensor | None, **extra) -> dict:
        """The ``meta["sizing"]`` record of a region of ``elements`` elements at rung ``chosen`` whose held-out
        outputs are ``out`` / ``more`` (see the package docstring); ``extra`` joins it."""
        same = out is chosen["out"] and more is chosen["more"]               # the rung's own outputs
        evidence = {k: chosen[k] for k in ("loss", "bound")} if same else self.evidence(out, more)
        chance = chance_level(self.data.labels("train", limit=self.region_size.rows, seed=self.cfg.seed))
        score_low = wilson_low(out.hits, NormalDist().inv_cdf(self.region_size.confidence))
        ref_acc = accuracy(self.reference.hits)
        numel = self.prob.numel
        return {
            "share": elements / numel, "elements": elements, "loss": evidence["loss"], "bound": evidence["bound"],
            "kept": accuracy(out.hits) / ref_acc if ref_acc else 1.0, "score": accuracy(out.hits),
            "score_low": score_low, "chance": chance, "above_chance": score_low > chance, "reference": ref_acc,
            "temperature": self.scale, "precision": str(self.dtype).removeprefix("torch."),
            "tolerance": self.region_size.tolerance, "confidence": self.region_size.confidence,
            "met": evidence["loss"] <= self.region_size.tolerance + 1e-9, "allowance": self.allowance,
            "cap_share": self.cap_elements / numel, "below_cap": chosen["elements"] != self.rungs[0],
            "free_before": self.free_elements / numel, **extra, "validation": self.split, "rows": len(self.labels),
            "rungs": [{k: r[k] for k in ("share", "loss", "hits_bound", "beliefs_bound", "beliefs", "corrected",
                                         "disagree", "vouched", "settled")} for r in self.tried],
            "search_seconds": round(self.search_seconds, 3), "seconds": round(time.perf_counter() - self.t0, 3)}
