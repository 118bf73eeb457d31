"""``joint-probe``: the pre-trained encoder frozen and a classifier trained on every class of the stream at once
(Avalanche's ``JointTraining``, T × the steps, as ``joint``): a ceiling for the frozen-encoder baselines
(``linear-probe``, ``ncm``, ``slda``, ``ranpac``), not a continual method. Text streams only, as
``linear-probe``; it keeps the heads it trained.
"""
from __future__ import annotations

from ..interface.entry import BuildContext, StrategyEntry
from .common import frozen_encoder, head_bytes, text_rows


def build(ctx: BuildContext):
    from avalanche.training import JointTraining

    frozen_encoder(ctx)
    return JointTraining(**ctx.template, plugins=ctx.plugins)


ENTRY = StrategyEntry(name="joint-probe", help="ceiling, not a continual method: the encoder frozen, a classifier "
                      "trained on every class at once (text streams)", stores="the trained heads", build=build,
                      kept_bytes=head_bytes, fit="whole-stream", check=text_rows("joint-probe"))
