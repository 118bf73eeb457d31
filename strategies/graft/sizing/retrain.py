"""Retraining inside a small region in the last steps of an experience (an automatic size with ``retrain`` > 0).

Top-|Δ| grafts of small regions lose part of what the task learned (MiniLM, quick preset: 1% of the graftable
elements scored 78.6 against the fine-tuned model's 80.8, mean over sst2, qnli, agnews and 3 seeds,
benchmarks/results/retrain_probe/retrain_seeds.md), so the size search (:mod:`cl_graft.strategies.graft.sizing`)
keeps larger ones.
Sparse fine-tuning is reported to recover it (Ansell et al. 2022, LT-SFT, https://arxiv.org/abs/2110.07560:
train every element, keep those that moved most, put the rest back to θ_pre, train only those). Done inside the
experience's own step budget, a task trains as many steps as with every other strategy:

1. **Switch.** After step s = T − ⌈``retrain`` · T⌉ of the experience's T planned optimizer steps
   (:func:`planned_steps`), the size search runs on the model as it is (f₁, trained on every free element):
   :class:`~.ladder.Ladder` chooses the rung k₁ its held-out rows vouch for (else the cap), as after training.
2. **Retrain.** The region retrained is the top-|Δ| region ``shrink`` rungs below k₁ (about a fifth of it by
   default; the smallest rung at least): every other free element goes back to θ_pre, and the remaining steps train
   that region and the task's head only (the optimizer's state starts anew, as at every freeze).
3. **Choice.** At the end, two candidates are scored on the same held-out rows: g₂, the retrained region, and g₁,
   f₁ grafted at k₁ (scored in step 1). g₂ is kept when its held-out accuracy is at least g₁'s; else f₁'s values
   are put back and grafted at k₁, which is what the search would have given at step s. This is selection between
   two models on held-out rows, as early stopping selects a checkpoint; it assumes the held-out rows are drawn
   like the test rows, and it cannot make the task worse than g₁ by more than the noise of that comparison.

The retrained region's record is the search's (``meta["sizing"]``, the evidence against f₁) with a ``retrain``
entry: the step of the switch, the steps retrained, the rung k₁ and its share, both candidates' held-out accuracy
and ``kept`` (whether g₂ was). When training stops before step s (early stopping, or steps that cannot be
planned), nothing is retrained and the search runs after training, as with ``retrain=0``.

Measured at ``retrain=0.25``, it is not the default: on five digit streams trained from scratch it halved the
median size but lost 0.9–6.0 points on three of them (paired over 3 seeds, benchmarks/results/retrain_ab/); on the
text stream it kept 97.7% of single-task fine-tuning at a median 2% against 98.3% at 5% without it
(benchmarks/results/text_size/text_retrain/). Where g₂ is not kept the task has lost its last steps: g₁ is f₁'s graft.
"""
from __future__ import annotations

import math
import time

import torch
from torch import Tensor

from cl_graft.regions.data import RegionData
from cl_graft.regions.region import Region

from ..owner_map import OwnerMap
from ..region_search import start_model
from ..targets import GraftTarget
from .finder import SizedFinder
from .ladder import Ladder, accuracy


def planned_steps(strategy) -> int | None:
    """The optimizer steps an Avalanche template will take on its current experience: ``train_epochs`` × the
    batches of its dataloader, or fewer where a plugin says it stops the experience earlier (an int
    ``step_limit`` attribute, as cl-graft's ``StepLimit`` has); None when the dataloader has no length."""
    try:
        steps = len(strategy.dataloader) * int(strategy.train_epochs)
    except TypeError:
        return None
    limits = [p.step_limit for p in getattr(strategy, "plugins", []) if isinstance(getattr(p, "step_limit", None), int)]
    return min([steps, *limits])


class RegionRetrain:
    """Steps 1–3 of the module docstring for one experience of ``steps`` planned optimizer steps.

    Args:
        finder: the experience's sized finder (its allowance set); ``finder.region_size.retrain`` and ``.shrink``
            apply.
        steps: the experience's planned steps (:func:`planned_steps`); None: no switch.
    """

    def __init__(self, finder: SizedFinder, steps: int | None) -> None:
        self.finder = finder
        share = finder.region_size.retrain
        self.at = steps - math.ceil(share * steps) if steps and share > 0 else None
        self.at = self.at if self.at is not None and 0 < self.at < steps else None
        self.steps = steps
        self.done = 0
        self.seconds = 0.0
        self.ladder: Ladder | None = None               # set at the switch, with:
        self.chosen: dict = {}                          # the vouched rung's trial record (k₁)
        self.mask: Tensor | None = None                 # (N,) bool, the retrained region
        self.heads: dict[str, Tensor] = {}              # the task's head at the switch (f₁'s)
        self.task: str | None = None

    @property
    def switched(self) -> bool:
        return self.ladder is not None

    def tick(self) -> bool:
        """Counts one optimizer step; True right after step s (time to :meth:`switch_`)."""
        self.done += 1
        return self.done == self.at

    @torch.no_grad()
    def switch_(self, target: GraftTarget, owners: OwnerMap, free: Region, data: RegionData, label: int,
                task: str) -> Region:
        """Steps 1–2: grafts ``target``'s model IN PLACE (free elements outside the retrained region back to
        θ_pre) and returns that region, which alone (with the task's head) trains from now on."""
        t0 = time.perf_counter()
        root, was_training = target.root, target.model.training
        pre = start_model(root, owners, free)
        ladder = Ladder(self.finder.region_size, self.finder.config, self.finder.allowance, pre, root, data,
                        names=owners.names, candidates=free)
        self.chosen = ladder.search()
        self.mask = ladder.base_mask(ladder.below(self.chosen, self.finder.region_size.shrink))   # (N,) bool
        params = dict(root.named_parameters())
        self.heads = {n: params[n].detach().clone() for n in target.heads(label)}
        self.ladder, self.task = ladder, task
        self._write_(root, self.mask)
        target.model.train(was_training)
        self.seconds += time.perf_counter() - t0
        return ladder.region(self.mask, task=task, ft=root)

    @torch.no_grad()
    def finish_(self, target: GraftTarget) -> Region:
        """Step 3: the region the task keeps, with its record; ``target``'s model holds its values (IN PLACE)."""
        t0 = time.perf_counter()
        ladder, chosen, root = self.ladder, self.chosen, target.root
        out, _ = ladder.outputs(root, more=False)                             # g₂ on the held-out rows
        score, fallback = accuracy(out.hits), accuracy(chosen["out"].hits)
        kept = score >= fallback
        record = {"at_step": self.at, "steps": self.steps - self.at, "rung_share": chosen["share"],
                  "score": score, "fallback_score": fallback, "kept": kept}
        if kept:
            mask, more = self.mask, None
        else:                                                                 # f₁ grafted at k₁
            mask, out, more = chosen["mask"], chosen["out"], chosen["more"]
            self._write_(root, mask)
            params = dict(root.named_parameters())
            for n, value in self.heads.items():
                params[n].copy_(value)
        self.seconds += time.perf_counter() - t0
        region = ladder.region(mask, task=self.task, ft=root)
        region.meta["sizing"] = ladder.record(int(mask.sum()), chosen, out, more, retrain=record)
        region.meta["sizing"].update(below_cap=int(mask.sum()) < ladder.rungs[0], seconds=round(self.seconds, 3))
        return region

    def _write_(self, root: torch.nn.Module, mask: Tensor) -> None:
        """Sets ``root``'s graftable tensors to f₁ grafted with ``mask`` onto θ_pre(t) (IN PLACE)."""
        prob = self.ladder.prob
        params = dict(root.named_parameters())
        flat = torch.where(mask, prob.ft_flat, prob.pre_flat)                 # (N,)
        for n, (a, z) in zip(prob.names, prob.spans):
            params[n].copy_(flat[a:z].view(prob.shapes[n]).to(params[n].device))
