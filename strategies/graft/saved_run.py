"""One save and one load for a continual-grafting run of any model: safetensors + JSON, no pickle.

A grafting run (Panigrahi et al. 2023, §5.2) is fully described by its :class:`~.owner_map.OwnerMap` (θ_pre of the
graftable tensors, each task's region values and head, feature statistics, per-task metadata) plus the rest of the
model's state: tensors that are not graftable (frozen all along, so still at their θ_pre values), buffers, and the
heads of tasks not learned yet. :func:`save_run` writes both into one folder:

- the owner map's files (``skills.json``, ``task-KK/``, ``features.safetensors``) and, with ``pre=True`` (the
  default), ``pre.safetensors``: θ_pre itself;
- ``model_rest.safetensors``: every other entry of the model's ``state_dict`` (with ``pre=False`` only buffers and
  heads: the non-graftable parameters then come from the caller's model at θ_pre, e.g. a pre-trained encoder);
- ``graft_run.json`` (written last): the format, which files hold what, and the strategy's settings.

:func:`load_run_` rebuilds the run in a model fresh from its constructor, in a new process: Avalanche's dynamic
modules (``MultiHeadClassifier``, ``IncrementalClassifier``) first get their heads back by replaying the head
adaptations the run recorded (:func:`~.adaptations.replay_adaptation_`: the task labels and classes of each experience the model
was adapted to, kept in :attr:`OwnerMap.adaptations`), then every tensor is written from the files.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from cl_graft.errors import UserError
from cl_graft.files import read_json, read_safetensors, write_json, write_safetensors

from .adaptations import replay_adaptation_
from .owner_map import OwnerMap

RUN_FILE = "graft_run.json"
REST_FILE = "model_rest.safetensors"
FORMAT_VERSION = 1


def save_run(directory: str | os.PathLike, owners: OwnerMap, model: nn.Module, *, heads: list[str],
             pre: bool = True, settings: dict | None = None) -> Path:
    """Writes the run into ``directory`` (see the module docstring); returns it.

    Args:
        owners: the run's owner map (its names are tensors of ``model``).
        model: the owner map's root module, holding the run's values (every learned region and head).
        heads: the names of every task's head tensors in ``model``.
        pre: also write θ_pre (graftable tensors and every other parameter); False for a base model the
            loader supplies itself (its non-graftable parameters must then still be at θ_pre).
        settings: JSON-serialisable strategy settings to record.
    """
    directory = Path(directory)
    owners.save(directory, pre=pre)
    params = {n for n, _ in model.named_parameters()}
    keep = set(heads) if not pre else params
    rest = {n: t.detach().cpu().contiguous() for n, t in model.state_dict().items()
            if n not in owners.pre and (n not in params or n in keep)}
    write_safetensors(directory / REST_FILE, rest)
    write_json(directory / RUN_FILE, {"format_version": FORMAT_VERSION, "pre": pre, "rest": sorted(rest),
                                      "settings": settings or {}})
    return directory


def read_settings(directory: str | os.PathLike) -> dict:
    """The settings :func:`save_run` recorded in ``directory``."""
    cfg = read_json(Path(directory) / RUN_FILE)
    if not isinstance(cfg, dict) or cfg.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{Path(directory) / RUN_FILE}: not a grafting run of format {FORMAT_VERSION}")
    return dict(cfg.get("settings") or {})


@torch.no_grad()
def load_run_(directory: str | os.PathLike, model: nn.Module) -> OwnerMap:
    """Puts the run saved in ``directory`` IN PLACE into ``model`` (fresh from its constructor; with a run saved
    with ``pre=False``: at θ_pre) and returns its owner map.

    Raises:
        UserError: a missing or malformed folder, or a model whose tensors do not match the saved ones.
    """
    directory = Path(directory)
    read_settings(directory)
    pre = bool(read_json(directory / RUN_FILE).get("pre"))
    owners = OwnerMap.load(directory, model)
    replay_adaptation_(model, owners.adaptations)
    rest = read_safetensors(directory / REST_FILE)
    state = model.state_dict()
    for name, tensor in rest.items():
        if name not in state or state[name].shape != tensor.shape:
            raise UserError(f"{directory / REST_FILE}: tensor {name!r} does not match the model "
                            f"({'absent' if name not in state else tuple(state[name].shape)} vs "
                            f"{tuple(tensor.shape)}); build the model as the run did")
        state[name].copy_(tensor)
    params = {n for n, _ in model.named_parameters()}
    missing = [n for n in state if n not in rest and n not in owners.pre and (pre or n not in params)]
    if missing:
        raise UserError(f"{directory}: the model has state {missing[0]!r} the run did not save")
    owners.apply_(model)
    return owners
