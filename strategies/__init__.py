"""Avalanche integration of cl-graft (installed as ``cl_graft.strategies``): forget-free continual learning by
grafting (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600), its model adapter and baselines.

The names below are loaded on first use, so that Avalanche (about 7 s to import) is imported only by code that
needs it; ``import cl_graft`` never imports it.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "MASK_VALUE": "adapter", "TaskAdapter": "adapter", "ElementFreeze": "cl_graft.training.freeze", "GraftPlugin": "graft_plugin",
    "GraftStrategy": "graft_strategy", "OwnerMap": "owner_map", "PackNetPlugin": "packnet",
    "ClipGrad": "recipe", "StepLimit": "recipe", "recipe_optimizer": "recipe",
    "LocalizeFinder": "finders", "RegionFinder": "finders", "independent_regions": "finders",
    "experience_regions": "finders",
    "ContinualConfig": "continual_config", "StrategyResult": "runner", "run_continual": "runner",
    "run_strategy": "runner", "ExperienceData": "experience_data", "GraftTarget": "targets",
    "graft_target": "targets", "TaskRouter": "routing", "TaskIdentificationAccuracy": "metrics",
    "TaskInferenceAccuracy": "metrics", "LocalizeConfig": "cl_graft.regions.config",
    "save_run": "saved_run", "load_run_": "saved_run", "replay_adaptation_": "saved_run",
    "export_task": "export", "load_task_model": "export", "task_model": "export",
}
__all__ = [
    "MASK_VALUE",
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
    "task_model",
]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name]
    return getattr(importlib.import_module(module if "." in module else f".{module}", __name__), name)
