"""A plugin that makes Python's ``random`` repeat across runs (imports Avalanche: load it when a strategy is built)."""
from __future__ import annotations

import random

import torch
from avalanche.core import SupervisedPlugin


class PythonSeed(SupervisedPlugin, supports_distributed=True):
    """Seeds Python's ``random`` from torch's seed before each training experience: A-GEM samples its memory with
    ``random.shuffle``, and the runner seeds only torch (per experience), so without it a run does not repeat."""

    def before_training_exp(self, strategy, **kwargs) -> None:
        random.seed(torch.initial_seed())
