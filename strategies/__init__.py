"""Avalanche integration of cl-graft (installed as ``cl_graft.strategies``): forget-free continual learning by
grafting (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600), its model adapter and baselines.

Rooms, bottom first (``cl_graft.layers`` declares the order, ``tests/core/test_layout.py`` checks it):

- :mod:`.adapter`: :class:`TaskAdapter`, the text classifier as an Avalanche multi-task module;
- :mod:`.interface`: what every method of ``cl-graft run`` implements
  (:class:`~.interface.entry.StrategyEntry`, its settings, the shared recipe, the model of each scenario) and
  how a method registers its entries;
- :mod:`.plugins`: plugins any strategy may use (the fine-tuning recipe, SI with copied snapshots);
- :mod:`.routing`: serving rows without task labels (model states switched in place, θ_pre's features, the
  closed-form routers chosen on dev rows), used by graft and PackNet;
- the methods, each a folder that declares its entries in its ``__init__.py``: :mod:`.graft` (the method:
  :class:`GraftPlugin`, :class:`GraftStrategy`, owner maps, finders), :mod:`.packnet` (PackNet, built
  on graft's owner map: above it) and :mod:`.baselines` (Avalanche's strategies, one module each);
- :mod:`.comparison`: the harness behind ``cl-graft run`` (registry, runner, tuning, metrics, report), which
  finds the methods' entries and imports no method.

The names below are loaded on first use, so that Avalanche (about 7 s to import) is imported only by code that
needs it; ``import cl_graft`` never imports it.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "MASK_VALUE": "adapter", "TaskAdapter": "adapter", "ElementFreeze": "cl_graft.training.freeze",
    "LocalizeConfig": "cl_graft.regions.config",
    "GraftPlugin": "graft.plugin", "GraftStrategy": "graft.strategy", "OwnerMap": "graft.owner_map",
    "LocalizeFinder": "graft.finders", "RegionFinder": "graft.finders", "independent_regions": "graft.finders",
    "experience_regions": "graft.finders", "ExperienceData": "graft.experience_data", "GraftTarget": "graft.targets",
    "graft_target": "graft.targets", "TaskRouter": "routing.states",
    "TaskIdentificationAccuracy": "graft.task_identification", "TaskInferenceAccuracy": "graft.task_identification",
    "save_run": "graft.saved_run", "load_run_": "graft.saved_run", "replay_adaptation_": "graft.adaptations",
    "export_task": "graft.export", "load_task_model": "graft.export", "task_model": "graft.export",
    "PackNetPlugin": "packnet.plugin", "ClipGrad": "plugins.recipe", "StepLimit": "plugins.recipe",
    "recipe_optimizer": "plugins.recipe",
    "ContinualConfig": "interface.config", "StrategyResult": "comparison.runner",
    "run_continual": "comparison.runner", "run_strategy": "comparison.runner",
    "RegionSize": "graft.sizing", "SizedFinder": "graft.sizing", "CapacityWarning": "graft.sizing",
    "sizing_records": "graft.sizing",
}
__all__ = [
    "MASK_VALUE",
    "CapacityWarning",
    "ClipGrad",
    "ContinualConfig",
    "ElementFreeze",
    "ExperienceData",
    "GraftPlugin",
    "GraftStrategy",
    "GraftTarget",
    "LocalizeConfig",
    "LocalizeFinder",
    "OwnerMap",
    "PackNetPlugin",
    "RegionFinder",
    "RegionSize",
    "SizedFinder",
    "StepLimit",
    "StrategyResult",
    "TaskAdapter",
    "TaskIdentificationAccuracy",
    "TaskInferenceAccuracy",
    "TaskRouter",
    "experience_regions",
    "export_task",
    "graft_target",
    "independent_regions",
    "load_run_",
    "load_task_model",
    "recipe_optimizer",
    "replay_adaptation_",
    "run_continual",
    "run_strategy",
    "save_run",
    "sizing_records",
    "task_model",
]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name]
    return getattr(importlib.import_module(module if module.startswith("cl_graft.") else f".{module}", __name__),
                   name)
