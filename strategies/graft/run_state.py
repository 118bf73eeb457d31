"""Graft's state between the experiences of ``cl-graft run`` (the ``state`` of its entry, :mod:`.entry`): the
owner map saved after every experience into ``<state>/skills``, loaded on ``--resume`` through
:func:`~.saved_checks.load_skills` (every file cross-checked) into the fresh model.

The runner's progress file is the commit point. After an experience, :meth:`OwnerMap.save <.owner_map.OwnerMap.save>`
writes the new task's ``task-KK/`` folder, the feature statistics and ``skills.json`` (last), then the runner
writes its progress file. A process killed between those writes leaves one of these, and resume handles each:

- ``skills.json`` lists one task more than the progress file commits: that task's files are whole
  (``skills.json`` is written last, and every file is cross-checked on load); it is kept and only its accuracy
  row is measured again;
- a ``task-KK`` folder ``skills.json`` does not list, ``KK`` the next task's number, holding only a patch's
  files (:data:`~cl_graft.grafting.patch_io.PATCH_CONFIG`, :data:`~cl_graft.grafting.patch_io.PATCH_TENSORS`)
  or their temporary names: the new task's patch from a save that ended before ``skills.json``. It is removed
  before loading, and the experience is trained again;
- ``features.safetensors`` holding the statistics of that next task (tensors ``KK.*``) besides the listed tasks'
  (the same torn save, after the statistics): the file is written again without them.

Anything else beyond the progress file (another task folder, a file the project does not write there, a link, the
statistics of a later task) is no torn save of this run: resume refuses it with one line naming it and deletes
nothing (later statistics: :func:`~..routing.feature_store.load_stats` refuses them).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from torch import nn

from cl_graft.errors import UserError
from cl_graft.files import read_safetensors, write_safetensors
from cl_graft.grafting.patch_io import PATCH_CONFIG, PATCH_TENSORS
from cl_graft.schema import ListOf, Nullable, Obj, check_json, read_checked
from cl_graft.written import is_temporary

from ..interface.entry import SavedState
from ..routing.feature_store import FEATURES_FILE
from .owner_map import MAP_CONFIG
from .saved_checks import SKILLS_SCHEMA, TASK_FOLDER, load_skills

SKILLS_DIR = "skills"
RECORD_SCHEMA = Obj({"tasks": ListOf(str), "pre_fingerprint": str},
                    {"localize_seconds": ListOf(Nullable(float)), "feature_seconds": ListOf(Nullable(float))})


def region_plugin(strategy):
    """The strategy's :class:`~.plugin.GraftPlugin` (graft's own, or a subclass such as PackNet's), which keeps
    the owner map."""
    from .plugin import GraftPlugin  # Avalanche: only once a strategy exists

    return next(p for p in strategy.plugins if isinstance(p, GraftPlugin))


SECONDS = ("localize_seconds", "feature_seconds")
"""The per-task seconds a :class:`~.plugin.GraftPlugin` measures; the progress file's state record keeps them
(timings are not part of the skills: ``skills.json`` stays the same from run to run)."""


def task_seconds(plugin) -> dict[str, list]:
    """Each learned task's seconds of region search and of feature statistics, in task order, the earlier
    sessions' of a resumed run included (the owner map's ``carried_seconds``, which :meth:`OwnerMapState.load_`
    sets; None for a task whose seconds no session committed), then the plugin's own of this session."""
    carried = plugin.owners.carried_seconds
    return {what: [*carried.get(what, []), *getattr(plugin, what)] for what in SECONDS}


def drop_torn_task_(skills: Path) -> None:
    """Removes what a save torn before ``skills.json`` left in ``skills`` of the next task (its ``task-KK``
    folder, its feature statistics; see the module docstring); nothing when there is none.

    Raises:
        UserError: a task folder beyond ``skills.json`` that no torn save of a run leaves, or a link in place of
            the statistics.
    """
    listed = len(read_checked(skills / MAP_CONFIG, SKILLS_SCHEMA)["tasks"])
    _drop_torn_features_(skills / FEATURES_FILE, listed)
    beyond = sorted(p for p in skills.iterdir() if (m := TASK_FOLDER.match(p.name)) and int(m.group(1)) >= listed)
    if not beyond:
        return
    torn = beyond[0]
    foreign = len(beyond) > 1 or torn.name != f"task-{listed:02d}" or torn.is_symlink() or not torn.is_dir() or \
        any(f.is_symlink() or not f.is_file() or not (f.name in (PATCH_CONFIG, PATCH_TENSORS) or is_temporary(f.name))
            for f in torn.iterdir())
    if foreign:
        where = beyond[1] if len(beyond) > 1 and torn.name == f"task-{listed:02d}" else torn
        raise UserError(f"{where}: a task folder {MAP_CONFIG} does not list, and not one a torn save of this run "
                        f"leaves; resume deletes nothing there (move it away or use a new --out)")
    shutil.rmtree(torn)


def _drop_torn_features_(path: Path, listed: int) -> None:
    """Writes ``path`` again without the tensors of task position ``listed`` (the task a torn save added)."""
    if path.is_symlink():
        raise UserError(f"{path}: a symbolic link; resume writes nothing through links (use a new --out)")
    if not path.is_file():
        return
    tensors = read_safetensors(path)
    kept = {k: t for k, t in tensors.items() if k.partition(".")[0] != str(listed)}
    if len(kept) == len(tensors):
        return
    if kept:
        write_safetensors(path, kept)
    else:
        path.unlink()


class OwnerMapState:
    """Saves and loads the owner map of the strategy's :class:`~.plugin.GraftPlugin` (graft's and PackNet's)."""

    def save(self, strategy, directory: Path) -> dict:
        plugin = region_plugin(strategy)
        owners = plugin.owners
        owners.save(directory / SKILLS_DIR)
        return {"tasks": list(owners.tasks), "pre_fingerprint": owners.pre_fingerprint, **task_seconds(plugin)}

    def load_(self, directory: Path, model: nn.Module, *, committed: int, record: dict) -> SavedState:
        """The saved owner map, applied to ``model`` (a :class:`~cl_graft.strategies.adapter.TaskAdapter`'s
        classifier, or the model itself), as :class:`SavedState` for the builder's ``owners``."""
        skills = directory / SKILLS_DIR
        record = check_json(directory, record, RECORD_SCHEMA)
        drop_torn_task_(skills)
        clf = getattr(model, "clf", model)
        owners = load_skills(skills, clf)
        done = len(owners.tasks)
        if len(record["tasks"]) != committed:
            raise UserError(f"{directory}: the progress file's field 'state.tasks' names {len(record['tasks'])} "
                            f"tasks, its field 'rows' commits {committed}")
        if done not in (committed, committed + 1):
            raise UserError(f"{skills / MAP_CONFIG}: field 'tasks' holds {done} tasks, the progress file "
                            f"commits {committed}")
        if owners.tasks[:committed] != record["tasks"]:
            raise UserError(f"{skills / MAP_CONFIG}: field 'tasks' begins {owners.tasks[:committed]}, "
                            f"the progress file's field 'state.tasks' is {record['tasks']}")
        if owners.pre_fingerprint != record["pre_fingerprint"]:
            raise UserError(f"{skills / MAP_CONFIG}: field 'pre_fingerprint' differs from the progress "
                            f"file's field 'state.pre_fingerprint': the state is of another model")
        owners.carried_seconds = {what: [*record.get(what, [])[:committed], *[None] * (done - committed)]
                                  for what in SECONDS}            # a torn task's seconds were never committed
        owners.apply_(clf)
        if clf is not model and owners.adaptations:                 # the wrapper's own (a SharedHead's classes seen)
            from .adaptations import replay_adaptation_

            replay_adaptation_(model, owners.adaptations)
        return SavedState(owners, done)
