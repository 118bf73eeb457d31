"""Plain task lists, ``qnli,agnews,sst2``: one experience per task, a head per task, the task label at test.

The catch-all family (lowest priority): any comma-separated list of registered tasks or task folders of the data
dir. A spec whose items all are such tasks (:func:`names_tasks`) is its claim even where another family's
grammar also reads it (a folder ``split-digits``): the lookup refuses such a spec, naming both; in a list, an item
that is a task is one (a folder ``split-foo`` joins ``split-foo,sst2``). Only the task-incremental scenario: each
task has its own label set, so one head over all of them means nothing (the split family, ``split-TASK:N``, makes
class-incremental streams of one task's labels).
"""
from __future__ import annotations

from cl_graft.errors import UserError

from . import StreamFamily, StreamRequest, StreamSetup, families
from .text import refuse_digits_model, text_setup


def _setup(request: StreamRequest) -> StreamSetup:
    from ..streams import parse_stream
    from ..data import load_rows

    request.refuse(("class_order",), "task-list")
    others = [f for f in families().values() if f is not FAMILY]              # read once, not per item
    for item in filter(None, (i.strip() for i in request.spec.split(","))):
        family = None if names_tasks(item, request.data_dir) else next((f for f in others if f.claims(item)), None)
        if family is not None:
            raise UserError(f"--stream {request.spec!r}: {item!r} is a {family.name} stream of its own, not a "
                            f"task of a list; give it alone")
    refuse_digits_model(request)
    tasks = parse_stream(request.spec, request.data_dir)
    splits = [load_rows(t, request.data_dir, request.data, seed=request.seed) for t in tasks]
    return text_setup(request, splits, data_tasks=tasks)


def names_tasks(spec: str, data_dir: str | None) -> bool:
    """Whether every comma-separated item of ``spec`` is a registered task or a task folder (``meta.json``) of
    the data folder (``data_dir``, else ``$CL_GRAFT_DATA``; one that does not exist holds none)."""
    from ..tasks import TASKS, resolve_data_dir

    try:
        root = resolve_data_dir(data_dir)
    except UserError:
        root = None
    items = [i.strip() for i in spec.split(",")]
    return all(i in TASKS or (i and root is not None and (root / i / "meta.json").is_file()) for i in items)


FAMILY = StreamFamily(name="task-list", grammar="comma-separated tasks, one experience each: qnli,agnews,sst2",
                      claims=lambda spec: True, setup=_setup, scenarios=("task",), priority=-100,
                      catch_all=names_tasks)
