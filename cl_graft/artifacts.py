"""Saving and loading fine-tuned classifiers and run records: safetensors + JSON, never pickle."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from .errors import UserError
from .task import TaskSpec
from .training.models import TextClassifier

MODEL_FILE = "model.safetensors"
MODEL_CONFIG = "classifier_config.json"
RUN_CONFIG = "config.json"


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: not found") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def prepare_out_dir(out: str | Path, *, overwrite: bool = False, owns: tuple[str, ...] = ()) -> Path:
    """Create ``out``; refuse (one-line error) if it already holds any of the files this run writes."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    clash = [name for name in owns if (out / name).exists()]
    if clash and not overwrite:
        raise UserError(f"--out {out} already holds {clash[0]}; choose a new folder or pass --overwrite")
    out.mkdir(parents=True, exist_ok=True)
    return out


def git_revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, timeout=5, check=False).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_record(**fields: Any) -> dict:
    """What made a result: versions, platform, git revision, plus the given fields (seed, args, ...)."""
    return {"cl_graft_version": version("cl-graft"), "torch": torch.__version__,
            "transformers": version("transformers"), "python": platform.python_version(),
            "git_revision": git_revision(), **fields}


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
        "tasks": [spec.to_json() for spec in model.tasks.values()], "cl_graft_version": version("cl-graft")})


def load_classifier(path: str | Path, *, device: str | torch.device = "cpu") -> TextClassifier:
    """Inverse of :func:`save_classifier`, onto ``device``."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    path = Path(path)
    cfg = read_json(path / MODEL_CONFIG)
    auto = {"linear": AutoModel, "mlm": AutoModelForMaskedLM, "causal": AutoModelForCausalLM}[cfg["head"]]
    backbone = auto.from_config(AutoConfig.from_pretrained(path / "backbone"))
    model = TextClassifier(backbone.eval(), AutoTokenizer.from_pretrained(path / "tokenizer"), head=cfg["head"],
                           pooling=cfg["pooling"], source=cfg["source"], max_length=cfg["max_length"])
    for spec in cfg["tasks"]:
        model.add_task(TaskSpec.from_json(spec))
    try:
        missing, unexpected = load_model(model, str(path / MODEL_FILE), strict=False)
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path / MODEL_FILE}: cannot load ({str(e).splitlines()[0]})") from None
    if missing or unexpected:
        raise UserError(f"{path / MODEL_FILE}: does not match its config ({len(missing)} missing, "
                        f"{len(unexpected)} unexpected tensors)")
    return model.to(device).eval()
