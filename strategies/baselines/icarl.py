"""``icarl``: Avalanche's ICaRL (Rebuffi et al. 2017): exemplars by herding, nearest-mean-of-exemplars at
test; a class-incremental method on a single-head ``nn.Sequential`` model with new classes in every experience
(split digits)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cl_graft.errors import UserError

from ..interface.entry import BuildContext, StrategyEntry
from .common import (
    CLASS,
    MODEL,
    ReplayFamily,
    all_checks,
    copy_bytes,
    new_classes,
    plugin_of,
    tensor_bytes,
    tensor_rows,
    with_model,
)


SEQUENTIAL = "needs an nn.Sequential model ending in a linear layer (--model mlp)"


@dataclass(frozen=True)
class ICaRLSettings(ReplayFamily):
    """``icarl``'s; no ``--tune`` grid: its one knob besides the memory budget is how that budget is shared, a
    choice of the user."""

    icarl_fixed_memory: bool = field(default=True, metadata={
        "help": "iCaRL: replay_mem rows in all (shared by the classes seen); off: replay_mem rows per "
                "class."})


def build(ctx: BuildContext):
    """iCaRL on an ``nn.Sequential`` model: its layers before the last are the feature extractor, the last (a
    linear layer) the training classifier; at test Avalanche's nearest-mean-of-exemplars classifier."""
    from avalanche.training import ICaRL

    model = ctx.model
    if not isinstance(model, torch.nn.Sequential) or not isinstance(model[-1], torch.nn.Linear):
        raise UserError(f"icarl {SEQUENTIAL}")
    kwargs = {k: v for k, v in ctx.template.items() if k not in ("model", "criterion")}   # its own loss
    strategy = ICaRL(**kwargs, feature_extractor=model[:-1], classifier=model[-1], plugins=list(ctx.plugins),
                     memory_size=ctx.settings.replay_mem, buffer_transform=None,
                     fixed_memory=ctx.settings.icarl_fixed_memory)
    # its exemplars and class means are made after each experience before any other plugin (the recipe's
    # FiniteGuard) evaluates the model: at test the model answers by those means alone
    herding = plugin_of(strategy, "_ICaRLPlugin")
    strategy.plugins.remove(herding)
    strategy.plugins.insert(0, herding)
    return strategy


@with_model
def kept(strategy) -> dict[str, int]:
    """iCaRL: the exemplars, one mean feature vector per class, and the previous model (distillation)."""
    plugin = plugin_of(strategy, "_ICaRLPlugin")
    loss = plugin_of(strategy, "ICaRLLossPlugin")
    return {"memory": tensor_bytes(plugin.x_memory), "class_means": tensor_bytes(plugin.class_means),
            "previous_model": copy_bytes(loss.old_model)}


ENTRY = StrategyEntry(
    name="icarl", help="Avalanche ICaRL (herded exemplars, nearest-mean classifier; --scenario class, "
    "--model mlp, new classes per experience)",
    stores=MODEL + ", replay_mem exemplars, a mean feature vector per class and the previous model",
    build=build, kept_bytes=kept, settings=ICaRLSettings, scenarios=CLASS,
    check=all_checks(tensor_rows("icarl", SEQUENTIAL), new_classes("icarl")))
