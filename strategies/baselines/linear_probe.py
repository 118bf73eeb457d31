"""``linear-probe``: the pre-trained encoder left as it is (frozen), a classifier trained on each experience's
classes.

A simple baseline reported strong for class-incremental learning on pre-trained encoders (Zheng et al. 2024,
"Learn or Recall?", SEQ*): only the head trains; in each experience the loss covers that experience's classes
alone, so earlier classes' logits are not pushed down (the rows of other classes get no gradient). Text streams
only: a digits model trained from scratch has no encoder worth freezing. It keeps the head it trained (the
encoder is the model it started from).
"""
from __future__ import annotations

import torch

from ..interface.entry import BuildContext, StrategyEntry
from .common import frozen_encoder, head_bytes, text_rows


def build(ctx: BuildContext):
    from avalanche.training import Naive

    frozen_encoder(ctx)

    class FrozenEncoder(Naive):
        def criterion(self):
            """Cross-entropy over the experience's own classes while training (others' logits masked)."""
            if not self.is_training:
                return super().criterion()
            classes = torch.tensor(sorted(self.experience.classes_in_this_experience), device=self.device)
            keep = torch.zeros(self.mb_output.shape[-1], dtype=torch.bool, device=self.device)
            keep[classes[classes < len(keep)]] = True
            return self._criterion(self.mb_output.masked_fill(~keep, -1e4), self.mb_y)

    return FrozenEncoder(**ctx.template, plugins=ctx.plugins)


ENTRY = StrategyEntry(name="linear-probe", help="the pre-trained encoder frozen, a classifier trained on each "
                      "experience's classes (text streams)", stores="the trained heads", build=build,
                      kept_bytes=head_bytes, check=text_rows("linear-probe"))
