"""Tasks, data and streams for cl-graft (installed as ``cl_graft.benchmarks``), like ``avalanche.benchmarks``.

Library: the task registry (:mod:`.tasks`), row loading and sampling (:mod:`.data`) and Avalanche streams
(:mod:`.streams`, imported on demand: Avalanche takes seconds to import). The registry and loaders need only
the standard library (``datasets`` is imported lazily, and only for Hub loading). Experiment scripts live in
:mod:`.experiments` and write under ``benchmarks/results/``.
"""
from .data import TaskData, cap, data_sha256, kshot, load_rows, load_task
from .tasks import TASKS, get_task, resolve_data_dir

__all__ = ["TASKS", "TaskData", "cap", "data_sha256", "get_task", "kshot", "load_rows", "load_task", "resolve_data_dir"]
