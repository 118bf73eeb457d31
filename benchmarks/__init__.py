"""Tasks and data for cl-graft (installed as ``cl_graft.benchmarks``).

The registry and loaders here need only the standard library (``datasets`` is imported lazily, and only for
Hub loading); Avalanche-based stream builders live in separate modules imported on demand.
"""
from .data import TaskData, cap, data_sha256, kshot, load_task
from .tasks import TASKS, get_task, resolve_data_dir

__all__ = ["TASKS", "TaskData", "cap", "data_sha256", "get_task", "kshot", "load_task", "resolve_data_dir"]
