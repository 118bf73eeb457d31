"""Saved skills cross-checked on load: a skills folder whose files disagree with each other is refused with one
line naming the file and the field, never turned into a silently wrong model.

A skills folder (:meth:`~.owner_map.OwnerMap.save`) spreads one run over several files: ``skills.json`` names the
tasks in the order they were learned, and each ``task-KK/patch_config.json`` records, in its region's meta, the
task it was learned for. Reordering ``skills.json``'s tasks, swapping two task folders or renaming a task would
still load, each task then served by another task's region and head. :func:`load_skills` reads the folder with
:meth:`OwnerMap.load <.owner_map.OwnerMap.load>` (shapes and the fingerprint of θ_pre checked there) after checking
every field of ``skills.json`` against :data:`SKILLS_SCHEMA`, then checks every cross-reference: task names, their
order against each patch's own record, the count of task folders, each patch's tensors and size against
``skills.json``, and the per-task metadata's tasks.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from torch import nn

from cl_graft.errors import UserError
from cl_graft.grafting.patch_io import PATCH_CONFIG
from cl_graft.schema import ListOf, MapOf, Nullable, Obj, read_checked

from .owner_map import MAP_CONFIG, OwnerMap

ADAPTATION_SCHEMA = Obj({"training": bool, "task_labels": ListOf(int), "classes": ListOf(int)})
SKILLS_SCHEMA = Obj({"format_version": int, "tasks": ListOf(str), "names": ListOf(str),
                     "shapes": MapOf(ListOf(int)), "pre_fingerprint": str},
                    {"features": Nullable(ListOf(Nullable(int))), "sizes": ListOf(int), "pre": bool,
                     "task_meta": MapOf(dict), "adaptations": ListOf(ADAPTATION_SCHEMA),
                     "class_heads": Nullable(dict)})
TASK_FOLDER = re.compile(r"^task-(\d+)$")


def check_task_name(name: str, where: str) -> str:
    """Returns ``name`` if it can name a task: not empty, no path separator, not ``.`` or ``..``, no control
    character.

    Raises:
        UserError: ``<where>: task name '../x' ...``.
    """
    if not name or name in (".", "..") or any(c in name for c in "/\\") or any(ord(c) < 32 for c in name):
        raise UserError(f"{where}: {name!r} cannot name a task (empty, a path or a control character)")
    return name


def load_skills(directory: str | os.PathLike, model: nn.Module) -> OwnerMap:
    """:meth:`OwnerMap.load <.owner_map.OwnerMap.load>` of ``directory`` for ``model``, with every file and
    cross-reference checked (see the module docstring); ``model`` is not modified.

    Raises:
        UserError: a missing or malformed file, or files that disagree (one line naming the file and the field).
    """
    directory = Path(directory)
    config_path = directory / MAP_CONFIG
    cfg = read_checked(config_path, SKILLS_SCHEMA)
    tasks = cfg["tasks"]
    for k, task in enumerate(tasks):
        check_task_name(task, f"{config_path}: field 'tasks[{k}]'")
    extra = sorted(p.name for p in directory.iterdir() if TASK_FOLDER.match(p.name)
                   and int(TASK_FOLDER.match(p.name).group(1)) >= len(tasks))
    if extra:
        raise UserError(f"{directory / extra[0]}: a task folder {MAP_CONFIG} does not list (field 'tasks' names "
                        f"{len(tasks)}); a leftover of another save?")
    unknown = sorted(set(cfg.get("task_meta", {})) - set(tasks))
    if unknown:
        raise UserError(f"{config_path}: field 'task_meta' names {unknown[0]!r}, not a task of field 'tasks'")
    sizes = cfg.get("sizes")
    if sizes is not None and len(sizes) != len(tasks):
        raise UserError(f"{config_path}: field 'sizes' has {len(sizes)} entries for {len(tasks)} tasks")
    owners = OwnerMap.load(directory, model)
    shapes = {n: tuple(t.shape) for n, t in owners.pre.items()}
    for k, (task, patch) in enumerate(zip(owners.tasks, owners.patches)):
        where = directory / f"task-{k:02d}" / PATCH_CONFIG
        recorded = patch.region.meta.get("task")
        if recorded != task:
            raise UserError(f"{where}: field 'meta.task' is {recorded!r} but {MAP_CONFIG} lists {task!r} as task "
                            f"{k}; the folder's files do not belong together")
        if patch.region.shapes != shapes:
            raise UserError(f"{where}: field 'shapes' differs from {MAP_CONFIG}'s")
        if sizes is not None and patch.region.size != sizes[k]:
            raise UserError(f"{config_path}: field 'sizes[{k}]' is {sizes[k]}, but task {task!r}'s patch holds "
                            f"{patch.region.size} elements")
    return owners
