"""cl-graft: skill localization by grafting (Panigrahi et al., ICML 2023, https://arxiv.org/abs/2302.06600)
and forget-free continual learning.

The core needs only torch, transformers and numpy; the Avalanche strategies live in ``cl_graft.strategies``
and the data/stream code in ``cl_graft.benchmarks``, imported only when used.
"""
from .errors import DataError, UserError
from .grafting.graft import SkillPatch, graft_model, patch_, restore_
from .regions.config import LocalizeConfig, LocalizeResult
from .regions.learned import learn_region
from .regions.methods import find_region
from .regions.region import Region, graftable_names
from .task import TaskSpec
from .training.evaluate import evaluate, predict_logits
from .training.finetune import FinetuneConfig, finetune_
from .training.models import TextClassifier, build_classifier

__version__ = "0.1.0"

__all__ = [
    "DataError", "FinetuneConfig", "LocalizeConfig", "LocalizeResult", "Region", "SkillPatch", "TaskSpec",
    "TextClassifier", "UserError", "build_classifier", "evaluate", "find_region", "finetune_", "graft_model",
    "graftable_names", "learn_region", "patch_", "predict_logits", "restore_",
]  # fmt: skip
