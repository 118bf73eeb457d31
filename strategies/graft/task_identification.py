"""Task inference accuracy of task-agnostic grafting, as an Avalanche metric any evaluator can log.

With ``GraftStrategy(task_inference="entropy")`` (or test data without task labels) every test input is routed to
the learned task whose grafted model is the most confident (:mod:`..routing`). The accuracy metrics of the same
evaluator then measure task-agnostic accuracy; this metric adds how often the inferred task is the input's own:
``TaskInference_Acc_Exp/eval_phase/<stream>/Task<t>/Exp<e>`` per experience and
``TaskInference_Acc_Stream/eval_phase/<stream>`` over the stream. It logs nothing in task-aware evaluation (no
task is inferred there) and for test data without task labels to check against.
"""
from __future__ import annotations

from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metric_results import MetricValue
from avalanche.evaluation.metric_utils import get_metric_name

from .plugin import GraftPlugin


def _graft_plugin(strategy) -> GraftPlugin | None:
    return next((p for p in strategy.plugins if isinstance(p, GraftPlugin)), None)


class TaskInferenceAccuracy(PluginMetric[float]):
    """Share of task-agnostically routed test inputs sent to their own task (reads the strategy's
    :class:`GraftPlugin`); logged only for experiences the strategy routed."""

    def __init__(self) -> None:
        super().__init__()
        self._counts = [0, 0]

    def reset(self) -> None:
        self._counts = [0, 0]

    def result(self) -> float | None:
        return self._counts[0] / self._counts[1] if self._counts[1] else None

    def before_eval(self, strategy) -> None:
        self.reset()

    def after_eval_exp(self, strategy) -> list[MetricValue] | None:
        plugin = _graft_plugin(strategy)
        counts = plugin.task_id.get(strategy.experience.current_experience) if plugin is not None else None
        if not counts or not counts[1]:
            return None
        self._counts = [self._counts[0] + counts[0], self._counts[1] + counts[1]]
        name = get_metric_name("TaskInference_Acc_Exp", strategy, add_experience=True, add_task=True)
        return [MetricValue(self, name, counts[0] / counts[1], strategy.clock.train_iterations)]

    def after_eval(self, strategy) -> list[MetricValue] | None:
        value = self.result()
        if value is None:
            return None
        name = get_metric_name("TaskInference_Acc_Stream", strategy, add_experience=False, add_task=False)
        return [MetricValue(self, name, value, strategy.clock.train_iterations)]

    def __str__(self) -> str:
        return "TaskInference_Acc"


TaskIdentificationAccuracy = TaskInferenceAccuracy
"""The former name of :class:`TaskInferenceAccuracy` (kept importable)."""
