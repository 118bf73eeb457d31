"""The rules of the size search (:class:`RegionSize`): the ladder of region sizes tried, the tolerance and
confidence a rung is vouched for at, each task's allowance of the free elements, and the held-out split.

``RegionSize`` is what ``--region-size auto`` (``cl-graft run``) and ``GraftPlugin(region_size=RegionSize(...))``
give; a float ``region_size`` is a fixed share instead (no search). See the package docstring
(:mod:`cl_graft.strategies.graft.sizing`) for the steps these rules drive.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

import numpy as np

from cl_graft.errors import UserError
from cl_graft.regions.problem import elements_for

from .precision import PRECISIONS

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
    """How each task's region size is chosen (see the package docstring).

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
        rows: at most this many held-out rows, and as many training inputs, scored per rung (each rung's pass
            is what the search costs; 256 instead of 512 chose larger regions on the README's text stream,
            benchmarks/results/speed/).
        confidence: the level of the statement "this rung loses at most ``tolerance``" (0.95 by default).
        retrain: share of an experience's optimizer steps spent training inside a region smaller than the one the
            evidence vouched for, which is kept only when it scores at least as well on the held-out rows
            (:mod:`.retrain`); 0 (default): the size is searched after training, with no retraining. At 0.25 it
            halved the median size on five digit streams trained from scratch but lost 0.9–6.0 points on three
            of them (paired over 3 seeds; benchmarks/results/retrain_ab/), and on the text stream see
            benchmarks/results/text_size/text_retrain/.
        shrink: how many rungs below the vouched one the retrained region is.
        refine: also run the region finder (the learned region) at the chosen size and keep its region where it
            scores higher on the held-out rows (step 4 of the package docstring). On by default: it is
            16–17 s of graft's time per run on the README's text stream (28–30 s while the finder also scored its
            regions on rows of its own; 50–71 s in float32), and without it seed 1 there lost 4.4 test points on
            qnli and 1.0 on average (benchmarks/results/speed/); False keeps the rung's top-|Δ| region.
        precision: the number format of the search's passes and the refinement (:mod:`.precision`): ``"auto"``
            (bfloat16 products where the device computes them natively and the model has at least a million
            graftable elements, else float32), ``"float32"`` or ``"bfloat16"``. On the README's text stream (2 CPU
            cores with AVX512-BF16) auto cut the search and the refinement from 167 s to 65–68 s per run, with the
            same sizes on 8 of 9 tasks (3 seeds; benchmarks/results/speed/).
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
    refine: bool = True
    precision: str = "auto"

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
        if not isinstance(self.refine, bool):
            raise UserError(f"refine must be true or false, got {self.refine!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
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

    def rungs(self, numel: int, cap_elements: int) -> list[int]:
        """Element counts of the ladder over ``numel`` graftable elements, each capped at ``cap_elements`` (distinct,
        increasing)."""
        return sorted({min(max(1, elements_for(s, numel)), cap_elements) for s in self.ladder})

    def to_json(self) -> dict:
        return {**asdict(self), "ladder": list(self.ladder)}


