"""Take one task's model out of a grafting run: its union-grafted weights as a standalone folder.

After a stream (Panigrahi et al. 2023, §5.2) task ``k`` is served by θ_pre plus the regions of tasks ``≤ k`` and
its head. :func:`export_task` writes exactly that model:

- a :class:`~cl_graft.training.models.TextClassifier`: the backbone in Hugging Face ``save_pretrained`` format
  (``config.json`` with the task's ``id2label``/``label2id``, ``model.safetensors``, tokenizer files), so
  ``AutoModel.from_pretrained(out)`` (``AutoModelForMaskedLM``/``AutoModelForCausalLM`` for prompt heads) loads
  it; the task's linear head in ``task_head.safetensors``; ``cl_graft_task.json`` (task, labels, head kind,
  pooling). :func:`load_task_model` reads it back into cl-graft in one call.
- any other module: its ``state_dict`` in ``model.safetensors`` plus ``cl_graft_task.json``
  (``model.load_state_dict(safetensors.torch.load_file(out / "model.safetensors"))``).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from cl_graft.artifacts import read_json, write_json
from cl_graft.errors import UserError
from cl_graft.grafting.graft import clone_model, patch_
from cl_graft.regions.io import atomic_write
from cl_graft.schema import Obj, check_json
from cl_graft.task import TaskSpec
from cl_graft.training.models import TextClassifier, build_classifier
from cl_graft.written import staged_folder, write_failed

from .owner_map import OwnerMap

TASK_FILE = "cl_graft_task.json"
HEAD_FILE = "task_head.safetensors"
STATE_FILE = "model.safetensors"


@torch.no_grad()
def task_model(owners: OwnerMap, model: nn.Module, task: str) -> nn.Module:
    """A copy of ``model`` holding ``task``'s union-grafted weights (θ_pre, then the regions and heads of the
    tasks learned up to ``task``); ``model`` (the owner map's root: ``adapter.clf`` for a ``TaskAdapter``) is
    not modified.

    Raises:
        UserError: a task the map never learned, or a model without the map's tensors.
    """
    k = owners.index(task)
    if k is None:
        raise UserError(f"no skill for task {task!r}; the skills hold {', '.join(owners.tasks) or 'no task'}")
    out = clone_model(model)
    params = dict(out.named_parameters())
    missing = [n for n in owners.names if n not in params]
    if missing:
        raise UserError(f"model does not match the skills: it has no tensor {missing[0]!r}")
    for n in owners.names:
        params[n].copy_(owners.pre[n])
    for patch in owners.patches[:k + 1]:
        patch_(out, patch)
    return out


def export_task(owners: OwnerMap, model: nn.Module, task: str, out: str | os.PathLike) -> Path:
    """Writes ``task``'s model to the folder ``out`` (see the module docstring); returns it."""
    grafted, out = task_model(owners, model, task), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not isinstance(grafted, TextClassifier):
        state = {n: t.detach().cpu().contiguous() for n, t in grafted.state_dict().items()}
        atomic_write(out / STATE_FILE, lambda tmp: save_file(state, tmp))
        write_json(out / TASK_FILE, {"task": task, "format": "state_dict", "model": type(grafted).__name__})
        return out
    spec = grafted.tasks[grafted.resolve_task(task)]
    backbone = grafted.backbone
    backbone.config.id2label = dict(enumerate(spec.labels))
    backbone.config.label2id = {label: i for i, label in enumerate(spec.labels)}
    try:
        with staged_folder(out, within=out) as tmp:                # whole files or none (a full disk)
            backbone.save_pretrained(tmp, safe_serialization=True)
            grafted.tokenizer.save_pretrained(tmp)
    except (OSError, SafetensorError) as e:
        raise write_failed(out / STATE_FILE, e) from None
    if grafted.head_kind == "linear":
        head = {n: p.detach().cpu().contiguous() for n, p in grafted.heads[spec.name].named_parameters()}
        atomic_write(out / HEAD_FILE, lambda tmp: save_file(head, tmp))
    write_json(out / TASK_FILE, {"task": spec.to_json(), "format": "transformers", "head": grafted.head_kind,
                                 "pooling": grafted.pooling, "max_length": grafted.max_length,
                                 "source": grafted.source, "skills_of": owners.tasks[:owners.index(task) + 1]})
    return out


def load_task_model(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> TextClassifier:
    """An exported text task back as a :class:`~cl_graft.training.models.TextClassifier` (one task, its head)."""
    path = Path(path)
    cfg = read_json(path / TASK_FILE)
    if not isinstance(cfg, dict) or cfg.get("format") != "transformers":
        raise UserError(f"{path}: not a text task exported by cl-graft ({TASK_FILE} missing or of another format)")
    check_json(path / TASK_FILE, cfg, Obj({"task": dict, "head": str, "pooling": str, "max_length": int,
                                           "source": str}))
    clf = build_classifier(str(path), head=cfg["head"], pooling=cfg["pooling"], max_length=cfg["max_length"],
                           device=device)
    spec = TaskSpec.from_json(cfg["task"])
    clf.add_task(spec)
    if cfg["head"] == "linear":
        clf.heads[spec.name].load_state_dict(load_file(str(path / HEAD_FILE)))
    clf.source = cfg["source"]
    return clf.to(device).eval()
