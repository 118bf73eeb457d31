"""On-disk format of a :class:`~cl_graft.grafting.graft.SkillPatch` (Panigrahi et al. 2023, grafting): a stored skill.

A patch directory holds:

- ``patch_config.json`` (:data:`PATCH_CONFIG`): format version, cl-graft version, the region's ``meta``,
  tensor names (in region order), shapes, per-tensor counts, size, numel, the names of the whole ``extra``
  tensors (task heads), and the fingerprint (sha256) of everything in the tensor file;
- ``patch.safetensors`` (:data:`PATCH_TENSORS`): per region tensor ``gap/<name>`` (its flat indices, strictly
  ascending, as gaps: the first index, then each index minus the previous one minus 1, each gap an unsigned
  LEB128 varint, 7 bits per byte, :func:`encode_gaps`) and ``val/<name>`` (θ_ft's values there), per extra
  tensor ``extra/<name>``. Format 1 (``idx/<name>``: int32 indices) is still read.

A gap below 128 takes one byte, below 16,384 two: about one byte per element at the densities grafting is about
(0.1–10% of a tensor: mean gaps of 10–1,000), against four for an int32 index and N/8 bytes for a bitmap of the
whole graftable set, so the values (four bytes each for float32) are most of a stored skill. Files are written
atomically (tensors first, JSON last), and only safetensors/JSON are read.
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
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
MAX_GAP_BYTES = 5                     # 35 bits: any flat index of a tensor below 2**35 elements


def _gaps(idx: Tensor) -> Tensor:
    """``(k,)`` int64 gaps of ascending indices: ``idx[0]``, then ``idx[i] - idx[i-1] - 1`` (all ≥ 0)."""
    idx = idx.long().cpu()
    return torch.cat([idx[:1], idx[1:] - idx[:-1] - 1]) if idx.numel() else idx


def _lengths(gaps: Tensor) -> Tensor:
    """Bytes of each gap's varint, ``(k,)`` int64."""
    out = torch.ones_like(gaps)
    for j in range(1, MAX_GAP_BYTES):
        out += gaps >= (1 << (7 * j))
    return out


def gap_bytes(idx: Tensor) -> int:
    """Bytes :func:`encode_gaps` takes for these ascending indices (without building the code)."""
    return int(_lengths(_gaps(idx)).sum())


def encode_gaps(idx: Tensor) -> Tensor:
    """Ascending flat indices ``(k,)`` → their gap code, ``(gap_bytes(idx),)`` uint8 (LEB128: the low 7 bits
    first, the high bit set on every byte but a gap's last)."""
    gaps = _gaps(idx)
    if gaps.numel() and int(gaps.max()) >= 1 << (7 * MAX_GAP_BYTES):
        raise UserError(f"a skill patch's tensor has more than 2**{7 * MAX_GAP_BYTES} elements; not storable")
    lengths = _lengths(gaps)
    starts = torch.cumsum(lengths, 0) - lengths
    out = torch.zeros(int(lengths.sum()), dtype=torch.uint8)
    for j in range(MAX_GAP_BYTES):
        has = lengths > j
        if not bool(has.any()):
            break
        byte = (gaps[has] >> (7 * j)) & 0x7F
        out[starts[has] + j] = (byte | ((lengths[has] > j + 1).long() << 7)).to(torch.uint8)
    return out


def decode_gaps(code: Tensor, count: int, numel: int) -> Tensor | None:
    """The ``count`` ascending indices below ``numel`` of a gap code, ``(count,)`` int64; None when the code is
    not that (wrong length, a varint cut short or longer than :data:`MAX_GAP_BYTES`, an index out of range)."""
    if code.dtype != torch.uint8 or code.dim() != 1:
        return None
    last = (code & 0x80) == 0                                           # (B,) a varint's last byte
    if int(last.sum()) != count or (code.numel() and not bool(last[-1])):
        return None
    if count == 0:
        return torch.zeros(0, dtype=torch.long)
    ends = torch.nonzero(last).squeeze(1)                                # (count,)
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    if int((ends - starts).max()) >= MAX_GAP_BYTES:
        return None
    owner = torch.repeat_interleave(torch.arange(count), ends - starts + 1)   # (B,) which gap each byte is of
    shift = 7 * (torch.arange(code.numel()) - starts[owner])
    gaps = torch.zeros(count, dtype=torch.long).index_add_(0, owner, (code & 0x7F).long() << shift)
    idx = torch.cumsum(gaps + 1, 0) - 1
    return idx if int(idx[-1]) < numel else None


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
        tensors[f"gap/{n}"] = encode_gaps(indices[n])
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


def _version1(idx: Tensor, count: int, numel: int) -> Tensor | None:
    """Format 1's int32 indices, checked like :func:`decode_gaps`'s."""
    if idx.dtype != torch.int32 or idx.shape != (count,):
        return None
    idx = idx.long()
    if idx.numel() and (idx[0] < 0 or idx[-1] >= numel or bool((idx[1:] <= idx[:-1]).any())):
        return None
    return idx


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
    if not isinstance(config, dict) or config.get("format_version") not in READ_VERSIONS:
        raise UserError(f"{cfg_path}: not a skill patch config of format {' or '.join(map(str, READ_VERSIONS))}")
    names, shapes, counts = read_tensor_table(cfg_path, config, extra=ListOf(str))
    extra_names, meta, sha = config["extra"], config["meta"], config["sha256"]
    tensors = read_safetensors(tensor_path)
    kind = "idx" if config["format_version"] == 1 else "gap"
    expected = {f"{k}/{n}" for n in names for k in (kind, "val")} | {f"extra/{n}" for n in extra_names}
    if set(tensors) != expected:
        diff = sorted(set(tensors) ^ expected)
        raise UserError(f"{tensor_path}: {len(diff)} tensor name(s) differ from {PATCH_CONFIG}, first {diff[0]!r}")
    if fingerprint(tensors) != sha:
        raise UserError(f"{tensor_path}: checksum does not match {PATCH_CONFIG} (truncated or modified file)")
    indices, values = {}, {}
    for n in names:
        val, numel = tensors[f"val/{n}"], math.prod(shapes[n])
        if val.shape != (counts[n],):
            raise UserError(f"{tensor_path}: {n!r} holds {tuple(val.shape)} values, config says {counts[n]}")
        idx = _version1(tensors[f"idx/{n}"], counts[n], numel) if kind == "idx" else \
            decode_gaps(tensors[f"gap/{n}"], counts[n], numel)
        if idx is None:
            raise UserError(f"{tensor_path}: the indices of {n!r} are not {counts[n]} ascending indices below "
                            f"{numel}")
        indices[n], values[n] = idx, val
    return meta, shapes, indices, values, {n: tensors[f"extra/{n}"] for n in extra_names}
