"""One loader of a ``cl-graft run``'s results: ``results.json`` (:func:`read_results`) and each strategy's
``<name>/result.json`` (:func:`read_result`), the same for ``cl-graft`` itself (``--resume`` of a finished strategy,
``--settings-from``) and for the page scripts that read runs (``benchmarks/experiments``).

Every field goes through the schema layer (:mod:`cl_graft.schema`): its kind, accuracies in [0, 1], seconds and
bytes at least 0, each accuracy row as long as the stream, one row (a final row) or one per task, and a
``summary`` that is the one its matrix gives; a file edited into impossible numbers is one line naming the file and
the field, never a page of them. ``results.json`` carries the sha256 of its content (:func:`cl_graft.schema.sealed`,
as a run's ``progress.json`` does), so a hand edit that keeps every field valid (a tuned choice that
``--settings-from`` would reuse as tuned) is refused too; a file without one was written before the seal and is
read on its fields alone.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from cl_graft.errors import UserError
from cl_graft.schema import SEAL, Between, ListOf, MapOf, Obj, check_rows, check_sealed, read_checked

from .metrics import summarize

ACCURACY = Between(0.0, 1.0)
RESULT_SCHEMA = Obj({"name": str, "tasks": ListOf(str), "matrix": ListOf(ListOf(ACCURACY)), "seconds": Between(0.0),
                     "bytes": int, "info": dict},
                    {"summary": Obj({"final": ListOf(ACCURACY), "average": ACCURACY})})
RESULTS_SCHEMA = Obj({"run": dict, "tasks": ListOf(str), "strategies": MapOf(RESULT_SCHEMA)}, {"scenario": str})


def check_result(path: str | os.PathLike, result: dict, where: str = "") -> dict:
    """``result`` (a :class:`~.runner.StrategyResult` as JSON, schema-checked) if its numbers hang together.

    Raises:
        UserError: negative bytes, a row count or row length that is not the stream's, or a summary that is not
            its matrix's (naming ``where``'s field).
    """
    tasks, matrix = result["tasks"], result["matrix"]
    if result["bytes"] < 0:
        raise UserError(f"{path}: field '{where}bytes' must be at least 0, got {result['bytes']}")
    check_rows(path, f"{where}matrix", matrix, len(tasks), (1, len(tasks)))       # a final row, or one per task
    if "summary" in result:
        got, wanted = result["summary"], summarize(matrix)
        close = [math.isclose(a, b, abs_tol=1e-9) for a, b in zip([got["average"], *got["final"]],
                                                                   [wanted["average"], *wanted["final"]])]
        if len(got["final"]) != len(wanted["final"]) or not all(close):
            raise UserError(f"{path}: field '{where}summary' is not what field '{where}matrix' gives (edited?)")
    return result


def read_result(path: str | os.PathLike) -> dict:
    """A strategy's checked ``result.json``."""
    return check_result(path, read_checked(path, RESULT_SCHEMA))


def read_results(spec: str | os.PathLike) -> dict:
    """The checked ``results.json`` of a finished ``cl-graft run``; ``spec`` is the run's folder or the file.

    Raises:
        UserError: no such file, not JSON, a field that fails :data:`RESULTS_SCHEMA` or :func:`check_result`
            (one line naming the file and the field), or a sha256 that is not its content's (edited).
    """
    path = Path(spec) / "results.json" if Path(spec).is_dir() else Path(spec)
    if not path.is_file():
        raise UserError(f"{path}: no results.json of a finished `cl-graft run`")
    results = read_checked(path, RESULTS_SCHEMA)
    for name, result in results["strategies"].items():
        if result["tasks"] != results["tasks"]:
            raise UserError(f"{path}: field 'strategies.{name}.tasks' is not the run's field 'tasks'")
        check_result(path, result, f"strategies.{name}.")
    return check_sealed(path, results) if SEAL in results else results     # last: the checks above name the field
