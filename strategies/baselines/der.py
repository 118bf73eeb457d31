"""``der``: Avalanche's DER (DER++, Buzzega et al. 2020, https://arxiv.org/abs/2004.07211; β = 0 is DER): replay
of rows and the logits the model gave them; a class-incremental method, on digits and on text rows.

Avalanche 0.6.0's ``DER`` assumes rows that torch's default collate can batch
(``avalanche/training/supervised/der.py``): its logits pass (``compute_dataset_logits``, lines 36-56) and its
memory loader (``DER._before_training_exp``, lines 229-241) build ``DataLoader``\\ s without the dataset's collate
function, and the logits pass unpacks ``x, _, _`` and calls ``model(x)``. A text row is a dict of token ids of its
own length, batched by the stream's collate into ``[x (B, 2, L), y, t]`` (which drops any key it does not know,
the memory's ``logits`` among them). The strategy here (:func:`der_class`) keeps Avalanche's training step and
loss and replaces those two loaders:

- the logits pass batches the experience with its collate function and forwards as the template does
  (``avalanche_forward``), the model in eval mode as Avalanche's;
- the memory loader collates with the memory's collate function and, for dict rows, appends the stored logits
  ``(B, C)`` to the batch (:func:`with_logits`), so ``DER._before_forward`` gets its ``[x, y, t, logits]``.

One more difference, for the class-incremental text model (``SharedHead``): in evaluation it gives the classes
no experience has shown yet :data:`~..adapter.MASK_VALUE` (−1000), so stored logits hold −1000 in those columns
while the training forward gives them ordinary values; matching them would pull every later class's logit
towards −1000 (a loss near 7·10⁵ in its test). A stored column at :data:`~..adapter.MASK_VALUE` takes the
current output as its target instead (no loss, no gradient: ``CollatingDER._after_forward``); the mean stays over
every column, as Avalanche's ``F.mse_loss``. A model with no masked column (the digits MLP) trains exactly as Avalanche's DER.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, StrategyEntry
from .common import (
    CLASS,
    MODEL,
    PerClassMemory,
    buffer,
    memory_rows,
    per_class_buffer,
    per_class_check,
    rows_bytes,
    tensor_bytes,
    with_model,
)


@dataclass(frozen=True)
class DERSettings(PerClassMemory):
    """``der``'s."""

    der_alpha: float = field(default=0.1, metadata={
        "help": "DER: weight of the logit-matching loss on memory."})
    der_beta: float = field(default=0.5, metadata={
        "help": "DER++: weight of the label loss on memory (0: DER)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.der_alpha < 0 or self.der_beta < 0:
            raise UserError(f"der_alpha and der_beta must be >= 0, got {self.der_alpha}, {self.der_beta}")


GRID = ({"der_alpha": 0.1, "der_beta": 0.5}, {"der_alpha": 0.5, "der_beta": 0.5},
        {"der_alpha": 0.5, "der_beta": 1.0}, {"der_alpha": 0.2, "der_beta": 0.0},
        {"der_alpha": 1.0, "der_beta": 0.5})


def with_logits(collate: Callable[[list], Any]) -> Callable[[list], Any]:
    """A memory's collate function that keeps the stored logits: dict rows (text) collate with ``collate`` to
    ``[x, y, t]`` and get ``torch.stack`` of their ``"logits"`` ``(B, C)`` appended; other rows (tuples ending in
    their logits) collate with ``collate`` alone."""
    def collate_rows(rows: list) -> Any:
        if isinstance(rows[0], dict):
            return [*collate(rows), torch.stack([r["logits"] for r in rows])]     # [x, y, t, (B, C)]
        return collate(rows)

    return collate_rows


@torch.no_grad()
def dataset_logits(dataset, strategy) -> list[torch.Tensor]:
    """The strategy's model's logits ``(C,)`` for each row of ``dataset``, in eval mode, batched with the
    dataset's collate function and forwarded as the template does (with the rows' task labels)."""
    from avalanche.models.utils import avalanche_forward
    from torch.utils.data import DataLoader

    model = strategy.model
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    for x, _, t, *_ in DataLoader(dataset, batch_size=strategy.train_mb_size, collate_fn=dataset.collate_fn):
        logits = avalanche_forward(model, x.to(strategy.device), t.to(strategy.device))     # (B, C)
        out.extend(row.clone() for row in logits.detach().cpu())
    model.train(was_training)
    return out


def der_class() -> type:
    """Avalanche's ``DER`` with a memory that batches any rows (a class made on first use: Avalanche is imported
    here); see the module docstring."""
    from avalanche.benchmarks.utils import make_avalanche_dataset
    from avalanche.benchmarks.utils.data_attribute import TensorDataAttribute
    from avalanche.benchmarks.utils.flat_data import FlatData
    from avalanche.training import DER
    from avalanche.training.storage_policy import ClassBalancedBuffer
    from avalanche.training.utils import cycle
    from torch.utils.data import DataLoader

    from ..adapter import MASK_VALUE

    class LogitsBuffer(ClassBalancedBuffer):
        """Avalanche's class-balanced reservoir memory, each row with the logits the model gave it after the
        experience that brought it (Avalanche's ``ClassBalancedBufferWithLogits``, its logits pass collating)."""

        def update(self, strategy, **kwargs) -> None:
            data = strategy.experience.dataset
            logits = FlatData([dataset_logits(data.eval(), strategy)], discard_elements_not_in_indices=True)
            self.update_from_dataset(make_avalanche_dataset(data, data_attributes=[
                TensorDataAttribute(logits, name="logits", use_in_getitem=True)]), strategy)

    class CollatingDER(DER):
        """``DER`` whose memory and logits pass collate with the rows' own collate function."""

        def __init__(self, *, memory: dict[str, Any], **kwargs) -> None:
            super().__init__(mem_size=memory["max_size"], **kwargs)
            self.storage_policy = LogitsBuffer(**memory)                 # Avalanche's: adaptive, mem_size rows

        def _before_training_exp(self, **kwargs) -> None:
            memory = self.storage_policy.buffer
            self.replay_loader = None
            if len(memory) >= self.batch_size_mem:
                self.replay_loader = cycle(DataLoader(memory, batch_size=self.batch_size_mem, shuffle=True,
                                                      drop_last=True, collate_fn=with_logits(memory.collate_fn)))
            super(DER, self)._before_training_exp(**kwargs)             # the template's, as Avalanche's DER

        def _after_forward(self, **kwargs) -> None:
            super()._after_forward(**kwargs)
            if self.replay_loader is not None:                          # memory rows lead the batch
                current = self.mb_output[: self.batch_size_mem].detach()                # (B_mem, C)
                unseen = self.batch_logits <= MASK_VALUE / 2                            # masked when stored
                self.batch_logits = torch.where(unseen, current, self.batch_logits)

    return CollatingDER


def build(ctx: BuildContext):
    """DER with ``replay_mem`` rows of memory shared by the classes seen (Avalanche's) or ``replay_per_class`` rows of
    every class (:func:`~.common.per_class_buffer`), weights ``der_alpha`` and ``der_beta``."""
    return der_class()(**ctx.template, plugins=ctx.plugins, memory=per_class_buffer(ctx.settings, ctx.stream),
                       alpha=ctx.settings.der_alpha, beta=ctx.settings.der_beta)


def _logits(row) -> torch.Tensor:
    """A memory row's stored logits ``(C,)`` (a dict row's ``"logits"``, a tuple row's last item)."""
    return row["logits"] if isinstance(row, dict) else row[3]


def _kept(strategy) -> dict[str, int]:
    """DER: the memory's rows and the logits stored with each."""
    rows = buffer(strategy)
    return {"memory": rows_bytes(rows), "logits": sum(tensor_bytes(_logits(rows[i])) for i in range(len(rows)))}


ENTRY = StrategyEntry(
    name="der", help="Avalanche DER (DER++: replay of rows and their logits; --scenario class)",
    stores=MODEL + ", replay_mem rows (or replay_per_class of each class) and their logits", build=build,
    check=per_class_check("der"), kept_bytes=with_model(_kept, memory_rows), settings=DERSettings, grid=GRID,
    scenarios=CLASS)
