"""Avalanche's BiC plugin with its bias-correction stage runnable on torch ≥ 2.7 (imports Avalanche: load it when
a strategy is built).

Avalanche 0.6's ``BiCPlugin.bias_correction_step`` builds ``MultiStepLR(..., verbose=False)``; torch removed that
argument, so every BiC run fails with a TypeError after its second experience; and the held-out rows of
several classes are joined with Avalanche's ``concat_datasets``, which fails on digits experiences with task
labels (``'ConstantSequence' object has no attribute '_datasets'``). :class:`BiasCorrection` is Avalanche's
plugin with that one method re-stated without the argument, joining the rows with torch's ``ConcatDataset``
(and without its progress prints); the rest is Avalanche's (Wu et al. 2019, after FACIL's implementation).
"""
from __future__ import annotations

import torch
from avalanche.models.bic_model import BiasLayer
from avalanche.training.plugins import BiCPlugin
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import ConcatDataset, DataLoader


class BiasCorrection(BiCPlugin):
    """``BiCPlugin`` whose bias-correction stage runs on this torch (see the module docstring)."""

    def bias_correction_step(self, strategy, persistent_workers: bool = False, num_workers: int = 0) -> None:
        """Fits a new bias layer (α, β on the classes of the experience just learned) on the held-out memory
        rows, the model frozen: ``stage_2_epochs`` epochs of SGD (lr ``self.lr``, momentum 0.9, ×0.1 at epochs
        50, 100, 150), cross-entropy plus 0.1 · β²/2, as Avalanche's."""
        strategy.model.eval()
        self.bias_layer = BiasLayer(strategy.adapted_dataset.targets.uniques).to(strategy.device)
        self.bias_layer.train()
        for param in self.bias_layer.parameters():
            param.requires_grad = True
        optimizer = torch.optim.SGD(self.bias_layer.parameters(), lr=self.lr, momentum=0.9)
        scheduler = MultiStepLR(optimizer, milestones=[50, 100, 150], gamma=0.1)
        held_out = ConcatDataset([buffer.buffer for buffer in self.val_buffer.values()])
        loader = DataLoader(held_out, batch_size=strategy.train_mb_size, shuffle=True, num_workers=num_workers,
                            persistent_workers=persistent_workers)
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
