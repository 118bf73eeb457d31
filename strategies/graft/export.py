"""Take one task's model out of a grafting run: its union-grafted weights as a standalone folder.

After a stream (Panigrahi et al. 2023, §5.2) task ``k`` is served by θ_pre plus the regions of tasks ``≤ k`` and
its head. :func:`export_task` writes exactly that model:

- a :class:`~cl_graft.training.models.TextClassifier` (alone, or in the strategy's ``TaskAdapter`` or
  ``SharedHead``): the backbone in Hugging Face ``save_pretrained`` format (``config.json`` with the task's
  ``id2label``/``label2id``, ``model.safetensors``, tokenizer files), so ``AutoModel.from_pretrained(out)``
  (``AutoModelForMaskedLM``/``AutoModelForCausalLM`` for prompt heads) loads it; the task's linear head in
  ``task_head.safetensors``; ``cl_graft_task.json`` (task, labels, head kind, pooling).
  :func:`load_task_model` reads it back into cl-graft in one call. A task of a class-incremental split text
  stream, which one head over every class answers (a ``SharedHead``, or a classifier whose one task is that
  head), exports that head over the classes the run had seen when it learned the task (the classes of its group
  and of the groups before), stated in ``cl_graft_task.json``'s ``head_classes`` (the head, the class ids kept,
  in order, and the rule).
- any other module: its ``state_dict`` without the other tasks' heads in ``model.safetensors``, plus
  ``cl_graft_task.json`` (the task, its head tensors, and the Avalanche head adaptations to replay);
  ``load_task_model(out, model=Constructor(...))`` puts it back into a model fresh from its constructor.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn

from cl_graft.errors import UserError
from cl_graft.files import read_json, read_safetensors, write_json, write_safetensors
from cl_graft.grafting.graft import patch_
from cl_graft.schema import Obj, check_json
from cl_graft.task import TaskSpec
from cl_graft.training.models import TextClassifier, build_classifier, clone_model
from cl_graft.written import staged_folder, write_failed

from .adaptations import classes_seen, replay_adaptation_
from .owner_map import OwnerMap
from .targets import HeadNames, graft_target

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


def export_task(owners: OwnerMap, model: nn.Module, task: str, out: str | os.PathLike, *,
                heads: HeadNames | None = None) -> Path:
    """Writes ``task``'s model to the folder ``out`` (see the module docstring); returns it. ``model``: the
    strategy's model or the owner map's root (not modified); ``heads``: the strategy's head hook, when it was
    given one."""
    target = graft_target(model, heads=heads)
    grafted, out = task_model(owners, target.root, task), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not isinstance(grafted, TextClassifier):
        target = graft_target(grafted, heads=heads)
        own = target.heads(target.label(task))
        others = set(target.heads(None)) - set(own)
        state = {n: t.detach().cpu().contiguous() for n, t in grafted.state_dict().items() if n not in others}
        write_safetensors(out / STATE_FILE, state)
        write_json(out / TASK_FILE, {"task": task, "format": "state_dict", "model": type(grafted).__name__,
                                     "head": own, "adaptations": owners.adaptations})
        return out
    shared = target.shared_head or _only_head(grafted, task)
    if shared is None:
        spec, classes = grafted.tasks[grafted.resolve_task(task)], None
    else:
        label = target.label(task) if target.task_names is not None else owners.index(task)
        spec, classes = _seen_head(grafted.tasks[shared], task, classes_seen(owners.adaptations, label))
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
        head = grafted.heads[shared or spec.name]
        write_safetensors(out / HEAD_FILE, {n: (p if classes is None else p[classes]).detach().cpu().contiguous()
                                            for n, p in head.named_parameters()})          # (C, H), (C,)
    stated = {} if classes is None else {"head_classes": {
        "head": shared, "ids": classes, "rule": f"every class seen up to {task} (its group and the groups before)"}}
    write_json(out / TASK_FILE, {"task": spec.to_json(), "format": "transformers", "head": grafted.head_kind,
                                 "pooling": grafted.pooling, "max_length": grafted.max_length,
                                 "source": grafted.source, "skills_of": owners.tasks[:owners.index(task) + 1],
                                 **stated})
    return out


def _only_head(clf: TextClassifier, task: str) -> str | None:
    """The classifier's one task when ``task`` is not one of its own: the head that answered every task of a
    class-incremental stream; else None."""
    return next(iter(clf.tasks)) if task not in clf.tasks and len(clf.tasks) == 1 else None


def _seen_head(head: TaskSpec, task: str, classes: list[int]) -> tuple[TaskSpec, list[int]]:
    """``task``'s spec over the shared ``head``'s ``classes`` (its labels and label words at those ids), with them.

    Raises:
        UserError: fewer than two classes (a one-class head answers nothing).
    """
    if len(classes) < 2:
        raise UserError(f"task {task!r} had seen {len(classes)} class of the head {head.name!r}; a head needs two "
                        f"to answer, export a later task")
    words = tuple(head.label_words[c] for c in classes) if head.label_words else ()
    return dataclasses.replace(head, name=task, labels=tuple(head.labels[c] for c in classes),
                               label_words=words), classes


def load_task_model(path: str | os.PathLike, *, model: nn.Module | None = None,
                    device: str | torch.device = "cpu") -> nn.Module:
    """An exported task back in one call: a text task as a :class:`~cl_graft.training.models.TextClassifier` (one
    task, its head); any other task IN PLACE into ``model`` (fresh from its constructor: its Avalanche heads are
    rebuilt first), returned in eval mode. Other tasks' heads in ``model`` keep the constructor's values.

    Raises:
        UserError: not an exported task, a state-dict export without ``model``, or a model that does not match.
    """
    path = Path(path)
    cfg = read_json(path / TASK_FILE)
    if isinstance(cfg, dict) and cfg.get("format") == "state_dict":
        if model is None:
            raise UserError(f"{path}: task {cfg['task']!r} was exported from a {cfg['model']}; pass "
                            f"model= (one built by its constructor) to load it")
        return _load_state_task(path, cfg, model).to(device).eval()
    if not isinstance(cfg, dict) or cfg.get("format") != "transformers":
        raise UserError(f"{path}: not a task exported by cl-graft ({TASK_FILE} missing or of another format)")
    check_json(path / TASK_FILE, cfg, Obj({"task": dict, "head": str, "pooling": str, "max_length": int,
                                           "source": str}))
    clf = build_classifier(str(path), head=cfg["head"], pooling=cfg["pooling"], max_length=cfg["max_length"],
                           device=device)
    spec = TaskSpec.from_json(cfg["task"])
    clf.add_task(spec)
    if cfg["head"] == "linear":
        clf.heads[spec.name].load_state_dict(read_safetensors(path / HEAD_FILE))
    clf.source = cfg["source"]
    return clf.to(device).eval()


@torch.no_grad()
def _load_state_task(path: Path, cfg: dict, model: nn.Module) -> nn.Module:
    replay_adaptation_(model, list(cfg.get("adaptations") or []))
    state = model.state_dict()
    saved = read_safetensors(path / STATE_FILE)
    bad = [n for n, t in saved.items() if n not in state or state[n].shape != t.shape]
    if bad:
        raise UserError(f"{path / STATE_FILE}: tensor {bad[0]!r} does not match the model; build it as the run did")
    missing = set(state) - set(saved) - set(graft_target(model).heads(None))
    if missing:
        raise UserError(f"{path / STATE_FILE}: the model's {min(missing)!r} is not in the export")
    for n, t in saved.items():
        state[n].copy_(t)
    return model
