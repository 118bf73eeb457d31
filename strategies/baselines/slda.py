"""``slda``: streaming linear discriminant analysis (Hayes & Kanan, CLVision 2020) on θ_pre's sentence features,
no training: a running mean per class and one shared covariance, shrunk and inverted
(:class:`cl_graft.heads.StreamingLDA`, :mod:`.closed_form` feeds it).

Avalanche ships this method (``avalanche.training.StreamingLDA``), and the head follows its rule exactly (its
``fit`` one row at a time, its ``predict``; a test checks the two agree), but its template cannot serve here as
it is: it trains through its own epoch over the template's loader, which the harness stops after ``steps``
mini-batches (every strategy's recipe), so it would see only part of each experience; it has one label space
fixed up front and no task labels, so the task-incremental scenario's per-task classes would share rows (and
an unseen class scores 0, above a seen class with a negative score); and it saves and loads its state with
``torch.save`` / ``torch.load`` (pickle), which the project never loads. Text streams only (see
:mod:`.closed_form`); it keeps the class means and counts and the covariance (and its inverse while it answers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.heads import StreamingLDA

from ..interface.entry import BuildContext, StrategyEntry
from ..interface.settings import Settings
from .all_columns import ColumnRouting
from .common import features_pass, text_rows
from .closed_form import HeadState, feature_width, kept, template


@dataclass(frozen=True)
class SLDASettings(Settings):
    """``slda``'s."""

    slda_shrinkage: float = field(default=1e-4, metadata={
        "help": "SLDA: shrinkage s of the covariance towards the identity, (1 - s) Σ + s I (Avalanche's 1e-4)."})

    def __post_init__(self) -> None:
        StreamingLDA(dim=1, shrinkage=self.slda_shrinkage)             # refuses one outside (0, 1]


GRID = ({"slda_shrinkage": 1e-4}, {"slda_shrinkage": 1e-2}, {"slda_shrinkage": 1e-1}, {"slda_shrinkage": 1e-3},
        {"slda_shrinkage": 0.5})


def build(ctx: BuildContext):
    dim, shrinkage = feature_width(ctx, "slda"), ctx.settings.slda_shrinkage
    head = StreamingLDA(dim=dim, shrinkage=shrinkage) if ctx.resumed is None else \
        StreamingLDA.from_tensors(ctx.resumed, dim=dim, shrinkage=shrinkage, what="slda's saved head")
    return template(ctx, "slda", head)


ENTRY = StrategyEntry(name="slda", help="streaming LDA on θ_pre's sentence features (Avalanche's StreamingLDA "
                      "rule), no training (text streams)",
                      stores="the class means and counts and one shared covariance", build=build, kept_bytes=kept,
                      settings=SLDASettings, grid=GRID, state=HeadState(), routes=ColumnRouting(),
                      check=text_rows("slda"), phase_after_training=features_pass)
