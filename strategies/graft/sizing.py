"""Automatic per-task region size: the smallest region the held-out rows vouch for, inside the task's allowance.

Panigrahi et al. 2023 (§5.2, https://arxiv.org/abs/2302.06600) fix one sparsity for every task. A good size
depends on the model and the task: about 0.1% of a pre-trained text encoder holds a task's skill, while a model
trained from its random initialisation (θ_pre = the initialisation) needs a few percent, and a fixed size that
is too small loses accuracy while one that is too large runs out of free elements on a long stream. So by default
each task gets its own size, chosen on held-out rows after it trained (steps 1–5 below). With ``retrain`` > 0 (not
the default) the search runs part-way through training instead, and a smaller region is retrained in the last steps
and kept where it scores as well (:mod:`.retrain`; steps 1–3 and 5, with the model at the switch as θ_ft):

1. **Allowance** (:meth:`RegionSize.allowance`). A task may take at most a share 1 / (tasks to come + reserve)
   of the free elements **of every graftable tensor** (its candidates: the elements of largest |Δ| within each
   tensor's free ones), so no tensor is used up by early tasks: a permuted-input task must change the first layer,
   and a stream that left 12% of the model but 0.8% of its first layer free failed its 20th task. The stream length
   is ``expected_tasks``, else the length of the stream the experience comes from (Avalanche's
   ``origin_stream``) while this task lies inside it; else the plan is open-ended and doubles (as many tasks
   still to come as have come), so a task arriving late, fed one stream at a time, still has a share of every
   tensor.
2. **Reference.** The trained model (θ_ft) on the held-out rows: ``valid_stream`` when given, else a held-out
   split of the experience's own training examples that :class:`~.plugin.GraftPlugin` keeps out of training
   (:meth:`RegionSize.split`; seeded by the finder's seed and the task label, so the same rows on resume). Test
   rows are never read.
3. **Ladder, top down.** Rungs of :attr:`RegionSize.ladder` (shares of all graftable elements N, 0.1% … 20%, about
   ×2 apart) capped by the allowance; a rung's region is γ_base, the top-k |Δ| candidates (the learned finder's
   starting region), grafted onto θ_pre, and costs one pass over the held-out rows. The cap (the largest rung) is
   what a task gets when no smaller rung is vouched for, so it needs no evidence and is scored only when chosen;
   the search starts a rung below it and goes down as long as the rung's accuracy loss against the trained model is
   at most ``tolerance`` with ``confidence`` (:func:`~.evidence.loss_evidence`: a paired bound from the labels and
   a label-free bound from the trained model's own probabilities, which counts only where the labels do not
   contradict it; see :mod:`.evidence` for why and what each assumes), and stops at the first rung that is not
   vouched for. Testing a fixed sequence and stopping at the first failure keeps the chance of accepting a rung
   that loses more than ``tolerance`` at 1 − ``confidence`` (where the bounds' assumptions hold) without a
   correction for the number of rungs.
4. **Refinement.** The region finder (default: the learned region of Eq. 3) runs once at the chosen size, from
   that same starting region; its region is kept unless it scores lower on the held-out rows than the rung's own
   (``refined_gain``: its held-out accuracy minus the rung's top-|Δ| region's, ≥ 0 where it was kept, so a page
   can count how often learning the region changed anything; ``refined_same``: it is the rung's region, so it
   is not scored again).
5. **Checks.** A task whose region loses more than ``tolerance`` (point estimate: the largest rung it may take
   is not enough) or whose grafted model is not surely above chance (the one-sided Wilson bound of its held-out
   accuracy at most the share of the most frequent training class: the trained model itself learned nothing,
   e.g. in too few free elements) is never silent: the plugin warns (``on_full="warn"``) or stops
   (``on_full="error"``).

The search costs one finder run (what a fixed size costs) plus one held-out pass for the trained model, one per
rung tried and one for the finder's region when it differs from the rung's. Every task records what was chosen in
its region's ``meta["sizing"]`` (saved with the skills): ``share`` (|γ| / N), ``loss`` (accuracy lost on the
held-out rows, point estimate), ``kept`` (accuracy / the trained model's), ``met`` (loss ≤ tolerance), ``score`` /
``score_low`` / ``reference`` (the grafted model's held-out accuracy, its lower bound, the trained model's),
``chance`` and ``above_chance``, ``allowance``, ``cap_share`` (the largest share the task could take),
``below_cap`` (whether the region is smaller than the cap), ``refined_gain`` and ``refined_same`` (step 4) or
``retrain`` (:mod:`.retrain`), ``free``
(free share left after the task; set by the plugin), every rung tried with its evidence, the held-out split and
rows, and the seconds spent (``search_seconds`` choosing the size, ``seconds`` in all).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.data import RegionData
from cl_graft.regions.problem import Problem, budget_for
from cl_graft.regions.region import Region

from .ladder import Ladder, accuracy

LADDER = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
ON_FULL = ("warn", "error")
PLANS = ("stream", "open")


class CapacityWarning(UserWarning):
    """A task's region could not keep its trained accuracy inside the elements it may take, or is at chance."""


def _integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _share(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RegionSize:
    """How each task's region size is chosen (see the module docstring).

    Attributes:
        tolerance: accuracy (a share: 0.02 = two points) a task's grafted model may lose against its trained
            model, at ``confidence`` on the held-out rows.
        ladder: region sizes tried, as shares of all graftable elements, increasing. The default spans 0.1%
            (enough for a pre-trained encoder) to 20% (a small model trained from scratch); the top rung bounds
            how much one task may take.
        on_full: ``"warn"`` (a :class:`CapacityWarning` naming the task, what it lost and the free share; the
            task keeps the best region it can have) or ``"error"`` (a :class:`~cl_graft.errors.UserError`,
            nothing recorded for the task) when a task loses more than ``tolerance`` inside its allowance, or its
            grafted model is not surely above chance on the held-out rows.
        expected_tasks: stream length to plan for (None: the experience's stream, else open-ended; see
            :meth:`allowance`).
        plan: ``"stream"`` (plan for ``expected_tasks``, else the experience's stream) or ``"open"`` (as if the
            stream length were unknown, whatever the experience's stream says: the doubling plan of
            :meth:`planned`; what a strategy that is not told the length gets).
        reserve: tasks' shares the plan keeps free after the last expected task (default 1). A task trains
            only inside the free elements, so without a reserve the last task of a stream that fills the model
            trains inside exactly the elements it then keeps: too little to learn in on a small model trained from
            scratch. With one share in reserve it trains in at least two, and a task the plan did not foresee
            still finds room.
        holdout: share of an experience's training examples held out when no ``valid_stream`` experience has its
            task (at least one example; the rest train).
        rows: at most this many held-out rows scored per rung.
        confidence: the level of the statement "this rung loses at most ``tolerance``" (0.95 by default).
        retrain: share of an experience's optimizer steps spent training inside a region smaller than the one the
            evidence vouched for, which is kept only when it scores at least as well on the held-out rows
            (:mod:`.retrain`); 0 (default): the size is searched after training, with no retraining. At 0.25 it
            halved the median size on five digit streams trained from scratch but lost 0.9–6.0 points on three
            of them (paired over 3 seeds; benchmarks/results/retrain_ab/), and on the text stream see
            benchmarks/results/text_size/text_retrain/.
        shrink: how many rungs below the vouched one the retrained region is.
    """

    tolerance: float = 0.02
    ladder: tuple[float, ...] = LADDER
    on_full: str = "warn"
    expected_tasks: int | None = None
    plan: str = "stream"
    holdout: float = 0.1
    rows: int = 512
    confidence: float = 0.95
    reserve: int = 1
    retrain: float = 0.0
    shrink: int = 2

    def __post_init__(self) -> None:
        if not _share(self.tolerance) or not 0 <= self.tolerance < 1:
            raise UserError(f"tolerance must be a share in [0, 1), got {self.tolerance!r}")
        if isinstance(self.ladder, (str, bytes)) or not hasattr(self.ladder, "__iter__"):
            raise UserError(f"ladder must be a sequence of shares in (0, 1], got {self.ladder!r}")
        ladder = tuple(self.ladder)
        if not ladder or any(not _share(s) or not 0 < s <= 1 for s in ladder) or \
                list(ladder) != sorted(set(ladder)):
            raise UserError(f"ladder must be increasing shares in (0, 1], got {self.ladder!r}")
        object.__setattr__(self, "ladder", tuple(float(s) for s in ladder))
        if self.on_full not in ON_FULL:
            raise UserError(f"on_full must be one of {ON_FULL}, got {self.on_full!r}")
        if self.expected_tasks is not None and (not _integer(self.expected_tasks) or self.expected_tasks < 1):
            raise UserError(f"expected_tasks must be an integer >= 1 or None, got {self.expected_tasks!r}")
        if self.plan not in PLANS:
            raise UserError(f"plan must be one of {', '.join(PLANS)}, got {self.plan!r}")
        if self.plan == "open" and self.expected_tasks is not None:
            raise UserError("plan 'open' plans without the stream length; leave expected_tasks unset")
        if not _share(self.holdout) or not 0 < self.holdout < 1:
            raise UserError(f"holdout must be in (0, 1), got {self.holdout!r}")
        if not _integer(self.rows) or self.rows < 1:
            raise UserError(f"rows must be an integer >= 1, got {self.rows!r}")
        if not _share(self.confidence) or not 0.5 <= self.confidence < 1:
            raise UserError(f"confidence must be in [0.5, 1), got {self.confidence!r}")
        if not _integer(self.reserve) or not 0 <= self.reserve <= 1000:
            raise UserError(f"reserve must be an integer in [0, 1000], got {self.reserve!r}")
        if not _share(self.retrain) or not 0 <= self.retrain < 1:
            raise UserError(f"retrain must be a share in [0, 1), got {self.retrain!r}")
        if not _integer(self.shrink) or not 0 <= self.shrink <= 1000:
            raise UserError(f"shrink must be an integer in [0, 1000], got {self.shrink!r}")
        for name in ("tolerance", "holdout", "confidence", "retrain"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("rows", "reserve", "shrink") + (("expected_tasks",) if self.expected_tasks is not None else ()):
            object.__setattr__(self, name, int(getattr(self, name)))

    def planned(self, done: int, stream_length: int | None) -> int:
        """The stream length the plan of task number ``done`` (0-based) counts on: ``expected_tasks``; else
        ``stream_length`` (the experience's stream) while this task lies inside it; else open-ended, twice the
        tasks seen so far (a doubling plan: tasks fed one stream at a time keep a share for those still to come).
        With ``plan="open"`` always the doubling plan."""
        if self.expected_tasks is not None:
            return max(self.expected_tasks, done + 1)
        if self.plan == "stream" and stream_length is not None and done < stream_length:
            return stream_length
        return 2 * (done + 1)

    def allowance(self, done: int, stream_length: int | None = None) -> float:
        """Share of each tensor's free elements task number ``done`` may take: 1 / (tasks to come, this one
        included, + ``reserve``)."""
        return 1.0 / (self.planned(done, stream_length) - done + self.reserve)

    def split(self, n: int, *, seed: int, label: int) -> tuple[list[int], list[int]]:
        """``(train, held_out)`` indices of an experience with ``n`` training examples: a seeded permutation
        (the same for the same ``seed``, task ``label`` and ``n``, e.g. on resume), ⌈holdout · n⌉ held out.

        Raises:
            UserError: fewer than 2 examples (nothing would be left to train or to validate on).
        """
        if n < 2:
            raise UserError(f"task {label}: {n} training example(s) cannot be split into training and held-out "
                            f"rows; give a valid_stream or a fixed region size")
        held = min(n - 1, max(1, math.ceil(self.holdout * n)))
        order = np.random.default_rng([int(seed), int(label)]).permutation(n).tolist()
        return sorted(order[held:]), sorted(order[:held])

    def rungs(self, numel: int, cap: int) -> list[int]:
        """Element counts of the ladder over ``numel`` graftable elements, each capped at ``cap`` (distinct,
        increasing)."""
        return sorted({min(max(1, budget_for(s, numel)), cap) for s in self.ladder})

    def to_json(self) -> dict:
        return {**asdict(self), "ladder": list(self.ladder)}


def _default_finder():
    from .finders import LocalizeFinder

    return LocalizeFinder()


@dataclass(frozen=True)
class SizedFinder:
    """A region finder that chooses each region's size (a :class:`~.finders.RegionFinder`).

    Args:
        finder: the finder run at the chosen size; it must have a ``config``
            (:class:`~cl_graft.regions.config.LocalizeConfig`, whose ``budget`` is set per task). Default:
            :class:`~.finders.LocalizeFinder` (the learned region).
        size: the sizing rules.
        allowance: share of each tensor's free elements this call may select (set per task by the plugin from
            :meth:`RegionSize.allowance`); 1.0 = every candidate.
    """

    finder: object = field(default_factory=_default_finder)
    size: RegionSize = field(default_factory=RegionSize)
    allowance: float = 1.0

    def __post_init__(self) -> None:
        if getattr(self.finder, "config", None) is None:
            raise UserError("automatic region size needs a finder with a LocalizeConfig (.config)")

    @property
    def config(self):
        return self.finder.config

    def to_json(self) -> dict:
        inner = self.finder.to_json() if hasattr(self.finder, "to_json") else {"finder": type(self.finder).__name__}
        return {"size": self.size.to_json(), **inner}

    @torch.no_grad()
    def __call__(self, pre: nn.Module, ft: nn.Module, data: RegionData, *, names: list[str],
                 candidates: Region | None) -> Region:
        cfg = self.finder.config
        ladder = Ladder(self.size, cfg, self.allowance, pre, ft, data, names=names, candidates=candidates)
        prob = ladder.prob
        chosen = ladder.search()
        inner = replace(self.finder, config=replace(cfg, budget=chosen["elements"]))
        with torch.enable_grad():
            region = inner(pre, ft, data, names=names, candidates=_unflatten(prob, prob.cand))
        flat = torch.cat([region.masks[n].reshape(-1) for n in prob.names]).to(prob.device)
        same = torch.equal(flat, chosen["mask"])                             # the finder kept the rung's region
        out, more, gain = chosen["out"], chosen["more"], 0.0
        if not same:                                                         # one more pass: the finder's region
            ladder.graft_(flat)
            found, found_more = ladder.outputs()
            gain = accuracy(found.hits) - accuracy(out.hits)                 # against the rung's region
            if gain >= 0:
                out, more = found, found_more
            else:                                                            # the rung's region scored higher
                region = ladder.region(chosen["mask"], task=data.task, ft=ft, refined_score=accuracy(out.hits))
        region.meta["sizing"] = ladder.record(region.size, chosen, out, more, refined_gain=gain, refined_same=same)
        return region


def _unflatten(prob: Problem, flat: Tensor) -> Region:
    """The region of a flat ``(N,)`` bool mask over ``prob``'s tensors."""
    flat = flat.cpu()
    return Region.adopt({n: flat[a:z].reshape(prob.shapes[n]).clone() for n, (a, z) in zip(prob.names, prob.spans)},
                        {"method": "allowance"})


def sizing_records(owners) -> list[dict]:
    """Per learned task of an :class:`~.owner_map.OwnerMap`: its name and region size record (``share`` of the
    graftable elements; ``loss``, ``met``, ``free`` … when the size was chosen automatically)."""
    numel = sum(o.numel() for o in owners.owner.values())
    out = []
    for task, patch in zip(owners.tasks, owners.patches):
        record = dict(patch.region.meta.get("sizing") or {})
        record.setdefault("share", patch.region.size / numel)
        out.append({"task": task, **record})
    return out


def size_line(task: str, record: dict) -> str:
    """The log line of one task's region size."""
    line = f"task {task}: region {100 * record['share']:.2f}% of graftable elements"
    if "loss" in record:
        line += (f", loses {100 * record['loss']:+.1f} points of the trained model's {record['validation']} "
                 f"accuracy (tolerance {100 * record['tolerance']:.0f})"
                 + ("" if record.get("below_cap") else f", its cap {100 * record['cap_share']:.2f}%"))
    if "free" in record:
        line += f", {100 * record['free']:.1f}% free"
    return line


def chance_message(task: str, record: dict) -> str:
    """The warning (or error) of a task whose grafted model is not surely above chance on its held-out rows
    although it keeps its trained model's score: the trained model learned (almost) nothing."""
    return (f"task {task!r} scores {100 * record['score']:.1f}% on its {record['rows']} {record['validation']} "
            f"rows (its trained model {100 * record['reference']:.1f}%), not surely above chance "
            f"({100 * record['chance']:.1f}%, its most frequent training class); it trained in the "
            f"{100 * record['free_before']:.1f}% of the graftable elements that were free")


def full_message(task: str, record: dict) -> str:
    """The capacity warning (or error) of a task that lost more than its tolerance."""
    return (f"task {task!r} lost {100 * record['loss']:.1f} points of its trained model's {record['validation']} "
            f"accuracy (tolerance {100 * record['tolerance']:.0f}) with {100 * record['share']:.2f}% of the "
            f"graftable elements; {100 * record['free_before']:.1f}% were free (this task could take "
            f"{100 * record['cap_share']:.1f}%)")
