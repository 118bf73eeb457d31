"""On-disk format of a region (Panigrahi et al. 2023, "Task-Specific Skill Localization in Fine-tuned
Language Models"), laid out like a peft adapter directory.

A region directory holds:

- ``region_config.json`` (:data:`CONFIG_NAME`): format version, cl-graft version, free-form ``meta``,
  parameter names (in region order), shapes, per-tensor counts, total size, numel, density, the sha256 of
  the packed bits, and ``heads`` (names and fingerprint of the saved heads, or null);
- ``region.safetensors`` (:data:`MASKS_NAME`): one uint8 tensor per parameter name, the flattened mask
  bit-packed with ``numpy.packbits`` (big bit order, zero padding to a whole byte);
- ``heads.safetensors`` (:data:`HEADS_NAME`, optional): task heads stored whole.

Every file is written to a temporary file in the same directory and moved into place with ``os.replace``;
the JSON config goes last, so an interrupted save leaves either the old region or one that fails its
checksum on load. Only safetensors and JSON are read — never pickle.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import UserError
from ..files import read_safetensors, version, write_folder
from ..schema import ListOf, MapOf, Obj, check_json
from .names import current_names

CONFIG_NAME = "region_config.json"
MASKS_NAME = "region.safetensors"
HEADS_NAME = "heads.safetensors"
FORMAT_VERSION = 1


def fingerprint(tensors: Mapping[str, Tensor], names: Iterable[str] | None = None) -> str:
    """sha256 (hex) over sorted names, shapes, dtypes and the raw bytes of each tensor (contiguous, CPU).

    Used to record θ_pre and θ_ft; independent of dict order and device, sensitive to any bit.
    """
    names = sorted(tensors if names is None else names)
    h = hashlib.sha256()
    for n in names:
        if n not in tensors:
            raise UserError(f"cannot fingerprint: no tensor named {n!r}")
        t = tensors[n].detach().cpu().contiguous()
        h.update(f"{n}\0{tuple(t.shape)}\0{t.dtype}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def pack_bits(mask: Tensor) -> Tensor:
    """Flattens a bool tensor of shape ``(*)`` with N elements into ``(ceil(N / 8),)`` uint8 on the CPU."""
    return torch.from_numpy(np.packbits(mask.detach().cpu().reshape(-1).numpy()))


def unpack_bits(packed: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Inverse of :func:`pack_bits`: ``(ceil(N / 8),)`` uint8 → bool tensor of ``shape`` (N elements)."""
    bits = np.unpackbits(packed.numpy(), count=math.prod(shape))
    return torch.from_numpy(bits).to(torch.bool).reshape(shape)


def _bits_sha256(packed: Mapping[str, Tensor]) -> str:
    h = hashlib.sha256()
    for n in sorted(packed):
        h.update(n.encode() + b"\0")
        h.update(packed[n].numpy())
    return h.hexdigest()


def _cpu_copies(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {n: t.detach().cpu().clone(memory_format=torch.contiguous_format) for n, t in tensors.items()}


def write_region(
    directory: str | os.PathLike,
    masks: Mapping[str, Tensor],
    meta: Mapping[str, Any],
    heads: Mapping[str, Tensor] | None = None,
) -> Path:
    """Saves bool ``masks`` (name → tensor), ``meta`` and optional ``heads`` into ``directory``."""
    directory = Path(directory)
    packed = {n: pack_bits(m) for n, m in masks.items()}
    counts = {n: int(torch.count_nonzero(m)) for n, m in masks.items()}
    numel = sum(m.numel() for m in masks.values())
    heads = None if heads is None else _cpu_copies(heads)
    config = {
        "format_version": FORMAT_VERSION,
        "cl_graft_version": version(),
        "meta": dict(meta),
        "names": list(masks),
        "shapes": {n: list(m.shape) for n, m in masks.items()},
        "counts": counts,
        "size": sum(counts.values()),
        "numel": numel,
        "density": sum(counts.values()) / numel if numel else 0.0,
        "sha256": _bits_sha256(packed),
        "heads": None if heads is None else {"names": list(heads), "fingerprint": fingerprint(heads)},
    }
    files = {MASKS_NAME: packed, **({HEADS_NAME: heads} if heads is not None else {})}
    return write_folder(directory, config, files, CONFIG_NAME)


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise UserError(f"{path}: missing (not a cl-graft region directory?)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: expected a JSON object")
    if config.get("format_version") != FORMAT_VERSION:
        found = config.get("format_version")
        raise UserError(f"{path}: unknown format version {found!r} (this cl-graft reads {FORMAT_VERSION})")
    return config


def read_tensor_table(cfg_path: Path, config: dict, **fields) -> tuple[list[str], dict, dict]:
    """The tensor names, shapes and selected counts of a region or patch config, checked against its schema
    (with ``fields``: more required fields) with one line naming the file and the field."""
    check_json(cfg_path, config, Obj({"names": ListOf(str), "shapes": MapOf(ListOf(int)), "counts": MapOf(int),
                                      "sha256": str, "meta": dict, **fields}))
    names = config["names"]
    unknown = [n for n in names if n not in config["shapes"] or n not in config["counts"]]
    if unknown:
        raise UserError(f"{cfg_path}: fields 'shapes' and 'counts' must name every tensor of 'names', not "
                        f"{unknown[0]!r}")
    return names, {n: tuple(config["shapes"][n]) for n in names}, {n: config["counts"][n] for n in names}


def read_region(directory: str | os.PathLike) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Loads and verifies a region directory.

    Returns:
        ``(masks, meta)``: name → bool tensor (CPU, saved order) and the saved ``meta`` dict (``sparsity`` and
        ``budget`` of a region saved before the rename read as ``region_size`` and ``region_elements``).
    """
    directory = Path(directory)
    config = _read_config(directory)
    cfg_path, bits_path = directory / CONFIG_NAME, directory / MASKS_NAME
    names, shapes, counts = read_tensor_table(cfg_path, config, size=int, numel=int)
    size, numel, sha, meta = config["size"], config["numel"], config["sha256"], config["meta"]
    packed = read_safetensors(bits_path)
    if set(packed) != set(names):
        diff = sorted(set(packed) ^ set(names))
        raise UserError(f"{bits_path}: {len(diff)} name(s) differ from {CONFIG_NAME}, first {diff[0]!r}")
    if sum(counts.values()) != size or sum(math.prod(s) for s in shapes.values()) != numel:
        raise UserError(f"{cfg_path}: size/numel inconsistent with per-tensor counts and shapes")
    masks = {}
    for n in names:
        p = packed[n]
        if p.dtype != torch.uint8 or p.shape != (math.ceil(math.prod(shapes[n]) / 8),):
            got = f"{p.dtype} {tuple(p.shape)}"
            raise UserError(f"{bits_path}: packed {n!r} is {got}, wrong for shape {shapes[n]} (truncated?)")
        masks[n] = unpack_bits(p, shapes[n])
        if int(torch.count_nonzero(masks[n])) != counts[n]:
            raise UserError(f"{bits_path}: {n!r} has {int(masks[n].sum())} selected, config says {counts[n]}")
    if _bits_sha256(packed) != sha:
        raise UserError(f"{bits_path}: sha256 of the packed bits does not match {CONFIG_NAME}")
    if not isinstance(meta, dict):
        raise UserError(f"{cfg_path}: meta must be a JSON object")
    return masks, current_names(meta)                     # a region saved before the rename: its old names


def load_heads(directory: str | os.PathLike) -> dict[str, Tensor]:
    """Loads the task heads saved beside a region and checks them against the region's config."""
    directory = Path(directory)
    config = _read_config(directory)
    path = directory / HEADS_NAME
    info = config.get("heads")
    if not isinstance(info, dict) or "fingerprint" not in info:
        raise UserError(f"{directory}: region was saved without heads")
    heads = read_safetensors(path)
    names = info.get("names")
    if fingerprint(heads) != info["fingerprint"] or not isinstance(names, list) or set(names) != set(heads):
        raise UserError(f"{path}: heads do not match {CONFIG_NAME} (stale or modified file)")
    return {n: heads[n] for n in names}
