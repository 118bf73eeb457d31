"""Fine-tuned classifiers saved and loaded (safetensors + JSON, never pickle). JSON, text and safetensors
files are :mod:`.files`'; output folders :mod:`.outdir`'s; run records :mod:`.provenance`'s."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from .errors import UserError
from .files import read_json, version, write_json
from .task import TaskSpec
from .training.finetune import check_finite
from .training.models import TextClassifier

MODEL_FILE = "model.safetensors"
MODEL_CONFIG = "classifier_config.json"
RUN_CONFIG = "config.json"


def save_classifier(model: TextClassifier, out: str | Path) -> None:
    """Write ``model.safetensors`` (all weights, heads included), the backbone config, tokenizer and
    ``classifier_config.json`` so that :func:`load_classifier` needs nothing else."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.backbone.config.save_pretrained(out / "backbone")
    model.tokenizer.save_pretrained(out / "tokenizer")
    tmp = out / f".{MODEL_FILE}.tmp"
    save_model(model, str(tmp))
    os.replace(tmp, out / MODEL_FILE)
    write_json(out / MODEL_CONFIG, {
        "source": model.source, "head": model.head_kind, "pooling": model.pooling, "max_length": model.max_length,
        "tasks": [spec.to_json() for spec in model.tasks.values()], "cl_graft_version": version()})


def load_classifier(path: str | Path, *, device: str | torch.device = "cpu") -> TextClassifier:
    """Inverse of :func:`save_classifier`, onto ``device``.

    Raises:
        UserError: a missing, truncated or edited folder (one line naming what is wrong), or non-finite weights.
    """
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: model folder not found")
    cfg = read_json(path / MODEL_CONFIG)
    try:
        auto = {"linear": AutoModel, "mlm": AutoModelForMaskedLM, "causal": AutoModelForCausalLM}[cfg["head"]]
        backbone = auto.from_config(AutoConfig.from_pretrained(path / "backbone"))
        model = TextClassifier(backbone.eval(), AutoTokenizer.from_pretrained(path / "tokenizer"), head=cfg["head"],
                               pooling=cfg["pooling"], source=cfg["source"], max_length=cfg["max_length"])
        for spec in cfg["tasks"]:
            model.add_task(TaskSpec.from_json(spec))
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"{path}: not a readable cl-graft model folder ({type(e).__name__}: {first})") from None
    try:
        missing, unexpected = load_model(model, str(path / MODEL_FILE), strict=False)
    except (OSError, RuntimeError, SafetensorError) as e:
        raise UserError(f"{path / MODEL_FILE}: cannot load ({str(e).splitlines()[0]})") from None
    if missing or unexpected:
        raise UserError(f"{path / MODEL_FILE}: does not match its config ({len(missing)} missing, "
                        f"{len(unexpected)} unexpected tensors)")
    check_finite(f"{path / MODEL_FILE}", tensors=dict(model.named_parameters()))
    return model.to(device).eval()
