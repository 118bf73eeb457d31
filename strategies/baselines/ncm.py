"""``ncm``: nearest class mean on θ_pre's sentence features, no training.

Each experience adds the mean of its classes' features (the input of the head: the pooled sentence embedding of
the pre-trained encoder) and nothing else changes, so nothing is forgotten. A row goes to the class whose mean is
nearest in cosine: the head's row of a class is set to its mean, normalised to unit length, and its bias to 0, so
the head's argmax is the nearest mean (a row's own length scales every logit alike). Text streams only; it keeps
the class means (the head).
"""
from __future__ import annotations

import torch

from ..head_inputs import HeadInputs
from ..interface.entry import BuildContext, StrategyEntry
from .closed_form import head_of
from .common import head_bytes, text_rows


def build(ctx: BuildContext):
    from avalanche.models.utils import avalanche_forward
    from avalanche.training import Naive


    class NearestClassMean(Naive):
        def training_epoch(self, **kwargs):
            """No optimizer step: the class means are set once per experience, after it."""

        @torch.no_grad()
        def _after_training_exp(self, **kwargs):
            self.model.eval()
            sums, counts = {}, {}
            for self.mbatch in self.dataloader:
                self._unpack_minibatch()
                x, y, t = self.mb_x, self.mb_y, self.mb_task_id                 # (B, 2, L), (B,), (B,)
                _, head = head_of(self.model, int(t[0]))
                with HeadInputs(head) as rec:
                    avalanche_forward(self.model, x, t)
                feats = torch.nn.functional.normalize(rec.take(len(y)), dim=-1)
                for c in torch.unique(y).tolist():
                    sums[c] = sums.get(c, 0) + feats[y == c].sum(0)
                    counts[c] = counts.get(c, 0) + int((y == c).sum())
            _, head = head_of(self.model, int(self.experience.task_labels[0]))
            for c, total in sums.items():
                head.weight[c] = torch.nn.functional.normalize(total / counts[c], dim=0)
                head.bias[c] = 0.0
            super()._after_training_exp(**kwargs)

    return NearestClassMean(**ctx.template, plugins=ctx.plugins)


ENTRY = StrategyEntry(name="ncm", help="nearest class mean on θ_pre's sentence features, no training (text "
                      "streams)", stores="one mean feature vector per class (the head)", build=build,
                      kept_bytes=head_bytes, check=text_rows("ncm"))
