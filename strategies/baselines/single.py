"""``single``: a fresh model per task, each fine-tuned alone from θ_pre by Naive (the runner's ``separate``
fit). It answers a task's rows with that task's model, so it needs the task label at test (``--scenario
task``); the report's "alone" reference (every average given as a share of its)."""
from __future__ import annotations

from ..interface.entry import BuildContext, StrategyEntry
from .common import model_only


def build(ctx: BuildContext):
    """Naive on this task's fresh model."""
    from avalanche.training import Naive

    return Naive(**ctx.template, plugins=ctx.plugins)


ENTRY = StrategyEntry(
    name="single", help="one model per task, each fine-tuned alone from θ_pre (--scenario task)",
    stores="one trained copy of the weights per task", build=build, kept_bytes=model_only, fit="separate",
    scenarios=("task",), reference="alone")
