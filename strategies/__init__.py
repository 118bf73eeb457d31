"""Avalanche integration of cl-graft (installed as ``cl_graft.strategies``): forget-free continual learning by
grafting (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600), its model adapter and baselines.

Importing this package imports Avalanche (about 7 s); ``import cl_graft`` never does.
"""
from .adapter import MASK_VALUE, TaskAdapter
from .freeze import ElementFreeze
from .graft_plugin import GraftPlugin
from .graft_strategy import GraftStrategy
from .packnet import PackNetPlugin
from .owner_map import OwnerMap
from .recipe import ClipGrad, StepLimit, epochs_for, recipe_optimizer
from .regions import LocalizeFinder, RegionFinder, independent_regions

__all__ = [
    "MASK_VALUE", "ClipGrad", "ElementFreeze", "GraftPlugin", "GraftStrategy", "LocalizeFinder", "OwnerMap", "PackNetPlugin",
    "RegionFinder", "StepLimit", "TaskAdapter", "epochs_for", "independent_regions", "recipe_optimizer",
]
