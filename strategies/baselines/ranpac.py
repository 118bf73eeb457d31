"""``ranpac``: RanPAC's head (McDonnell et al., NeurIPS 2023) on θ_pre's sentence features, no training: a fixed
random projection to ``ranpac_width`` dimensions, a ReLU, and ridge regression onto one-hot targets from the
accumulated Gram matrix (:class:`cl_graft.heads.RandomProjectionRidge`, :mod:`.closed_form` feeds it).

RanPAC also adapts the encoder on the first task (parameter-efficient fine-tuning) and picks its ridge on a
share of each task's training rows; here the encoder stays θ_pre (as every frozen-encoder baseline's) and the
width and ridge are settings that ``--tune`` chooses on dev rows, recorded with the run. The projection is drawn
from the run's seed. Its sums make the head after a stream independent of the order its classes came in. Text
streams only (see :mod:`.closed_form`); it keeps the projection, the Gram matrix, each class's sum of projected
features (and the ridge solution while it answers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.heads import RandomProjectionRidge

from ..interface.entry import BuildContext, StrategyEntry
from ..interface.settings import Settings
from .all_columns import ColumnRouting
from .common import features_pass, text_rows
from .closed_form import HeadState, feature_width, kept, template


@dataclass(frozen=True)
class RanPACSettings(Settings):
    """``ranpac``'s."""

    ranpac_width: int = field(default=2048, metadata={"help": "RanPAC: width of the random projection."})
    ranpac_ridge: float = field(default=1e-2, metadata={
        "help": "RanPAC: ridge, relative to the Gram matrix's mean eigenvalue."})

    def __post_init__(self) -> None:
        RandomProjectionRidge(dim=1, width=self.ranpac_width, ridge=self.ranpac_ridge, seed=0)     # refuses bad ones


GRID = ({"ranpac_width": 2048, "ranpac_ridge": 1e-2}, {"ranpac_width": 2048, "ranpac_ridge": 1e-3},
        {"ranpac_width": 4096, "ranpac_ridge": 1e-2}, {"ranpac_width": 2048, "ranpac_ridge": 1e-1},
        {"ranpac_width": 4096, "ranpac_ridge": 1e-3}, {"ranpac_width": 2048, "ranpac_ridge": 1e-4})


def build(ctx: BuildContext):
    dim, settings, seed = feature_width(ctx, "ranpac"), ctx.settings, ctx.cfg.recipe.seed
    arguments = {"dim": dim, "width": settings.ranpac_width, "ridge": settings.ranpac_ridge, "seed": seed}
    head = RandomProjectionRidge(**arguments) if ctx.resumed is None else \
        RandomProjectionRidge.from_tensors(ctx.resumed, **arguments, what="ranpac's saved head")
    return template(ctx, "ranpac", head)


ENTRY = StrategyEntry(name="ranpac", help="RanPAC's head on θ_pre's sentence features: random projection, ReLU, "
                      "ridge from the Gram matrix, no training (text streams)",
                      stores="the projection, its Gram matrix and each class's sum of projected features",
                      build=build, kept_bytes=kept, settings=RanPACSettings, grid=GRID, state=HeadState(),
                      routes=ColumnRouting(), check=text_rows("ranpac"), phase_after_training=features_pass)
