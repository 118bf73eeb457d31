"""The progress file of a resumable strategy (``<out>/<name>/state/progress.json``): the experiences it committed.

The runner writes it after the strategy's state (:class:`~..interface.entry.StrategyState`), so it never names
more than the state holds: the stream's tasks, the settings every strategy shares (``config``) and the
strategy's own (``settings``), one row of test accuracies (each in [0, 1]) per committed experience, the
wall seconds so far, what else it has cost so far (``spent``: CPU seconds and the training and evaluation clocks,
:class:`~.clock.Clock`; absent from files of versions before it) and the record the state's save returned.
``--resume`` reads it back through the same schema layer as every other saved file (:mod:`cl_graft.schema`):
every field's kind and range, each row as long as the stream, the sha256 of its content (a hand edit that keeps
every field valid is refused too), and the stream and settings of the run; every mismatch is one line naming the
field.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from cl_graft.errors import UserError
from cl_graft.files import write_json
from cl_graft.schema import (Between, ListOf, MapOf, Obj, check_rows, check_sealed, first_difference, read_checked,
                             sealed)

from ..interface.entry import SavedState, StrategyEntry

PROGRESS_FILE = "progress.json"
PROGRESS_SCHEMA = Obj({"tasks": ListOf(str), "config": dict, "settings": dict,
                       "rows": ListOf(ListOf(Between(0.0, 1.0))), "seconds": Between(0.0), "state": dict,
                       "sha256": str},
                      {"spent": MapOf(Between(0.0))})


def write_progress(state_dir: Path, *, tasks: list[str], config: dict, settings: dict, rows: list[list[float]],
                   seconds: float, spent: dict[str, float], state: dict) -> None:
    """Commits the experiences of ``rows`` (``len(rows)`` × ``len(tasks)`` accuracies) in ``state_dir``, with the
    wall ``seconds`` and the other costs (``spent``: name → seconds) of every process that ran them."""
    write_json(state_dir / PROGRESS_FILE, sealed({"tasks": tasks, "config": config, "settings": settings,
                                                  "rows": rows, "seconds": round(seconds, 1),
                                                  "spent": {k: round(v, 3) for k, v in spent.items()},
                                                  "state": state}))


def read_progress(state_dir: Path, *, tasks: list[str], config: dict, settings: dict) -> dict:
    """The checked progress file of an interrupted run of this stream, ``config`` and ``settings``.

    Raises:
        UserError: a field of the wrong kind or out of its range, a file edited after it was written, a row
            count or row length that is not the stream's, or a file of another stream or settings (one line
            naming the field).
    """
    path = state_dir / PROGRESS_FILE
    progress = read_checked(path, PROGRESS_SCHEMA)
    for field, wanted in (("tasks", tasks), ("config", config), ("settings", settings)):
        differs = first_difference(progress[field], wanted, field)
        if differs is not None:
            where, was, now = differs
            raise UserError(f"{path}: field {where!r} is {_shown(was)}, this run's is {_shown(now)}: the saved "
                            f"state is from another stream or configuration; use a new --out")
    check_rows(path, "rows", progress["rows"], len(tasks), range(1, len(tasks) + 1))
    return check_sealed(path, progress)                 # last: the checks above name the field a user changed


def resume_stream(state_dir: Path, entry: StrategyEntry, model: torch.nn.Module, *, tasks: list[str], config: dict,
                  settings: dict) -> tuple[list[list[float]], float, dict[str, float], SavedState]:
    """Accuracy rows, wall seconds, the other costs so far (``spent``; empty from a file without them) and the
    saved state (loaded into ``model`` by the entry's state) of an interrupted stream (:func:`read_progress`
    checks the progress file).

    Raises:
        UserError: what :func:`read_progress` refuses, or a state holding other than the committed experiences
            (or one more, saved before its row was committed).
    """
    progress = read_progress(state_dir, tasks=tasks, config=config, settings=settings)
    rows = [list(r) for r in progress["rows"]]
    saved = entry.state.load_(state_dir, model, committed=len(rows), record=progress["state"])
    if saved.experiences not in (len(rows), len(rows) + 1):
        raise UserError(f"{state_dir}: the saved state holds {saved.experiences} experiences, its progress file "
                        f"commits {len(rows)}")
    return rows, float(progress["seconds"]), dict(progress.get("spent", {})), saved


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
