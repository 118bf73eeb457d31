"""How a method makes its strategies known to ``cl-graft run``, as peft's methods call
``register_peft_method`` from their own folders: nothing outside a method lists it.

- A method folder of ``cl_graft.strategies`` (one per method, ``cl_graft.layers`` lists them) declares
  ``ENTRIES``, a tuple of :class:`~.entry.StrategyEntry`, in its ``__init__.py``;
- a folder of one module per strategy (the baselines') builds that tuple with :func:`package_entries`: every
  module of the folder that defines ``ENTRY`` (or ``ENTRIES``) adds its own, so a new baseline is one module;
- a package of a user's joins through the entry-point group :data:`ENTRY_POINTS`
  (``[project.entry-points."cl_graft.strategies"] toy = "toy_baseline"`` in its ``pyproject.toml``, naming a
  module that defines ``ENTRY`` or ``ENTRIES``, or ``toy = "toy_baseline:ENTRY"``: :func:`point_entries`), as
  stream families join through theirs (``cl_graft.benchmarks.families.ENTRY_POINTS``). Plugins are loaded only
  when a strategy that is not built in is looked up (:mod:`cl_graft.plugin_points`).

The harness's registry (:mod:`cl_graft.strategies.comparison.registry`) collects them with
:func:`module_entries`, importing the folders by name, never by an import statement.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from .entry import StrategyEntry

ENTRY_POINTS = "cl_graft.strategies"
"""The entry-point group of strategies kept in other packages: ``name = module`` (a module defining ``ENTRY`` or
``ENTRIES``) or ``name = module:attr`` (an entry, or a tuple of them)."""


def module_entries(module: ModuleType) -> tuple[StrategyEntry, ...]:
    """The entries ``module`` declares: its ``ENTRIES`` (a tuple), else its ``ENTRY``, else none.

    Raises:
        ValueError: ``ENTRY`` or ``ENTRIES`` holds something that is not a :class:`~.entry.StrategyEntry`.
    """
    found = getattr(module, "ENTRIES", None)
    if found is None:
        entry = getattr(module, "ENTRY", None)
        found = () if entry is None else (entry,)
    if not all(isinstance(e, StrategyEntry) for e in found):
        raise ValueError(f"{module.__name__}: ENTRY / ENTRIES must hold StrategyEntry objects")
    return tuple(found)


def package_entries(name: str, path: Iterable[str]) -> tuple[StrategyEntry, ...]:
    """The entries of every module of package ``name`` (its ``__path__``), modules in name order; modules
    whose name starts with ``_`` are skipped, and so are modules that declare none (shared helpers)."""
    return tuple(e for info in pkgutil.iter_modules(path) if not info.name.startswith("_") and not info.ispkg
                 for e in module_entries(importlib.import_module(f"{name}.{info.name}")))


def point_entries(loaded: object) -> tuple[StrategyEntry, ...] | None:
    """The entries a loaded entry point names: its module's (:func:`module_entries`), or its ``module:attr``
    object, an entry or a tuple of them; None when it names none."""
    if isinstance(loaded, ModuleType):
        try:
            found = module_entries(loaded)
        except ValueError:
            return None
    else:
        found = (loaded,) if isinstance(loaded, StrategyEntry) else loaded
    if not isinstance(found, tuple) or not found or not all(isinstance(e, StrategyEntry) for e in found):
        return None
    return found
