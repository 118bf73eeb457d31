"""On-disk format of a :class:`~cl_graft.grafting.graft.SkillPatch` (Panigrahi et al. 2023, grafting): a stored skill.

A patch directory holds:

- ``patch_config.json`` (:data:`PATCH_CONFIG`): format version, cl-graft version, the region's ``meta``,
  tensor names (in region order), shapes, per-tensor counts, size, numel, the names of the whole ``extra``
  tensors (task heads), and the fingerprint (sha256) of everything in the tensor file;
- ``patch.safetensors`` (:data:`PATCH_TENSORS`): per region tensor ``idx/<name>`` (int32 flat indices,
  strictly ascending) and ``val/<name>`` (θ_ft's values there), per extra tensor ``extra/<name>``.

Indices cost 4 bytes per selected element, against N/8 bytes for a bitmap of the whole graftable set: at the
densities grafting is about (≤ 1%) this is 4–400× smaller, which is what makes a stored skill tiny next to a
checkpoint. Files are written atomically (tensors first, JSON last), and only safetensors/JSON are read.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError
from ..files import read_json, read_safetensors, version, write_folder
from ..regions.io import fingerprint, read_tensor_table
from ..schema import ListOf

PATCH_CONFIG = "patch_config.json"
PATCH_TENSORS = "patch.safetensors"
FORMAT_VERSION = 1


def write_patch(directory: str | os.PathLike, *, region_meta: Mapping[str, Any],
                shapes: Mapping[str, tuple[int, ...]], indices: Mapping[str, Tensor], values: Mapping[str, Tensor],
                extra: Mapping[str, Tensor]) -> Path:
    """Saves a patch: ``indices``/``values`` are name → ``(k_n,)`` tensors, ``extra`` name → whole tensor.

    A folder that already holds this very patch (the same config: checksum, meta, shapes) is left as it is, so a
    task's files are written once however often a run saves its progress (the tensors are verified on load).
    """
    directory = Path(directory)
    tensors = {}
    for n in shapes:
        tensors[f"idx/{n}"] = indices[n].to(torch.int32).cpu().contiguous()
        tensors[f"val/{n}"] = values[n].cpu().contiguous()
    tensors.update({f"extra/{n}": t.cpu().contiguous() for n, t in extra.items()})
    counts = {n: int(indices[n].numel()) for n in shapes}
    numel = sum(math.prod(s) for s in shapes.values())
    config = {
        "format_version": FORMAT_VERSION, "cl_graft_version": version(), "meta": dict(region_meta),
        "names": list(shapes), "shapes": {n: list(s) for n, s in shapes.items()}, "counts": counts,
        "size": sum(counts.values()), "numel": numel, "extra": list(extra), "sha256": fingerprint(tensors),
    }
    if _holds(directory, config):
        return directory
    return write_folder(directory, config, {PATCH_TENSORS: tensors}, PATCH_CONFIG)


def _holds(directory: Path, config: Mapping[str, Any]) -> bool:
    """Whether ``directory`` already holds the patch of ``config`` (its config equal but for the cl-graft version
    that wrote it, and its tensor file present)."""
    path = directory / PATCH_CONFIG
    if not path.is_file() or not (directory / PATCH_TENSORS).is_file():
        return False
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    unversioned = {k: v for k, v in config.items() if k != "cl_graft_version"}
    return isinstance(saved, dict) and {k: v for k, v in saved.items() if k != "cl_graft_version"} == \
        json.loads(json.dumps(unversioned))


def read_patch(directory: str | os.PathLike):
    """Loads and verifies a patch directory.

    Returns:
        ``(meta, shapes, indices, values, extra)``; ``indices`` are int64 ``(k_n,)`` on the CPU.
    """
    directory = Path(directory)
    cfg_path, tensor_path = directory / PATCH_CONFIG, directory / PATCH_TENSORS
    if not cfg_path.is_file():
        raise UserError(f"{cfg_path}: missing (not a cl-graft skill patch?)")
    config = read_json(cfg_path)
    if not isinstance(config, dict) or config.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{cfg_path}: not a skill patch config of format {FORMAT_VERSION}")
    names, shapes, counts = read_tensor_table(cfg_path, config, extra=ListOf(str))
    extra_names, meta, sha = config["extra"], config["meta"], config["sha256"]
    tensors = read_safetensors(tensor_path)
    expected = {f"{kind}/{n}" for n in names for kind in ("idx", "val")} | {f"extra/{n}" for n in extra_names}
    if set(tensors) != expected:
        diff = sorted(set(tensors) ^ expected)
        raise UserError(f"{tensor_path}: {len(diff)} tensor name(s) differ from {PATCH_CONFIG}, first {diff[0]!r}")
    if fingerprint(tensors) != sha:
        raise UserError(f"{tensor_path}: checksum does not match {PATCH_CONFIG} (truncated or modified file)")
    indices, values = {}, {}
    for n in names:
        idx, val = tensors[f"idx/{n}"], tensors[f"val/{n}"]
        if idx.dtype != torch.int32 or idx.shape != (counts[n],) or val.shape != (counts[n],):
            raise UserError(f"{tensor_path}: {n!r} holds {tuple(idx.shape)} indices and {tuple(val.shape)} "
                            f"values, config says {counts[n]}")
        idx = idx.long()
        if idx.numel() and (idx[0] < 0 or idx[-1] >= math.prod(shapes[n]) or bool((idx[1:] <= idx[:-1]).any())):
            raise UserError(f"{tensor_path}: indices of {n!r} are out of range or not ascending")
        indices[n], values[n] = idx, val
    return meta, shapes, indices, values, {n: tensors[f"extra/{n}"] for n in extra_names}
