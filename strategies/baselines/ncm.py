"""``ncm``: nearest class mean on θ_pre's sentence features, no training.

Each experience adds the mean of its classes' features (the input of the head: the pooled sentence embedding of
the pre-trained encoder) and nothing else changes, so nothing is forgotten. A row goes to the class whose mean is
nearest in cosine: the head's row of a class is set to its mean, normalised to unit length, and its bias to 0, so
the head's argmax is the nearest mean (a row's own length scales every logit alike). Routed without task labels
(``--task-inference features``, :mod:`.all_columns`) a row goes to the nearest mean over every task's classes:
every head reads the same features, so its logits are comparable across heads. Text streams only; it keeps the
class means (the head).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..head_inputs import HeadInputs
from ..interface.entry import BuildContext, StrategyEntry
from .all_columns import AllColumns, ColumnRouting, head_of
from .common import features_pass, head_bytes, text_rows


def build(ctx: BuildContext):
    from avalanche.models.utils import avalanche_forward
    from avalanche.training import Naive


    class NearestClassMean(AllColumns, Naive):
        def column_keys(self) -> Tensor:
            heads = list(self.model.clf.heads)
            return torch.tensor([(heads.index(name), c) for name in _head_names(self.model)
                                 for c in range(self.model.clf.tasks[name].num_labels)], dtype=torch.int64)

        @torch.no_grad()
        def column_scores(self, x: Tensor) -> Tensor:
            _, first = head_of(self.model, 0)
            with HeadInputs(first) as rec:
                avalanche_forward(self.model, x, torch.zeros(len(x), dtype=torch.long, device=x.device))
            feats = rec.take(len(x))                                            # (B, d), as each head reads it
            return torch.cat([self.model.clf.heads[name](feats) for name in _head_names(self.model)], dim=1)

        def forward(self):
            """The model's logits; routed: every task's (B, K)."""
            if self.routed is not None and not self.is_training:
                return self.answer_all()
            return super().forward()

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


def _head_names(model: torch.nn.Module) -> list[str]:
    """The heads of the model's tasks, in task-label order (a :class:`TaskAdapter`'s, or the shared head)."""
    return getattr(model, "task_names", None) or [model.head]


ENTRY = StrategyEntry(name="ncm", help="nearest class mean on θ_pre's sentence features, no training (text "
                      "streams)", stores="one mean feature vector per class (the head)", build=build,
                      kept_bytes=head_bytes, routes=ColumnRouting(), check=text_rows("ncm"),
                      phase_after_training=features_pass)
