"""Dev-only choices for the continual comparison: every strategy gets the same budget of settings to try.

Each :class:`~..interface.entry.StrategyEntry` lists candidate points in the order to try them
(``entry.grid``: keys of its settings class, :mod:`..interface.settings`, dotted for nested ones, e.g.
``"region_size.tolerance"``). A run has one tuning budget, the same for every strategy (``cl-graft run
--tune-budget``, default :data:`TUNE_BUDGET`, recorded in the results): with ``--tune`` the first ``budget``
points of each grid (all of a shorter grid) are run on the stream with *dev* rows in place of the test rows
and scored by their final average dev accuracy; the best point (the first on ties) is then run on the test
rows.
Test rows are never handed to the tuning runs: :func:`~cl_graft.benchmarks.data.split_dev` makes the tuning
benchmark from train and dev rows only (half of each task's dev rows select checkpoints/regions, the other half
score the grid points).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cl_graft.errors import UserError
from cl_graft.files import read_json, write_json
from cl_graft.regions.names import current_setting_names
from cl_graft.schema import MapOf, Nullable, Obj, check_json

from ..interface.settings import Settings, apply_point, has_setting
from .registry import STRATEGIES, entry_of, registry_options
from .results_file import read_results

TUNE_BUDGET = 3
"""Grid points each strategy tries by default."""


def check_budget(budget: int) -> int:
    """``budget`` if it is a number of grid points (>= 1).

    Raises:
        UserError: anything else.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise UserError(f"the tuning budget is a number of grid points >= 1, got {budget!r}")
    return budget


def tune(name: str, settings: Settings, score: Callable[[Settings], float], *,
         budget: int = TUNE_BUDGET) -> tuple[Settings, dict]:
    """Tries the first ``budget`` grid points of strategy ``name``; returns the chosen settings and the record of
    the search (``{"budget", "grid", "dev_average", "chosen"}``; empty when the strategy has nothing to tune).

    Args:
        name: a strategy of the registry (:func:`~.registry.entry_of`: built in or a plugin's).
        settings: the strategy's settings the grid points modify.
        score: ``score(settings) -> final average accuracy on the tuning (dev) stream``.
        budget: grid points each strategy of the run tries.

    A point whose run raises :class:`UserError` (one the stream cannot run, e.g. fixed regions that outgrow the
    capacity of a long stream) is not chosen: its dev average is None and its error in the record's ``failed``
    (grid index → message); when no point runs, the first error is raised. Settings that fix what the grid varies
    (:meth:`~..interface.settings.Settings.grid_fixed_by`, e.g. ``replay_per_class``) are returned untuned.
    """
    grid = entry_of(name).grid[:check_budget(budget)]
    if not grid or type(settings).grid_fixed_by(settings.to_json()) is not None:
        return settings, {}
    scores, failed = [], {}
    for i, point in enumerate(grid):
        try:
            scores.append(score(apply_point(settings, point)))
        except UserError as e:            # a point the stream cannot run (regions larger than the capacity left)
            scores.append(None)
            failed[str(i)] = str(e)
    ran = [i for i in range(len(grid)) if scores[i] is not None]
    if not ran:
        raise UserError(f"{name}: none of its {len(grid)} grid points ran on the dev rows ({failed['0']})")
    best = max(ran, key=lambda i: (scores[i], -i))
    record = {"budget": budget, "grid": [dict(p) for p in grid], "dev_average": scores, "chosen": dict(grid[best])}
    return apply_point(settings, grid[best]), {**record, **({"failed": failed} if failed else {})}


class TrialStore:
    """Where the tuning runs of one strategy keep what they did, so an interrupted ``--tune`` continues: grid point
    ``i`` (counted from 1) saves its stream state in ``folder/<i>/state`` after every experience (the runner resumes
    it from there) and, once run, its dev average in ``folder/<i>/score.json`` with the settings that ran.

    Args:
        folder: the strategy's tuning folder (``<out>/<strategy>/tune``); made on first use.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def state_dir(self, i: int) -> Path:
        """The folder grid point ``i`` saves its stream state in."""
        return self.folder / str(i) / "state"

    def score(self, i: int, settings: Settings) -> float | None:
        """The dev average grid point ``i`` recorded, None where it has not finished.

        Raises:
            UserError: a recorded point whose settings are not ``settings`` (the folder is another run's).
        """
        path = self.folder / str(i) / "score.json"
        if not path.exists():
            return None
        record = read_json(path)
        check_json(path, record, Obj({"settings": dict, "dev_average": float}))
        if record["settings"] != json.loads(json.dumps(settings.to_json())):        # as the file holds it
            raise UserError(f"{path}: recorded for other settings than this run's grid point {i}")
        return record["dev_average"]

    def record(self, i: int, settings: Settings, average: float) -> float:
        """Writes grid point ``i``'s dev average; returns it."""
        (self.folder / str(i)).mkdir(parents=True, exist_ok=True)
        write_json(self.folder / str(i) / "score.json", {"settings": settings.to_json(), "dev_average": average})
        return average


def chosen_settings(run_dir: str | Path, names: Sequence[str], given: Mapping[str, Any] | None = None
                    ) -> dict[str, dict]:
    """The grid points a ``cl-graft run --tune`` in ``run_dir`` chose, for those of ``names`` that have a grid
    not fixed by the settings ``given`` on the command line (:meth:`~..interface.settings.Settings.grid_fixed_by`).

    Returns:
        strategy → ``{"chosen": point, "from": "<run_dir> (seed s)"}``, the record a run keeps in
        ``info["tuning"]``.

    A point recorded under a setting's old name (``size`` for ``region_size``) is read under its name now
    (:func:`cl_graft.regions.names.current_setting_names`).

    Raises:
        UserError: no ``results.json`` in ``run_dir`` (or one edited after it was written), a strategy that was
            not tuned there, a recorded point that is not in the strategy's grid (the file is not a tuning record
            of this version), or, for ``names`` without a grid, a run that chose no settings at all (neither
            ``--tune`` nor ``--settings-from``: the folder is not what the option asks for, and the record, which
            names the folder only through the choices, would claim a reuse of choices never made).
    """
    path = Path(run_dir) / "results.json"
    results = read_results(path)
    tuned = Obj({}, {"info": Obj({}, {"tuning": Nullable(Obj({}, {"chosen": Nullable(dict)}))})})
    check_json(path, results, Obj({"strategies": MapOf(tuned)}, {"run": Nullable(dict)}))
    run = results.get("run") or {}
    seed = run.get("seed")
    out = {}
    tuned_here = [n for n in names if entry_of(n).grid and entry_of(n).settings.grid_fixed_by(given or {}) is None]
    for name in tuned_here:
        point = (((results["strategies"].get(name) or {}).get("info") or {}).get("tuning") or {}).get("chosen")
        if point is None:
            raise UserError(f"{path}: strategy {name!r} was not tuned there (run it with --tune first)")
        point = current_setting_names(point)
        if point not in [dict(p) for p in entry_of(name).grid]:
            raise UserError(f"{path}: {name!r} chose {point}, which is not a point of its grid")
        out[name] = {"chosen": dict(point), "from": f"{Path(run_dir)} (seed {seed})"}
    chose = run.get("tune") or run.get("settings_from") or any((r.get("info") or {}).get("tuning")
                                                                for r in results["strategies"].values())
    if not out and not chose:           # strategies without a grid: nothing names the folder in the run's record
        raise UserError(f"{path}: its run chose no settings (it ran without --tune or --settings-from), so there are "
                        f"none to reuse; give the folder of a `cl-graft run --tune`, or drop --settings-from")
    return out


def _overlap(a: str, b: str) -> bool:
    """Whether keys ``a`` and ``b`` change the same setting (equal, or one a nested field of the other)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def refuse_fixed_choices(given: Mapping[str, Any], names: Sequence[str], *, tune_budget: int | None,
                         chosen: Mapping[str, dict] | None) -> None:
    """Refuses a setting given on the command line that ``--tune`` (``tune_budget`` grid points) or
    ``--settings-from`` (``chosen``, :func:`chosen_settings`) would choose for one of the strategies ``names``:
    the run would silently replace it, and its record would name a value that never ran. A strategy whose grid the
    given settings fix (:meth:`~..interface.settings.Settings.grid_fixed_by`) is not tuned: nothing is refused.

    Raises:
        UserError: one line naming both options and the strategy.
    """
    entries = {**STRATEGIES, **{name: entry_of(name) for name in names}}             # plugins' settings too
    option = {o.key: o.name.replace("_", "-") for o in registry_options(entries.values())}
    for name in names:
        cls = entries[name].settings
        if cls.grid_fixed_by(given) is not None:                       # not tuned: nothing replaces what is given
            continue
        points = list(entries[name].grid[:tune_budget]) if tune_budget else \
            [chosen[name]["chosen"]] if chosen and name in chosen else []
        fixed = [k for k in given if k in option and has_setting(cls, k)] if points else []
        for key in fixed:
            if any(_overlap(key, k) for p in points for k in cls.implied(p)):
                how = "--tune" if tune_budget else "--settings-from"
                raise UserError(f"--{option[key]} sets what {how} chooses for {name}; give one of them, not both")
