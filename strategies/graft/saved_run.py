"""One save and one load for a continual-grafting run of any model: safetensors + JSON, no pickle.

A grafting run (Panigrahi et al. 2023, §5.2) is fully described by its :class:`~.owner_map.OwnerMap` (θ_pre of the
graftable tensors, each task's region values and head, feature statistics, per-task metadata) plus the rest of the
model's state: tensors that are not graftable (frozen all along, so still at their θ_pre values), buffers, and the
heads of tasks not learned yet. :func:`save_run` writes both into one folder:

- the owner map's files (``skills.json``, ``task-KK/``, ``features.safetensors``) and, with ``pre=True`` (the
  default), ``pre.safetensors``: θ_pre itself;
- ``model_rest.safetensors``: every other entry of the model's ``state_dict`` (with ``pre=False`` only buffers and
  heads: the non-graftable parameters then come from the caller's model at θ_pre, e.g. a pre-trained encoder);
- ``graft_run.json`` (written last): the format, which files hold what, the strategy's settings and the sha256
  of every file of the save.

A save follows the commands' rules for a folder: one saver at a time (:class:`~cl_graft.folder_lock.FolderLock`:
a second fails at once, naming the first); the whole save is first written into a temporary folder inside
``directory``, then moved into place, and only files an earlier save listed are replaced or removed (a file of the
user's is kept, and one in the way of the save or in a task folder is refused); no symbolic link under
``directory`` is followed (:func:`~cl_graft.outdir.refuse_links`, as ``--out``'s); while files move,
``graft_run.json`` says the save is unfinished, so a crash leaves a folder that loads refuse and the next save
cleans. Every refusal is one line.

:func:`load_run_` rebuilds the run in a model fresh from its constructor, in a new process: Avalanche's dynamic
modules (``MultiHeadClassifier``, ``IncrementalClassifier``, a ``SharedHead``'s classes seen) first get their state
back by replaying the head adaptations the run recorded (:func:`~.adaptations.replay_adaptation_`: the task labels
and classes of each experience the model was adapted to, kept in :attr:`OwnerMap.adaptations`) on the module the
strategy trains, then every tensor is written from the files. Every file is
checked first: its sha256 against ``graft_run.json``, every field against its schema, and the skills' files against
each other (:func:`~.saved_checks.load_skills`); a mismatch is one line naming the file and the field.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cl_graft.errors import UserError
from cl_graft.files import read_json, read_safetensors, write_json, write_safetensors
from cl_graft.folder_lock import LOCK_FILE, FolderLock
from cl_graft.outdir import refuse_links
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.names import OLD_SETTING_NAMES, recorded_key
from cl_graft.schema import ListOf, MapOf, Nullable, Obj, check_json
from cl_graft.written import is_temporary, note

from ..routing.class_heads import ANSWERS, ROUTERS
from ..routing.features import parse_form
from ..routing.states import TASK_INFERENCE
from .adaptations import replay_adaptation_
from .finders import LocalizeFinder
from .owner_map import MAP_CONFIG, OwnerMap
from .plugin import MODES, RECONSTRUCT
from .saved_checks import TASK_FOLDER, load_skills
from .sizing import RegionSize

RUN_FILE = "graft_run.json"
REST_FILE = "model_rest.safetensors"
FORMAT_VERSION = 1
SETTINGS_SCHEMA = Obj({}, {"mode": str, "reconstruct": str, "task_inference": Nullable(str), "guard": bool,
                           "feature_form": str, "feature_stats": Nullable(bool), "router": str, "answer": str,
                           "finder": Nullable(Obj({"method": str, "config": dict})),
                           "region_size": Nullable(dict), **dict.fromkeys(OLD_SETTING_NAMES, Nullable(dict))})
RUN_SCHEMA = Obj({"format_version": int, "pre": bool, "rest": ListOf(str), "settings": SETTINGS_SCHEMA},
                 {"files": MapOf(str)})
UNFINISHED_SCHEMA = Obj({"format_version": int, "unfinished": ListOf(str)})
_LEGACY = re.compile(r"^(skills\.json|pre\.safetensors|features\.safetensors|model_rest\.safetensors|"
                     r"task-\d+/patch_config\.json|task-\d+/patch\.safetensors)$")
"""The files of a save made before saves listed theirs."""


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

    Raises:
        UserError: ``directory`` is a file or cannot be made, another process is saving into it, a symbolic link
            under it to a folder or out of it, a file there that no earlier save wrote is in the way or in a task
            folder, or a write failed (a full disk; the earlier save is then unfinished and loads refuse it).
    """
    directory = Path(directory)
    params = {n for n, _ in model.named_parameters()}
    keep = set(heads) if not pre else params
    rest = {n: t.detach().cpu().contiguous() for n, t in model.state_dict().items()
            if n not in owners.pre and (n not in params or n in keep)}
    record = {"format_version": FORMAT_VERSION, "pre": pre, "rest": sorted(rest), "settings": settings or {}}
    try:
        json.dumps(record)
    except (TypeError, ValueError) as e:
        raise UserError(f"the strategy's settings are not JSON-serialisable ({e}); nothing saved") from None
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{directory}: exists and is not a folder; save into a new or empty folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{directory}: cannot write there ({e.strerror or e})") from None
    lock = FolderLock(directory, f"GraftStrategy.save (pid {os.getpid()})").acquire()
    try:
        refuse_links(directory, named=str(directory))
        _remove(directory, {f for f in _tree(directory) if any(is_temporary(p) for p in Path(f).parts)})
        earlier = _earlier_save(directory)
        _refuse_foreign_tasks(directory, earlier)
        stage = Path(tempfile.mkdtemp(dir=directory, prefix=f".{RUN_FILE}.", suffix=".tmp"))
        try:
            owners.save(stage, pre=pre)
            write_safetensors(stage / REST_FILE, rest)
            new = _tree(stage)
            in_the_way = sorted((_tree(directory) - earlier) & (new | {RUN_FILE}))
            if in_the_way:
                raise UserError(f"{directory / in_the_way[0]}: no earlier save wrote it, and a save replaces only "
                                f"its own files; save into a new or empty folder")
            hashes = {f: _sha256(stage / f) for f in sorted(new)}
            write_json(directory / RUN_FILE, {"format_version": FORMAT_VERSION, "unfinished": sorted(earlier | new)})
            for f in sorted(new):
                try:
                    (directory / f).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(stage / f, directory / f)
                except OSError as e:                          # a folder of the user's where a file goes
                    raise UserError(f"{directory / f}: cannot write it ({e.strerror or e}); the save is unfinished "
                                    f"and loads refuse it, move that away and save again") from None
                note(directory / f)
            _remove(directory, earlier - new - {RUN_FILE})
            write_json(directory / RUN_FILE, {**record, "files": hashes})
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    finally:
        lock.release()
    return directory


def read_run(directory: str | os.PathLike) -> dict:
    """The checked ``graft_run.json`` of a finished save in ``directory``.

    Raises:
        UserError: a missing file, an unfinished save, or a field of the wrong kind (naming it).
    """
    path = Path(directory) / RUN_FILE
    cfg = read_json(path)
    if isinstance(cfg, dict) and "unfinished" in cfg:
        raise UserError(f"{path}: a save into this folder did not finish; save the run again")
    check_json(path, cfg, RUN_SCHEMA)
    if cfg["format_version"] != FORMAT_VERSION:
        raise UserError(f"{path}: not a grafting run of format {FORMAT_VERSION}")
    _inside(path, list(cfg.get("files", {})))
    return cfg


def read_settings(directory: str | os.PathLike) -> dict:
    """The settings :func:`save_run` recorded in ``directory``."""
    return dict(read_run(directory)["settings"])


def saved_arguments(directory: str | os.PathLike) -> dict[str, Any]:
    """The :class:`~.strategy.GraftStrategy` arguments a save recorded: ``mode``, ``reconstruct``,
    ``task_inference``, ``guard``, ``feature_form``, ``feature_stats``, ``router``, ``answer`` and, when
    recorded, ``finder`` (a
    :class:`~.finders.LocalizeFinder`) and
    ``region_size`` (a :class:`~.sizing.RegionSize`; saves made before it had that name wrote ``size``).

    Raises:
        UserError: a recorded value that is not valid, naming ``graft_run.json`` and the field.
    """
    path = Path(directory) / RUN_FILE
    saved = read_settings(directory)
    allowed = {"mode": MODES, "reconstruct": RECONSTRUCT, "task_inference": (None, *TASK_INFERENCE),
               "router": ROUTERS, "answer": ANSWERS}
    for key, values in allowed.items():
        if key in saved and saved[key] not in values:
            raise UserError(f"{path}: field 'settings.{key}' must be one of {list(values)}, got {saved[key]!r}")
    if "feature_form" in saved:
        _built(path, "settings.feature_form", lambda: parse_form(saved["feature_form"]))
    args = {k: saved[k] for k in ("mode", "reconstruct", "task_inference", "guard", "feature_form", "feature_stats",
                                  "router", "answer") if k in saved}
    finder = saved.get("finder")
    size_key = recorded_key(saved, "region_size")                  # saves before the rename: "size"
    region_size = saved.get(size_key)
    if finder:
        args["finder"] = _built(path, "settings.finder", lambda: LocalizeFinder(
            finder["method"], LocalizeConfig.from_json(finder["config"])))
    if region_size:
        args["region_size"] = _built(path, f"settings.{size_key}", lambda: RegionSize(**region_size))
    return args


@torch.no_grad()
def load_run_(directory: str | os.PathLike, model: nn.Module, *, wrapper: nn.Module | None = None) -> OwnerMap:
    """Puts the run saved in ``directory`` IN PLACE into ``model`` (fresh from its constructor; with a run saved
    with ``pre=False``: at θ_pre) and returns its owner map.

    Args:
        wrapper: the module the strategy trains when ``model`` (the owner map's root) is inside it (a
            :class:`~cl_graft.strategies.adapter.SharedHead` or ``TaskAdapter`` around its classifier, a
            ``DataParallel``), IN PLACE too: the head adaptations are replayed on it, as Avalanche adapted it
            during the run, so its own state comes back (a ``SharedHead``'s classes seen); None: ``model``.

    Raises:
        UserError: a missing, malformed or inconsistent folder (one line naming the file and the field), or a
            model whose tensors do not match the saved ones.
    """
    directory = Path(directory)
    cfg = read_run(directory)
    for f, sha in cfg.get("files", {}).items():
        if not (directory / f).is_file() or _sha256(directory / f) != sha:
            raise UserError(f"{directory / f}: {'missing' if not (directory / f).is_file() else 'differs from'} "
                            f"the save {RUN_FILE} records (field 'files.{f}'); edited, moved, or saved over")
    pre = cfg["pre"]
    skills = read_json(directory / MAP_CONFIG)
    if isinstance(skills, dict) and skills.get("pre", pre) != pre:
        raise UserError(f"{directory / MAP_CONFIG}: field 'pre' is {skills.get('pre')}, {RUN_FILE} says {pre}")
    if wrapper is not None and not any(m is model for m in wrapper.modules()):
        raise UserError(f"{type(wrapper).__name__} does not hold the {type(model).__name__} the run is loaded into; "
                        f"pass the module the strategy trains as wrapper")
    owners = load_skills(directory, model)
    replay_adaptation_(model if wrapper is None else wrapper, owners.adaptations)
    rest = read_safetensors(directory / REST_FILE)
    if sorted(rest) != sorted(cfg["rest"]):
        raise UserError(f"{directory / REST_FILE}: holds other tensors than {RUN_FILE}'s field 'rest' lists")
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


# ----- the folder --------------------------------------------------------------------------------------------
def _tree(folder: Path) -> set[str]:
    """Every file under ``folder`` but the lock file, as POSIX paths relative to it."""
    found = set()
    for root, _, files in os.walk(folder):
        found |= {(Path(root).relative_to(folder) / f).as_posix() for f in files}
    return found - {LOCK_FILE}


def _earlier_save(directory: Path) -> set[str]:
    """The files an earlier save wrote into ``directory`` (its record's list, with the record); empty for none."""
    path = directory / RUN_FILE
    if not path.exists():
        return set()
    cfg = read_json(path)
    if isinstance(cfg, dict) and "unfinished" in cfg:
        names = check_json(path, cfg, UNFINISHED_SCHEMA)["unfinished"]
    else:
        cfg = check_json(path, cfg, RUN_SCHEMA)
        names = list(cfg["files"]) if "files" in cfg else [f for f in _tree(directory) if _LEGACY.match(f)]
    _inside(path, names)
    return set(names) | {RUN_FILE}


def _refuse_foreign_tasks(directory: Path, earlier: set[str]) -> None:
    """Refuses a file in a ``task-KK`` folder that no earlier save wrote: a save would leave it, and loads refuse
    a task folder ``skills.json`` does not list (the command line's rule: cl-graft writes only beside its own)."""
    foreign = sorted(f for f in _tree(directory) - earlier if TASK_FOLDER.match(Path(f).parts[0]))
    if foreign:
        raise UserError(f"{directory / foreign[0]}: no earlier save wrote it, and a task folder is the save's own; "
                        f"move it away or save into a new or empty folder")


def _inside(path: Path, names: list[str]) -> None:
    """Refuses a listed file outside the folder (an edited record must not make a save delete it)."""
    bad = [n for n in names if Path(n).is_absolute() or ".." in Path(n).parts]
    if bad:
        raise UserError(f"{path}: lists {bad[0]!r}, a file outside the folder; this is not a record cl-graft wrote")


def _remove(directory: Path, names: set[str]) -> None:
    """Deletes ``names`` (relative paths) under ``directory``, then the sub-folders this left empty."""
    for name in sorted(names, key=lambda n: -len(Path(n).parts)):
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        for parent in path.parents:
            if parent == directory or directory not in parent.parents or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _built(path: Path, field: str, build: Callable[[], Any]) -> Any:
    """``build()``, its errors one line naming ``path`` and ``field``."""
    try:
        return build()
    except (TypeError, ValueError, UserError) as e:
        raise UserError(f"{path}: field {field!r} is not valid ({str(e).splitlines()[0] if str(e) else e})") from None
