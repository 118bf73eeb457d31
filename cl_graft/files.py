"""The bottom of cl-graft: files written atomically, JSON and safetensors read with one-line errors, versions.

Every writer here puts the bytes in a temporary file beside the target and moves it into place with
``os.replace``, so a crash leaves the old file or the new one, never half of one. Only JSON and safetensors
are read, never pickle. Imports nothing of cl-graft but :mod:`.errors` and :mod:`.written`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from .errors import UserError
from .written import file_mode, note, write_failed


def version(dist: str = "cl-graft") -> str:
    """The installed version of distribution ``dist``, or ``"0+unknown"`` (cl-graft run from a bare tree)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Runs ``write(tmp)`` on a file in a temporary folder beside ``path``, then moves it over ``path``; returns
    ``path``.

    The temporary folder (``.<name>.<random>.tmp``) also holds whatever temporary files the writer makes itself
    (the safetensors library writes its own ``.tmpXXXXXX`` beside its target), so an interrupted write, even a
    SIGKILL, leaves only names :func:`~.written.is_temporary` knows. The file gets the mode a plain
    ``open(path, "w")`` would give (0666 less the umask), not mkstemp's 0600. The file is noted as written
    (:mod:`.written`); a failed write (a full disk) is a one-line :class:`UserError` naming ``path``, and leaves
    nothing.
    """
    path = Path(path)
    folder = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    tmp = folder / path.name
    try:
        write(str(tmp))
        os.chmod(tmp, file_mode())                         # after: a writer may replace the file (safetensors does)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, SafetensorError) as e:
        raise write_failed(path, e) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    note(path)
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 text atomically; returns ``path``."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON (indented, keys in insertion order) atomically; returns ``path``."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in ``path``.

    Raises:
        UserError: a missing or unreadable file (a folder in its place), bytes that are not UTF-8, or invalid
            JSON (``path:line``).
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a folder, not a JSON file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, Tensor]) -> Path:
    """Write ``name → tensor`` as safetensors atomically; returns ``path``."""
    return atomic_write(path, lambda tmp: save_file(dict(tensors), tmp, metadata={"format": "pt"}))


def read_safetensors(path: str | os.PathLike, *, finite: bool = True) -> dict[str, Tensor]:
    """``name → tensor`` from a safetensors file, on the CPU; with ``finite`` (the default) every floating-point
    tensor must hold finite values only.

    Raises:
        UserError: a missing or unreadable (truncated, not safetensors) file, or a tensor holding NaN or an
            infinity (naming it).
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: missing")
    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"{path}: unreadable safetensors ({str(e).splitlines()[0]})") from None
    if finite:
        bad = next((n for n, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())), None)
        if bad is not None:
            raise UserError(f"{path}: tensor {bad!r} holds NaN or infinite values")
    return tensors


def write_folder(directory: Path, config: Mapping[str, Any], files: Mapping[str, Mapping[str, Tensor]],
                 config_name: str) -> Path:
    """Writes each ``file name → tensors`` as safetensors, then ``config`` as JSON, each atomically; the config
    goes last, so a folder whose config reads back is complete.

    Raises:
        UserError: ``config`` (e.g. a region's meta) is not JSON-serialisable; nothing is written then.
    """
    try:
        text = json.dumps(config, indent=2) + "\n"
    except (TypeError, ValueError) as e:
        raise UserError(f"region meta is not JSON-serialisable: {e}") from None
    directory.mkdir(parents=True, exist_ok=True)
    for name, tensors in files.items():
        write_safetensors(directory / name, tensors)
    write_text(directory / config_name, text)
    return directory
