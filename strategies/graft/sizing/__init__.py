"""The size search: each task's region size, chosen on its held-out rows, inside the task's allowance.

Panigrahi et al. 2023 (§5.2, https://arxiv.org/abs/2302.06600) fix one region size for every task. A good size
depends on the model and the task: about 0.1% of a pre-trained text encoder holds a task's skill, while a model
trained from its random initialisation (θ_pre = the initialisation) needs a few percent, and a fixed size that
is too small loses accuracy while one that is too large runs out of free elements on a long stream. So by default
each task gets its own size, chosen on held-out rows after it trained (steps 1–5 below). With ``retrain`` > 0 (not
the default) the search runs part-way through training instead, and a smaller region is retrained in the last steps
and kept where it scores as well (:mod:`.retrain`; steps 1–3 and 5, with the model at the switch as θ_ft).

Names: ``region_size`` is a share of the graftable elements N (``cl-graft run --region-size``, ``GraftPlugin(
region_size=)``, ``LocalizeConfig.region_size``; ``auto`` or a :class:`RegionSize` searches it per task),
``region_elements`` is a count of elements (``LocalizeConfig.region_elements``, a rung's count); ``allowance`` is
another quantity, the share of *each tensor's free* elements a task may take, and the cap is the count it allows.

The plugin calls one object, :class:`SizeSearch` (:mod:`.search`), at five points of each experience::

    GraftPlugin                       SizeSearch                       what it does
    ---------------------------------------------------------------------------------------------------------
    before_train_dataset_adaptation   check()                          refuse: no free element / fixed size too big
    after_train_dataset_adaptation    hold_out_()                      held-out rows (valid_stream, else a split)
    before_training_exp               begin()                          plan the retraining switch (retrain > 0)
    after_training_iteration          tick(), switch_()                [retrain > 0] search now, retrain smaller
    after_training_exp                region_()                        the task's region, recorded and checked

    region_() with a searched size (SizedFinder, after training):

      allowance of every tensor's free elements --> candidates (top-|Δ| free elements)    rules, search, ladder
                  |
      reference: the trained model on the held-out rows, temperature-scaled               ladder, evidence
                  |
      ladder, top down from a rung below the cap:                                         ladder, evidence
         graft the top-k |Δ| candidates, one held-out pass, evidence of its loss
         vouched (bound <= tolerance)? --yes--> next rung down;  --no--> stop
                  |
      choice: the smallest vouched rung, else the cap                                     ladder
                  |
      refine: the finder (learned region) at that many elements; the better one kept     finder
                  |
      checks: loss <= tolerance and above chance, else CapacityWarning / UserError        search, records
                  |
      record in region.meta["sizing"], log line                                           records

    With a fixed region_size, region_() runs the finder at that size (no ladder) and records the share.

1. **Allowance** (:meth:`.rules.RegionSize.allowance`, :func:`.search.experience_finder`). A task may take at most a
   share 1 / (tasks to come + reserve) of the free elements **of every graftable tensor** (its candidates: the
   elements of largest |Δ| within each tensor's free ones), so no tensor is used up by early tasks: a permuted-input
   task must change the first layer, and a stream that left 12% of the model but 0.8% of its first layer free failed
   its 20th task. The stream length is ``expected_tasks``, else the length of the stream the experience comes from
   (Avalanche's ``origin_stream``) while this task lies inside it; else the plan is open-ended and doubles (as many
   tasks still to come as have come), so a task arriving late, fed one stream at a time, still has a share of every
   tensor.
2. **Reference.** The trained model (θ_ft) on the held-out rows: ``valid_stream`` when given, else a held-out split
   of the experience's own training examples that :meth:`.search.SizeSearch.hold_out_` keeps out of training
   (:meth:`.rules.RegionSize.split`; seeded by the finder's seed and the task label, so the same rows on resume).
   Test rows are never read.
3. **Ladder, top down.** Rungs of :attr:`.rules.RegionSize.ladder` (shares of all graftable elements N, 0.1% … 20%,
   about ×2 apart) capped by the allowance; a rung's region is γ_base, the top-k |Δ| candidates (the learned
   finder's starting region), grafted onto θ_pre, and costs one pass over the held-out rows (and the training
   inputs, skipped where the held-out rows alone decide: :func:`.evidence.settled`). The cap (the largest
   rung) is what a task gets when no smaller rung is vouched for, so it needs no evidence and is scored only when
   chosen; the search starts a rung below it and goes down as long as the rung's accuracy loss against the trained
   model is at most ``tolerance`` with ``confidence`` (:class:`.ladder.Ladder`, :func:`.evidence.loss_evidence`: a
   paired bound from the labels and a label-free bound from the trained model's own probabilities, which counts only
   where the labels do not contradict it; see :mod:`.evidence` for why and what each assumes), and stops at the
   first rung that is not vouched for. Testing a fixed sequence and stopping at the first failure keeps the chance
   of accepting a rung that loses more than ``tolerance`` at 1 − ``confidence`` (where the bounds' assumptions hold)
   without a correction for the number of rungs.
4. **Refinement** (:class:`.finder.SizedFinder`; with ``refine=False`` the task keeps the chosen rung's top-|Δ|
   region, see :class:`.rules.RegionSize`). The region finder (default: the learned region of Eq. 3) runs once
   at the chosen size, from that same starting region, without selection passes of its own; its region is kept where
   it scores higher on the held-out rows than the rung's own, which they already scored (``refined_gain``: its
   held-out accuracy minus the rung's top-|Δ| region's, > 0 where it was kept, so a page can count how often learning
   the region changed anything; ``refined_same``: it is the rung's region, so it is not scored again).
5. **Checks.** A task whose region loses more than ``tolerance`` (point estimate: the largest rung it may take is
   not enough) or whose grafted model is not surely above chance (the one-sided Wilson bound of its held-out
   accuracy at most the share of the most frequent training class: the trained model itself learned nothing, e.g. in
   too few free elements) is never silent (:func:`.search.record_size_`): the plugin warns (``on_full="warn"``) or
   stops (``on_full="error"``).

The search costs one held-out pass for the trained model and one per rung tried, plus (unless ``refine=False``) one
finder run without its selection passes, and one pass over the held-out rows for the finder's region when it differs
from the rung's; the passes and the finder run with bfloat16 products where the device computes them natively and the
model has a million graftable elements or more (:mod:`.precision`, ``RegionSize.precision``; the record's
``precision``). Every task records what was chosen in its region's ``meta["sizing"]`` (saved with the skills):
``share`` (the region size |γ| / N), ``elements`` (|γ|), ``loss`` (accuracy lost on the held-out rows, point estimate),
``kept`` (accuracy / the trained model's), ``met`` (loss ≤ tolerance), ``score`` / ``score_low`` / ``reference`` (the
grafted model's held-out accuracy, its lower bound, the trained model's), ``chance`` and ``above_chance``,
``allowance``, ``cap_share`` (the largest share the task could take), ``below_cap`` (whether the region is smaller than
the cap), ``refined_gain`` and ``refined_same`` (step 4) or ``retrain`` (:mod:`.retrain`), ``free`` (free share left
after the task; set by the plugin), every rung tried with its evidence (``settled``: decided by the held-out rows
alone), the held-out split and rows, and the seconds spent (``search_seconds`` choosing the size, ``seconds`` in all).
"""
from __future__ import annotations

import importlib

from .records import size_line, sizing_records
from .rules import CapacityWarning, RegionSize

_LAZY = {"SizedFinder": "finder", "SizeSearch": "search"}
"""Names loaded on first use: the finder and the search reach Avalanche (through the graft finders), and the
settings of ``cl-graft run`` (which read :class:`RegionSize`) are built before a run checks its ``--stream``."""


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)


__all__ = ["CapacityWarning", "RegionSize", "SizeSearch", "SizedFinder", "size_line", "sizing_records"]
