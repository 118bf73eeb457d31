"""``ncm``: nearest class mean on θ_pre's sentence features, no training.

Each experience adds the mean of its classes' features (the input of the head: the pooled sentence embedding of
the pre-trained encoder) and nothing else changes, so nothing is forgotten. A row goes to the class whose mean is
nearest in cosine: the head's row of a class is set to its mean, normalised to unit length, and its bias to 0, so
the head's argmax is the nearest mean (a row's own length scales every logit alike). Routed without task labels
(``--task-inference features``, :mod:`.all_columns`) a row goes to the nearest mean over every task's classes:
every head reads the same features, so its logits are comparable across heads. Text streams only; it keeps the
class means (the head). Evaluated rows' features are computed once (:class:`~..head_inputs.SeenRows`, as ``slda``
and ``ranpac``): each evaluation's logits are the heads applied to them, what the model's own forward gives.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..head_inputs import HeadInputs
from ..interface.entry import BuildContext, StrategyEntry
from .all_columns import AllColumns, ColumnRouting, head_of
from .closed_form import SeenFeatures, features, output_width
from .common import features_pass, head_bytes, text_rows


def build(ctx: BuildContext):
    from avalanche.models.utils import avalanche_forward
    from avalanche.training import Naive

    from ..adapter import MASK_VALUE

    class NearestClassMean(SeenFeatures, AllColumns, Naive):
        def column_keys(self) -> Tensor:
            heads = list(self.model.clf.heads)
            return torch.tensor([(heads.index(name), c) for name in _head_names(self.model)
                                 for c in range(self.model.clf.tasks[name].num_labels)], dtype=torch.int64)

        @torch.no_grad()
        def column_scores(self, x: Tensor) -> Tensor:
            (_, _, feats), = features(self.model, x, torch.zeros(len(x), dtype=torch.long, device=x.device),
                                      self.seen, unit=False)                 # (B, d), as each head reads it
            return torch.cat([self.model.clf.heads[name](feats) for name in _head_names(self.model)], dim=1)

        @torch.no_grad()
        def forward(self):
            """Training: the model's logits (never read); evaluation: each row's head applied to its features
            (B, C); routed: every task's (B, K)."""
            if self.is_training:
                return super().forward()
            if self.routed is not None:
                return self.answer_all()
            out = torch.full((len(self.mb_x), output_width(self.model)), MASK_VALUE, device=self.mb_x.device)
            unseen = ~self.model.seen if hasattr(self.model, "seen") else None   # a SharedHead's untrained classes
            for name, rows, feats in features(self.model, self.mb_x, self.mb_task_id, self.seen, unit=False):
                logits = self.model.clf.heads[name](feats)
                if unseen is not None:
                    logits = logits.masked_fill(unseen, MASK_VALUE)
                out[rows, :logits.shape[1]] = logits
            return out

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


def kept(strategy, model) -> tuple[int, dict]:
    """The heads' bytes and the counts of evaluated rows' features computed and read back."""
    size, info = head_bytes(strategy, model)
    return size, {**info, **strategy.seen.info()}


ENTRY = StrategyEntry(name="ncm", help="nearest class mean on θ_pre's sentence features, no training (text "
                      "streams)", stores="one mean feature vector per class (the head)", build=build,
                      kept_bytes=kept, routes=ColumnRouting(), check=text_rows("ncm"),
                      phase_after_training=features_pass)
