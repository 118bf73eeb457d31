"""What each baseline stores beyond the model it starts from: the trained model plus the state its method keeps
between experiences, in bytes.

Every function here is an entry's ``kept_bytes(strategy, model) -> (bytes, info)``: ``bytes`` = the trained
model (:func:`~..interface.entry.model_bytes`; a multi-head copy counts its trunk and every head) + the
method's state; ``info["kept"]`` = that state by part (bytes), ``info["model_bytes"]`` the model's. Memory rows
count their inputs (:func:`~..interface.entry.row_bytes`: a digit's 64 float32 pixels, a text row's int32
token ids), as ``replay-matched`` sizes its memory; labels (one integer per row) are not counted, for any
strategy. Tensors a method recomputes at every step but keeps as attributes (GEM's gradients of each
experience's memory, A-GEM's reference gradient) are counted: they are held while it trains.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from ..interface.entry import model_bytes, row_bytes


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in ``obj``: a tensor, a module (parameters and buffers), Avalanche's ``ParamData``
    (its ``data``), or dicts, lists and tuples of those (nested)."""
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, torch.nn.Module):
        return sum(tensor_bytes(t) for t in (*obj.parameters(), *obj.buffers()))
    if isinstance(obj, Mapping):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    data = getattr(obj, "data", None)
    return tensor_bytes(data) if isinstance(data, torch.Tensor) else 0


def rows_bytes(dataset: Iterable | None) -> int:
    """Bytes of a memory's rows (their inputs, :func:`row_bytes`)."""
    return 0 if dataset is None else sum(row_bytes(dataset[i]) for i in range(len(dataset)))


def trained_model(strategy) -> torch.nn.Module:
    """The model the strategy trains (unwrapped from ``DistributedDataParallel``)."""
    return getattr(strategy.model, "module", strategy.model)


def plugin_of(strategy, kind: str):
    """The strategy's plugin whose class is named ``kind`` (Avalanche's, e.g. ``EWCPlugin``)."""
    return next(p for p in strategy.plugins if type(p).__name__ == kind)


def _with_model(kept: Callable[[Any], dict[str, int]], rows: Callable[[Any], int] | None = None
                ) -> Callable[[Any, torch.nn.Module], tuple[int, dict]]:
    """An entry's storage function: the trained model's bytes plus ``kept(strategy)`` (part → bytes); with
    ``rows`` (a replay memory), ``info["memory_rows"]`` and ``info["memory_bytes"]`` too."""
    def storage(strategy, model: torch.nn.Module) -> tuple[int, dict]:
        trained = trained_model(strategy)
        parts = kept(strategy)
        size = model_bytes(trained)
        info = {"model_bytes": size, "kept": parts}
        if rows is not None:
            info.update(memory_rows=rows(strategy), memory_bytes=parts["memory"])
        return size + sum(parts.values()), info

    storage.__doc__ = kept.__doc__
    return storage


@_with_model
def nothing(strategy) -> dict[str, int]:
    """The trained model alone (naive, joint; single counts it once per task)."""
    return {}


@_with_model
def ewc(strategy) -> dict[str, int]:
    """EWC: per experience kept, the diagonal Fisher and the parameters after it (``separate`` mode)."""
    plugin = plugin_of(strategy, "EWCPlugin")
    return {"fisher": tensor_bytes(plugin.importances), "old_params": tensor_bytes(plugin.saved_params)}


@_with_model
def si(strategy) -> dict[str, int]:
    """SI: the parameters after the last experience, their importances, the running path integral; and the
    per-step scratch copies Avalanche keeps (old and new parameters, gradients, trajectory: 4 more × P)."""
    plugin = next(p for p in strategy.plugins if hasattr(p, "syn_data"))
    syn = plugin.syn_data
    return {"old_params": tensor_bytes(plugin.ewc_data[0]), "importances": tensor_bytes(plugin.ewc_data[1]),
            "path_integral": tensor_bytes(syn["cum_trajectory"]),
            "step_scratch": tensor_bytes([syn[k] for k in ("old_theta", "new_theta", "grad", "trajectory")])}


@_with_model
def lwf(strategy) -> dict[str, int]:
    """LwF: a copy of the model after the previous experience (its distillation teacher)."""
    plugin = plugin_of(strategy, "LwFPlugin")
    return {"previous_model": tensor_bytes(plugin.lwf.prev_model)}


def _buffer(strategy):
    """The replay buffer of a strategy with a storage policy (Replay's plugin, ER-ACE's and DER's own)."""
    owner = strategy if hasattr(strategy, "storage_policy") else \
        next(p for p in strategy.plugins if hasattr(p, "storage_policy"))
    return owner.storage_policy.buffer


def _replay(strategy) -> dict[str, int]:
    """Replay, ER-ACE: the memory's rows."""
    return {"memory": rows_bytes(_buffer(strategy))}


def memory_rows(strategy) -> int:
    """Rows in the memory of a strategy with a storage policy."""
    return len(_buffer(strategy))


replay = _with_model(_replay, memory_rows)


def _der(strategy) -> dict[str, int]:
    """DER: the memory's rows and the logits stored with each."""
    buffer = _buffer(strategy)
    logits = sum(tensor_bytes(buffer[i][3]) for i in range(len(buffer)))
    return {"memory": rows_bytes(buffer), "logits": logits}


der = _with_model(_der, memory_rows)


@_with_model
def gem(strategy) -> dict[str, int]:
    """GEM: ``gem_patterns`` rows per experience and the gradient of each experience's memory (E × P floats)."""
    plugin = plugin_of(strategy, "GEMPlugin")
    return {"memory": tensor_bytes(plugin.memory_x), "gradients": tensor_bytes(plugin.G)}


@_with_model
def agem(strategy) -> dict[str, int]:
    """A-GEM: ``gem_patterns`` rows per experience and the reference gradient (P floats)."""
    plugin = plugin_of(strategy, "AGEMPlugin")
    return {"memory": sum(rows_bytes(b) for b in plugin.buffers),
            "reference_gradient": tensor_bytes(plugin.reference_gradients)}


@_with_model
def cumulative(strategy) -> dict[str, int]:
    """Cumulative: every training row seen so far (it retrains on all of them)."""
    return {"rows": rows_bytes(strategy.dataset)}


@_with_model
def icarl(strategy) -> dict[str, int]:
    """iCaRL: the exemplars, one mean feature vector per class, and the previous model (distillation)."""
    plugin = plugin_of(strategy, "_ICaRLPlugin")
    loss = plugin_of(strategy, "ICaRLLossPlugin")
    return {"memory": tensor_bytes(plugin.x_memory), "class_means": tensor_bytes(plugin.class_means),
            "previous_model": tensor_bytes(loss.old_model)}


@_with_model
def bic(strategy) -> dict[str, int]:
    """BiC: the replay memory, the held-out rows that fit the bias layer, the bias layer and the previous
    model (distillation)."""
    plugin = next(p for p in strategy.plugins if hasattr(p, "val_buffer"))
    held_out = sum(rows_bytes(b.buffer) for b in plugin.val_buffer.values())
    return {"memory": rows_bytes(plugin.storage_policy.buffer), "held_out": held_out,
            "bias_layer": tensor_bytes(plugin.bias_layer), "previous_model": tensor_bytes(plugin.model_old)}
