"""cl-graft: skill localization by grafting (Panigrahi et al., ICML 2023, https://arxiv.org/abs/2302.06600)
and forget-free continual learning.

The core needs only torch, transformers and numpy; the Avalanche strategies live in ``cl_graft.strategies``
and the data/stream code in ``cl_graft.benchmarks``, imported only when used.
"""
from .errors import DataError, UserError
from .evaluate import evaluate, predict_logits
from .finetune import FinetuneConfig, finetune_
from .models import TextClassifier, build_classifier
from .region import Region, graftable_names
from .task import TaskSpec

__version__ = "0.1.0"

__all__ = [
    "DataError", "FinetuneConfig", "Region", "TaskSpec", "TextClassifier", "UserError", "build_classifier",
    "evaluate", "finetune_", "graftable_names", "predict_logits",
]  # fmt: skip
