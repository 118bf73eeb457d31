"""How a strategy that keeps per-task model states serves rows without task labels, for ``cl-graft run``: the
routing rules an entry offers (:class:`RegionRouting`, an entry's ``routes``) and the rule each scenario starts
with (:func:`class_scenario_rule`). Graft and PackNet both use them (:mod:`cl_graft.strategies.graft.entry`,
:mod:`cl_graft.strategies.packnet.entry`); the plugin they reach is any plugin of the strategy with the attributes
``task_inference`` (the rule) and ``task_id`` (experience → ``[right, rows]`` of the last routed evaluation), as
:class:`~cl_graft.strategies.graft.plugin.GraftPlugin` has.
"""
from __future__ import annotations

from typing import Any

from cl_graft.errors import UserError

TASK_INFERENCE = ("entropy", "max-softmax", "features")
"""The routing rules (:mod:`.states`); defined here so that an entry's settings and rules import no Avalanche."""


def routed_plugin(strategy) -> Any:
    """The strategy's plugin that routes rows (see the module docstring).

    Raises:
        UserError: no plugin of the strategy routes rows.
    """
    found = next((p for p in strategy.plugins if hasattr(p, "task_inference") and hasattr(p, "task_id")), None)
    if found is None:
        raise UserError(f"{type(strategy).__name__} has no plugin that routes rows without task labels")
    return found


class RegionRouting:
    """Routes each test row to a learned task by the confidence of each task's model (``entropy``,
    ``max-softmax``: T forward passes per row) or by θ_pre's head-input features (``features``: the router of
    :mod:`.class_heads` or the linear discriminant of :mod:`.features`, 2 passes per row; :mod:`.states`)."""

    rules = TASK_INFERENCE
    strict = True                       # another task's answer is a column of its own (TaskRouter.foreign_answers)

    def route(self, strategy, rule: str | None) -> None:
        routed_plugin(strategy).task_inference = rule

    def identified(self, strategy, n_tasks: int) -> list[float]:
        task_id = routed_plugin(strategy).task_id
        return [task_id[j][0] / task_id[j][1] for j in range(n_tasks)]


def class_scenario_rule(scenario: str, rule: str = "entropy") -> str | None:
    """How a region-keeping strategy serves rows in ``scenario``: with the task label (``"task"``: None), else by
    ``rule`` (``"class"``): graft by ``features`` (θ_pre's features, :mod:`.features` and :mod:`.class_heads`),
    PackNet by the entropy of each task's model."""
    return rule if scenario == "class" else None
