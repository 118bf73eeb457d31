"""Saving and loading fine-tuned classifiers and run records: safetensors + JSON, never pickle."""
from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
from contextvars import ContextVar
from datetime import datetime, timezone
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


def _git(*args: str) -> str | None:
    """``git args`` in the package's folder (an editable install or a clone), or None outside a checkout."""
    try:
        done = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_revision() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it; ``unknown`` outside a checkout."""
    rev = _git("rev-parse", "HEAD")
    if not rev:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return rev + ("+dirty" if dirty else "")


def device_name(device: str | torch.device | None) -> str:
    """What ``device`` is: the GPU model for CUDA devices, else the CPU model (with the core count)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model} ({os.cpu_count()} cores)"


COMMAND_LINE: ContextVar[str | None] = ContextVar("cl_graft_command_line", default=None)
"""The command line being run, set by the CLI for the duration of a command (``sys.argv`` otherwise)."""


def run_record(**fields: Any) -> dict:
    """What made a result: the full command line, start time, device, versions, platform and git revision,
    plus the given fields (seed, settings, ...). :func:`finish_record` adds what the run cost."""
    return {"command_line": COMMAND_LINE.get() or shlex.join(sys.argv), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "device_name": device_name(fields.get("device")), "cl_graft_version": version("cl-graft"),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": version("transformers"), "avalanche": version("avalanche-lib"),
            "numpy": version("numpy"), "platform": platform.platform(), "git_revision": git_revision(), **fields}


def finish_record(record: dict) -> dict:
    """``record`` with the run's cost so far: wall seconds since ``started``, process CPU seconds, peak RSS."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = datetime.fromisoformat(record["started"])
    return {**record, "wall_seconds": round((datetime.now(timezone.utc) - started).total_seconds(), 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024)}


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
