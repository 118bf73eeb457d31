"""Fine-tuned classifiers saved and loaded (safetensors + JSON, never pickle). JSON, text and safetensors
files are :mod:`.files`'; output folders :mod:`.outdir`'s; run records :mod:`.provenance`'s."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from .errors import UserError
from .files import atomic_write, version, write_json
from .schema import ListOf, Obj, read_checked
from .task import TaskSpec
from .training.finetune import check_finite
from .training.models import TextClassifier
from .written import staged_folder, write_failed

MODEL_FILE = "model.safetensors"
MODEL_CONFIG = "classifier_config.json"
RUN_CONFIG = "config.json"


def save_classifier(model: TextClassifier, out: str | Path) -> None:
    """Write ``model.safetensors`` (all weights, heads included), the backbone config, tokenizer and
    ``classifier_config.json`` (last) so that :func:`load_classifier` needs nothing else. Every file is written
    whole or not at all (a full disk: a one-line :class:`UserError`, no temporary file left)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in (("backbone", model.backbone.config), ("tokenizer", model.tokenizer)):
        try:
            with staged_folder(out / name) as tmp:
                part.save_pretrained(tmp)
        except OSError as e:
            raise write_failed(out / name, e) from None
    atomic_write(out / MODEL_FILE, lambda tmp: save_model(model, tmp))
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
    cfg = read_checked(path / MODEL_CONFIG, Obj({"source": str, "head": str, "pooling": str, "max_length": int,
                                                "tasks": ListOf(dict)}))
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
    model.eval()
    with torch.no_grad():                                    # finite weights can still give NaN outputs
        for name, spec in model.tasks.items():
            row = {"text_a": "a", "text_b": "b"} if spec.pair else {"text": "a"}
            check_finite(f"{path / MODEL_FILE}", tensors=dict(model.named_parameters()),
                         outputs=model(**model.encode([row], name), task=name))
    return model.to(device).eval()
