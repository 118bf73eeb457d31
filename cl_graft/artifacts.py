"""Saving and loading fine-tuned classifiers and run records: safetensors + JSON, never pickle."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
from contextvars import ContextVar
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from .errors import UserError
from .regions.io import atomic_write
from .task import TaskSpec
from .training.finetune import check_finite
from .training.models import TextClassifier

MODEL_FILE = "model.safetensors"
MODEL_CONFIG = "classifier_config.json"
RUN_CONFIG = "config.json"
OWNER_FILE = ".cl-graft.json"


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def write_json(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically (temp file in the same folder, then rename); returns ``path``."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 text atomically; returns ``path``."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def _files(folder: Path) -> set[str]:
    """Every file (and link) under ``folder`` but the owner file, as POSIX paths relative to it."""
    found = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        found |= {(rel / f).as_posix() for f in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]}
    return found - {OWNER_FILE}


def _remove(folder: Path, names: set[str]) -> None:
    """Deletes ``names`` (relative paths) under ``folder``, then the sub-folders this left empty."""
    parents = set()
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
        parents |= set((folder / name).parents)
    for d in sorted((p for p in parents if folder in p.parents), key=lambda p: -len(p.parts)):
        if d.is_dir() and not d.is_symlink() and not any(d.iterdir()):
            d.rmdir()


def settings_sha256(settings: dict) -> str:
    """A hash of everything that changes a run's numbers (what ``--resume`` compares)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


class OutDir:
    """A command's output folder. Use :func:`claim_out_dir`; its files are the command's own.

    A command writes only into a new or empty folder, or into one that an earlier run of the same command made
    (its :data:`OWNER_FILE`, written when the folder is claimed, says which command and which files were there
    before). The run record (:data:`RUN_CONFIG`, with the list of files the run wrote) is written last, by
    :meth:`finish`; a folder without it holds an unfinished run. As a context manager, a run that stops with
    a :class:`UserError` removes what it wrote (unless ``keep_on_error``: a resumable run keeps its state).
    """

    def __init__(self, path: Path, *, kept: set[str], created: bool, keep_on_error: bool) -> None:
        self.path, self.kept, self.created, self.keep_on_error = path, kept, created, keep_on_error

    def finish(self, record: dict) -> None:
        """Writes the run record last, listing every file this run wrote."""
        files = sorted((_files(self.path) - self.kept) | {RUN_CONFIG})
        write_json(self.path / RUN_CONFIG, {**record, "files": files})

    def discard(self) -> None:
        """Removes what this run wrote; gives the folder up when nothing else is in it."""
        _remove(self.path, _files(self.path) - self.kept)
        if not self.kept:
            (self.path / OWNER_FILE).unlink(missing_ok=True)
            if self.created:
                self.path.rmdir()

    def __enter__(self) -> OutDir:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None and issubclass(kind, UserError) and not self.keep_on_error:
            self.discard()


def claim_out_dir(out: str | Path, command: str, *, settings: dict, overwrite: bool = False,
                  resume: bool = False, keep_on_error: bool = False) -> OutDir:
    """Makes ``out`` the output folder of ``command`` (see :class:`OutDir`) and returns it.

    Args:
        out: the folder (``--out``).
        command: the command's name, recorded in the owner file.
        settings: everything that changes the run's numbers; saved, and compared on ``resume``.
        overwrite: an earlier run of ``command`` in ``out`` is removed first: the files its record lists (or,
            if it never finished, everything but what was there before it), and nothing else.
        resume: continue the unfinished (or finished) run of ``command`` in ``out``; its settings must match.
        keep_on_error: a :class:`UserError` inside the ``with`` block leaves the files (resumable runs).

    Raises:
        UserError: an empty or unwritable path, a file, a folder holding anything else, or (``resume``) no
            earlier run or one with other settings.
    """
    if not str(out).strip():
        raise UserError("--out is empty; give a folder name")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    owner_path = out / OWNER_FILE
    owner = read_json(owner_path) if owner_path.is_file() else None
    mine = isinstance(owner, dict) and owner.get("command") == command
    if resume:
        if not mine:
            raise UserError(f"--resume: {out} holds no output of cl-graft {command} to resume")
        _check_same(out, owner.get("settings") or {}, settings)
        return OutDir(out, kept=set(owner.get("kept", [])), created=False, keep_on_error=keep_on_error)
    present = _files(out) if out.is_dir() else set()
    if mine:
        kept = set(owner.get("kept", []))
        record = read_json(out / RUN_CONFIG) if (out / RUN_CONFIG).is_file() else None
        earlier = present & set(record["files"]) if isinstance(record, dict) and "files" in record \
            else present - kept
        if earlier and not overwrite:
            state = "results" if record else "an unfinished run"
            raise UserError(f"--out {out} already holds {state} of cl-graft {command}; choose a new folder or pass "
                            f"--overwrite")
        _remove(out, earlier)
        present -= earlier
    elif present or owner_path.exists():
        what = f"the output of cl-graft {owner.get('command')}" if isinstance(owner, dict) else \
            f"files that cl-graft {command} did not write ({min(present or {OWNER_FILE})})"
        raise UserError(f"--out {out} holds {what}; choose a new or empty folder")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(owner_path, {"command": command, "settings": settings, "kept": sorted(present)})
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    return OutDir(out, kept=present, created=created, keep_on_error=keep_on_error)


def _check_same(out: Path, saved: dict, settings: dict) -> None:
    if settings_sha256(saved) == settings_sha256(settings):
        return
    key = next(k for k in [*settings, *saved] if saved.get(k) != settings.get(k))     # the first in the run's order
    was = json.dumps(saved.get(key))
    was = was if len(was) <= 40 else "other settings"
    raise UserError(f"--resume: {out} holds a run with another {key} ({was}); use a new --out")


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
