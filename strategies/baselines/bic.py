"""``bic``: BiC (Wu et al. 2019) as Avalanche's ``BiC`` strategy builds it: replay and distillation, then a
bias layer on the old classes fitted on held-out memory rows; a class-incremental method on a single-head
model with new classes in every experience (split digits), on tensor rows.

Avalanche 0.6's ``BiCPlugin.bias_correction_step`` builds ``MultiStepLR(..., verbose=False)``; torch removed
that argument, so every BiC run fails with a TypeError after its second experience; and the held-out rows of
several classes are joined with Avalanche's ``concat_datasets``, which fails on digits experiences with task
labels (``'ConstantSequence' object has no attribute '_datasets'``). :func:`bias_correction_class` is
Avalanche's plugin with that one method re-stated without the argument, joining the rows with torch's
``ConcatDataset`` (and without its progress prints); the rest is Avalanche's (after FACIL's implementation).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, StrategyEntry
from .common import (
    CLASS,
    MODEL,
    ReplayFamily,
    all_checks,
    copy_bytes,
    new_classes,
    positive,
    rows_bytes,
    tensor_bytes,
    tensor_rows,
    with_model,
)


@dataclass(frozen=True)
class BiCSettings(ReplayFamily):
    """``bic``'s."""

    bic_val_share: float = field(default=0.1, metadata={
        "help": "BiC: share of the memory held out to fit the bias layer."})
    bic_stage2_epochs: int = field(default=200, metadata={"help": "BiC: epochs fitting the bias layer."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.bic_val_share < 1:
            raise UserError(f"bic_val_share must be in (0, 1), got {self.bic_val_share}")
        positive("bic_stage2_epochs", self.bic_stage2_epochs)


GRID = ({"bic_val_share": 0.1}, {"bic_val_share": 0.05}, {"bic_val_share": 0.2}, {"bic_val_share": 0.3},
        {"bic_val_share": 0.02})


def bias_correction_class() -> type:
    """Avalanche's ``BiCPlugin`` whose bias-correction stage runs on this torch (see the module docstring; a
    class made on first use: Avalanche is imported here)."""
    import torch
    from avalanche.models.bic_model import BiasLayer
    from avalanche.training.plugins import BiCPlugin
    from torch.optim.lr_scheduler import MultiStepLR
    from torch.utils.data import ConcatDataset, DataLoader

    class BiasCorrection(BiCPlugin):
        """``BiCPlugin`` whose bias-correction stage runs on this torch."""

        def bias_correction_step(self, strategy, persistent_workers: bool = False,
                                 num_workers: int = 0) -> None:
            """Fits a new bias layer (α, β on the classes of the experience just learned) on the held-out
            memory rows, the model frozen: ``stage_2_epochs`` epochs of SGD (lr ``self.lr``, momentum 0.9,
            ×0.1 at epochs 50, 100, 150), cross-entropy plus 0.1 · β²/2, as Avalanche's."""
            strategy.model.eval()
            self.bias_layer = BiasLayer(strategy.adapted_dataset.targets.uniques).to(strategy.device)
            self.bias_layer.train()
            for param in self.bias_layer.parameters():
                param.requires_grad = True
            optimizer = torch.optim.SGD(self.bias_layer.parameters(), lr=self.lr, momentum=0.9)
            scheduler = MultiStepLR(optimizer, milestones=[50, 100, 150], gamma=0.1)
            held_out = ConcatDataset([buffer.buffer for buffer in self.val_buffer.values()])
            loader = DataLoader(held_out, batch_size=strategy.train_mb_size, shuffle=True,
                                num_workers=num_workers, persistent_workers=persistent_workers)
            for _ in range(self.stage_2_epochs):
                for batch in loader:
                    x, y = batch[0].to(strategy.device), batch[1].to(strategy.device)
                    with torch.no_grad():
                        outputs = strategy.model(x)
                    loss = torch.nn.functional.cross_entropy(self.bias_layer(outputs), y)
                    loss = loss + 0.1 * ((self.bias_layer.beta.sum() ** 2) / 2)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                scheduler.step()
            self.bias_layer.eval()
            for param in self.bias_layer.parameters():
                param.requires_grad = False

    return BiasCorrection


def build(ctx: BuildContext):
    """A ``SupervisedTemplate`` with the plugin last, as Avalanche's ``BiC`` builds it; Avalanche's bias-layer
    optimizer (SGD, lr 0.1), temperature 2 and distillation weight (the old classes' share)."""
    from avalanche.training.templates import SupervisedTemplate

    settings: BiCSettings = ctx.settings
    plugin = bias_correction_class()(mem_size=settings.replay_mem, val_percentage=settings.bic_val_share,
                                     stage_2_epochs=settings.bic_stage2_epochs)
    return SupervisedTemplate(**ctx.template, plugins=[*ctx.plugins, plugin])


@with_model
def kept(strategy) -> dict[str, int]:
    """BiC: the replay memory, the held-out rows that fit the bias layer, the bias layer and the previous
    model (distillation)."""
    plugin = next(p for p in strategy.plugins if hasattr(p, "val_buffer"))
    held_out = sum(rows_bytes(b.buffer) for b in plugin.val_buffer.values())
    return {"memory": rows_bytes(plugin.storage_policy.buffer), "held_out": held_out,
            "bias_layer": tensor_bytes(plugin.bias_layer), "previous_model": copy_bytes(plugin.model_old)}


ENTRY = StrategyEntry(
    name="bic", help="Avalanche BiC (replay, distillation, a bias layer on old classes; --scenario class, "
    "--model mlp, new classes per experience)",
    stores=MODEL + ", replay_mem rows (a share held out), the bias layer and the previous model",
    build=build, kept_bytes=kept, settings=BiCSettings, grid=GRID, scenarios=CLASS,
    check=all_checks(tensor_rows("bic", "splits each experience's dataset, which Avalanche's text datasets "
                                 "do not allow"), new_classes("bic")))
