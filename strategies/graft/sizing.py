"""Automatic per-task region size: the smallest region sure to keep a declared share of the trained accuracy.

Panigrahi et al. 2023 (§5.2, https://arxiv.org/abs/2302.06600) fix one sparsity for every task. A good size
depends on the model and the task: about 0.1% of a pre-trained text encoder holds a task's skill, while a model
trained from its random initialisation (θ_pre = the initialisation) needs a few percent, and a fixed size that
is too small loses accuracy while one that is too large runs out of free elements on a long stream. So by default
each task gets its own size, chosen on validation data after it trained:

1. **Reference.** Which validation rows the trained model (θ_ft) classifies right: ``valid_stream`` when
   given, else a held-out split of the experience's own training examples that :class:`~.plugin.GraftPlugin`
   keeps out of training (:meth:`RegionSize.split`; seeded by the finder's seed and the task label, so the same
   rows on resume). Test rows are never read.
2. **Ladder.** Rungs of :attr:`RegionSize.ladder` (shares of all graftable elements N; by default 0.1% … 20%,
   about ×2 apart), each capped by this task's share of the free elements (:meth:`RegionSize.cap`: the free
   elements split evenly over the tasks still to come plus one share kept in reserve, the stream's length
   known from Avalanche's ``origin_stream`` unless ``expected_tasks`` says otherwise; a task that needs less
   leaves more for later, and the reserve leaves the last task room to train in).
   Smallest first, the rung's region is the learned finder's starting region at that budget (γ_base = top-k
   |Δ| among the free elements, :mod:`cl_graft.regions.learned`) grafted onto θ_pre; a rung costs one pass over
   the validation rows. The first rung that keeps ``target`` of the trained model's accuracy **with
   confidence** is chosen: the one-sided ``confidence`` lower bound of its kept share, paired row by row with
   the trained model (:func:`kept_share`), must reach ``target``. A rung whose point estimate merely reaches it
   on a few hundred rows is not enough: on 128 dev rows of SST-2 a 0.1% region of MiniLM kept 101% of the
   trained model's dev accuracy, and the task ended at 75.0% test accuracy against 80.2% for single-task
   fine-tuning (``benchmarks/results/region_size/text``). If no rung is sure, the largest (the task's
   cap) is chosen: the region closest to the trained model that leaves the later tasks their share. So the
   search spends capacity where the validation rows cannot vouch for less, and saves it where they can (a
   region that agrees with the trained model on hundreds of rows). When even the chosen region keeps less
   than ``target`` (point estimate) the plugin warns (``on_full="warn"``) or stops (``on_full="error"``).
3. **Refinement.** The region finder (default: the learned region of Eq. 3) runs once at the chosen budget,
   from that same starting region; its region is kept unless it scores lower on the validation rows than the
   rung's own, which is then kept instead.
4. **Chance.** Keeping the trained model's score is not enough when that model learned nothing: the last tasks
   of a long stream train inside the few elements earlier tasks left free (without the reserve, a from-scratch
   MLP of 19k weights trained the 50th of 50 tasks in the last 2% and ended it at 14–44%). So the grafted
   model's validation accuracy must also be surely above chance, the accuracy of always answering the most
   frequent class of the training rows (their share, on a seeded sample; not of the few validation rows, whose
   own majority share is inflated by their small number): its one-sided ``confidence`` Wilson lower bound
   (:func:`wilson_low`) must exceed it. A task below its target or at chance is never silent: the plugin warns
   (``on_full="warn"``) or stops (``on_full="error"``).

The search costs one finder run (what a fixed size costs) plus one validation pass per rung tried. Every task
records what was chosen in its region's ``meta["sizing"]`` (saved with the skills):
``share`` (|γ| / N), ``kept`` (accuracy / the trained model's), ``kept_low`` (its lower bound), ``met``
(kept ≥ target), ``score`` / ``score_low`` / ``reference`` (the grafted model's validation accuracy, its lower
bound, the trained model's), ``chance`` and ``above_chance``, ``free`` (free share left after the
task; set by the plugin), the rungs tried, the validation split and rows, and the seconds spent (``search_seconds``
choosing the size, ``seconds`` in all, the finder's run included).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from statistics import NormalDist

import numpy as np
import torch
from torch import Tensor, nn

from cl_graft.errors import UserError
from cl_graft.regions.data import RegionData
from cl_graft.regions.problem import Problem, budget_for
from cl_graft.regions.region import Region
from cl_graft.training.models import clone_model

LADDER = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
ON_FULL = ("warn", "error")


class CapacityWarning(UserWarning):
    """A task's region could not keep its target share inside the elements it may take."""


@dataclass(frozen=True)
class RegionSize:
    """How each task's region size is chosen (see the module docstring).

    Attributes:
        target: share of the trained model's validation score the grafted model must keep (default 0.99:
            nearly everything the task learned, as grafting promises).
        ladder: region sizes tried, as shares of all graftable elements, smallest first. The default spans
            0.1% (enough for a pre-trained encoder) to 20% (a small model trained from scratch); the top rung
            bounds how much one task may take.
        on_full: ``"warn"`` (a :class:`CapacityWarning` naming the task, the share it kept and the free share;
            the task keeps the best region it can have) or ``"error"`` (a :class:`~cl_graft.errors.UserError`,
            nothing recorded for the task) when a task cannot reach ``target`` inside its elements, or its
            grafted model is not surely above chance on the validation rows.
        expected_tasks: stream length to plan for: task ``t`` (0-based) may take at most
            free / (expected_tasks − t + reserve) elements, so later tasks keep room. None: the plugin plans for
            the length of the stream the experience comes from (Avalanche's ``experience.origin_stream``);
            without one, for the tasks learned so far plus this one.
        reserve: tasks' shares the plan keeps free after the last expected task (default 1). A task trains
            only inside the free elements, so without a reserve the last task of a stream that fills the model
            trains inside exactly the elements it then keeps (one share): too little to learn in on a small
            model trained from scratch. With one share in reserve it trains in at least two, every task gives up
            1/(tasks + 1) of its share, and a task the plan did not foresee still finds room.
        holdout: share of an experience's training examples held out for validation when no ``valid_stream``
            experience has its task (at least one example; the rest train).
        rows: at most this many validation rows scored per rung.
        confidence: how sure a rung smaller than the task's cap must be to be chosen: the one-sided level of
            the lower bound on its kept share (:func:`kept_share`). 0.95 by default; 0.5 takes the point
            estimate (with the one pessimistic row).
    """

    target: float = 0.99
    ladder: tuple[float, ...] = LADDER
    on_full: str = "warn"
    expected_tasks: int | None = None
    holdout: float = 0.1
    rows: int = 512
    confidence: float = 0.95
    reserve: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise UserError(f"target must be in (0, 1], got {self.target}")
        ladder = tuple(float(s) for s in self.ladder)
        if not ladder or any(not 0 < s <= 1 for s in ladder) or list(ladder) != sorted(set(ladder)):
            raise UserError(f"ladder must be increasing shares in (0, 1], got {self.ladder}")
        object.__setattr__(self, "ladder", ladder)
        if self.on_full not in ON_FULL:
            raise UserError(f"on_full must be one of {ON_FULL}, got {self.on_full!r}")
        if self.expected_tasks is not None and self.expected_tasks < 1:
            raise UserError(f"expected_tasks must be >= 1, got {self.expected_tasks}")
        if not 0 < self.holdout < 1:
            raise UserError(f"holdout must be in (0, 1), got {self.holdout}")
        if self.rows < 1:
            raise UserError(f"rows must be >= 1, got {self.rows}")
        if not 0.5 <= self.confidence < 1:
            raise UserError(f"confidence must be in [0.5, 1), got {self.confidence}")
        if isinstance(self.reserve, bool) or not isinstance(self.reserve, int) or self.reserve < 0:
            raise UserError(f"reserve must be an integer >= 0, got {self.reserve!r}")

    def cap(self, free: int, done: int) -> int:
        """Most elements task number ``done`` (0-based) may take out of ``free`` free ones: its share of them,
        planning for ``expected_tasks`` (None: this task is the last) and ``reserve`` shares left over."""
        to_come = max(1, (done + 1 if self.expected_tasks is None else self.expected_tasks) - done)
        return free // (to_come + self.reserve)

    def split(self, n: int, *, seed: int, label: int) -> tuple[list[int], list[int]]:
        """``(train, held_out)`` indices of an experience with ``n`` training examples: a seeded permutation
        (the same for the same ``seed``, task ``label`` and ``n``, e.g. on resume), ⌈holdout · n⌉ held out.

        Raises:
            UserError: fewer than 2 examples (nothing would be left to train or to validate on).
        """
        if n < 2:
            raise UserError(f"task {label}: {n} training example(s) cannot be split into training and validation "
                            f"rows; give a valid_stream or a fixed region size")
        held = min(n - 1, max(1, math.ceil(self.holdout * n)))
        order = np.random.default_rng([int(seed), int(label)]).permutation(n).tolist()
        return sorted(order[held:]), sorted(order[:held])

    def rungs(self, numel: int, cap: int) -> list[int]:
        """Element counts of the ladder over ``numel`` graftable elements, each capped at ``cap`` (distinct)."""
        out = sorted({min(max(1, budget_for(s, numel)), cap) for s in self.ladder})
        return [k for k in out if k >= 1]

    def to_json(self) -> dict:
        return asdict(self)


def _default_finder():
    from .finders import LocalizeFinder

    return LocalizeFinder()


def has_dev(data: RegionData) -> bool:
    """Whether ``data`` holds held-out rows (ExperienceData's ``splits["dev"]``, TextRegionData's ``dev``)."""
    splits = getattr(data, "splits", None)
    if isinstance(splits, dict):
        return splits.get("dev") is not None and len(splits["dev"]) > 0
    return bool(getattr(data, "dev", None))


@dataclass(frozen=True)
class SizedFinder:
    """A region finder that chooses each region's size (a :class:`~.finders.RegionFinder`).

    Args:
        finder: the finder run at the chosen size; it must have a ``config``
            (:class:`~cl_graft.regions.config.LocalizeConfig`, whose ``budget`` is set per task). Default:
            :class:`~.finders.LocalizeFinder` (the learned region).
        size: the sizing rules.
        max_elements: most elements this call may select (set per task by the plugin from
            :meth:`RegionSize.cap`); None = every candidate.
    """

    finder: object = field(default_factory=_default_finder)
    size: RegionSize = field(default_factory=RegionSize)
    max_elements: int | None = None

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
        t0 = time.perf_counter()
        cfg = self.finder.config
        prob = Problem.build(pre, ft, replace(cfg, budget=1), names=names, candidates=candidates)
        n_cand = int(prob.cand.sum())
        cap = n_cand if self.max_elements is None else min(n_cand, self.max_elements)
        if cap < 1:
            raise UserError("no free graftable element is left for this task")
        split = "dev" if has_dev(data) else "train"
        work = clone_model(ft).eval()
        theta, _ = prob.bind(work)                                           # (N,) buffer at θ_ft

        def correct() -> Tensor:                                             # (n,) bool, the same rows each time
            return data.correct(work, split, limit=self.size.rows, seed=cfg.seed)

        reference = correct()
        z = NormalDist().inv_cdf(self.size.confidence)
        tried, chosen = [], None
        for k in self.size.rungs(prob.numel, cap):
            mask = prob.base_mask(k)                                         # (N,) top-k |Δ| among candidates
            theta.copy_(torch.where(mask, prob.ft_flat, prob.pre_flat))
            hits = correct()
            kept, low = kept_share(hits, reference, target=self.size.target, z=z)
            tried.append({"elements": k, "share": k / prob.numel, "hits": hits, "kept": kept, "low": low,
                          "mask": mask})
            if low >= self.size.target:
                chosen = tried[-1]
                break
        if chosen is None:                                                   # no rung is surely good enough:
            chosen = tried[-1]                                               # the largest the task may take
        search = time.perf_counter() - t0
        inner = replace(self.finder, config=replace(cfg, budget=chosen["elements"]))
        with torch.enable_grad():
            region = inner(pre, ft, data, names=names, candidates=candidates)
        flat = torch.cat([region.masks[n].reshape(-1) for n in prob.names]).to(prob.device)
        theta.copy_(torch.where(flat, prob.ft_flat, prob.pre_flat))
        hits = correct()
        if hits.sum() < chosen["hits"].sum():
            region = prob.region(chosen["mask"], method="topk", cfg=replace(cfg, budget=chosen["elements"]),
                                 task=data.task, ft=ft, refined_score=_accuracy(hits))
            hits = chosen["hits"]
        kept, low = kept_share(hits, reference, target=self.size.target, z=z)
        chance = chance_level(data.labels("train", limit=self.size.rows, seed=cfg.seed))
        score_low = wilson_low(hits, z)
        region.meta["sizing"] = {
            "share": region.size / prob.numel, "elements": region.size, "kept": kept, "kept_low": low,
            "score": _accuracy(hits), "score_low": score_low, "chance": chance, "above_chance": score_low > chance,
            "reference": _accuracy(reference), "target": self.size.target,
            "confidence": self.size.confidence, "met": kept >= self.size.target - 1e-9,
            "cap_share": cap / prob.numel, "free_before": n_cand / prob.numel, "validation": split,
            "rows": len(reference),
            "rungs": [{"share": r["share"], "kept": r["kept"], "kept_low": r["low"]} for r in tried],
            "search_seconds": round(search, 3), "seconds": round(time.perf_counter() - t0, 3)}
        return region


def _accuracy(hits: Tensor) -> float:
    return int(hits.sum()) / len(hits) if len(hits) else 0.0


def kept_share(hits: Tensor, reference: Tensor, *, target: float, z: float) -> tuple[float, float]:
    """``(kept, low)``: the share of the trained model's accuracy a grafted model keeps on the same rows, and a
    one-sided lower confidence bound of it.

    ``kept`` = acc(graft) / acc(trained) (1.0 when the trained model gets no row right). ``low`` reads the rows
    paired: with g_i, f_i ∈ {0, 1} whether the grafted and the trained model get row i right, the per-row margin
    e_i = g_i − target · f_i has mean ≥ 0 exactly when kept ≥ target; its normal lower bound mean − z · sd / √n is
    taken over the rows plus one pessimistic row (graft wrong where the trained model is right), so that a
    handful of rows without a single disagreement is not taken for certainty (as the rule of three would not),
    and turned back into a share: low = target + bound / acc'(trained), acc' counting that row.

    Args:
        hits: ``(n,)`` bool, the grafted model right on each row.
        reference: ``(n,)`` bool, the trained model right on the same rows.
        target: the share to keep.
        z: the normal quantile of the bound's one-sided level (1.645 for 95%).
    """
    g, f = hits.double(), reference.double()
    kept = float(g.sum() / f.sum()) if f.sum() > 0 else 1.0
    e = torch.cat([g - target * f, torch.tensor([-target], dtype=torch.float64)])        # (n + 1,)
    bound = e.mean() - z * e.std() / math.sqrt(len(e))
    return kept, float(target + bound / ((f.sum() + 1) / len(e)))


def chance_level(labels: Tensor) -> float:
    """The accuracy of always answering the most frequent class of ``labels`` ``(n,)`` (0.0 for no rows)."""
    return float(torch.bincount(labels).max()) / len(labels) if len(labels) else 0.0


def wilson_low(hits: Tensor, z: float) -> float:
    """The one-sided Wilson score lower bound of the accuracy ``hits.mean()`` of ``hits`` ``(n,)`` bool (z: its
    normal quantile); 0.0 for no rows. Unlike mean − z·sd/√n it stays inside [0, 1] and does not take a handful
    of rows all right for certainty."""
    n = len(hits)
    if n == 0:
        return 0.0
    p, z2 = float(hits.double().mean()), z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


def sizing_records(owners) -> list[dict]:
    """Per learned task of an :class:`~.owner_map.OwnerMap`: its name and region size record (``share`` of the
    graftable elements; ``kept``, ``met``, ``free`` … when the size was chosen automatically)."""
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
    if "kept" in record:
        line += (f", keeps {100 * record['kept']:.1f}% of the trained model's {record['validation']} score "
                 f"(target {100 * record['target']:.0f}%)")
    if "free" in record:
        line += f", {100 * record['free']:.1f}% free"
    return line


def chance_message(task: str, record: dict) -> str:
    """The warning (or error) of a task whose grafted model is not surely above chance on its validation rows
    although it keeps its trained model's score: the trained model learned (almost) nothing."""
    return (f"task {task!r} scores {100 * record['score']:.1f}% on its {record['rows']} {record['validation']} "
            f"rows (its trained model {100 * record['reference']:.1f}%), not surely above chance "
            f"({100 * record['chance']:.1f}%, its most frequent training class); it trained in the "
            f"{100 * record['free_before']:.1f}% of the graftable elements that were free")


def full_message(task: str, record: dict) -> str:
    """The capacity warning (or error) of a task that did not reach its target."""
    return (f"task {task!r} reached {100 * record['kept']:.1f}% of its trained model's validation score (target "
            f"{100 * record['target']:.0f}%) with {100 * record['share']:.2f}% of the graftable elements; "
            f"{100 * record['free_before']:.1f}% were free (this task could take {100 * record['cap_share']:.1f}%)")
