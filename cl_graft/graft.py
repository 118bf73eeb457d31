"""Grafting models: θ_pre + γ ⊙ (θ_ft − θ_pre) as a new model, WiSE interpolation, and in-place skill patches.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models", ICML 2023
(https://arxiv.org/abs/2302.06600). The tensor math lives in :mod:`cl_graft.ops`; this module applies it to
:class:`~cl_graft.models.TextClassifier` models:

- :func:`graft_model` / :func:`wise` return NEW models and never touch their inputs;
- a :class:`SkillPatch` stores only the fine-tuned values at a region's elements (plus, optionally, whole
  task heads); :func:`patch_` writes them into a model in place and returns a :class:`Stash` with which
  :func:`restore_` undoes the patch bit for bit. Both cost O(|γ|), so switching a model between skills is
  cheap compared with loading a checkpoint. Patches are saved in a compact format (see
  :mod:`cl_graft.skill_patch_io`): flat int32 indices + values per tensor, not a bitmap over all N elements.
"""
from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
import torch
from torch import Tensor

from . import ops
from .errors import UserError
from .models import TextClassifier
from .region import Region, fingerprint, graftable_names
from .skill_patch_io import read_patch, write_patch

OUTSIDE = ("pre", "zero")


def clone_model(model: TextClassifier) -> TextClassifier:
    """A deep copy of ``model`` that shares its (read-only) tokenizer."""
    return copy.deepcopy(model, memo={id(model.tokenizer): model.tokenizer})


def _params(model: TextClassifier) -> dict[str, Tensor]:
    return dict(model.named_parameters())


def check_region(region: Region, model: TextClassifier, *, what: str = "model") -> None:
    """Refuses a model that lacks one of the region's tensors or has it in another shape."""
    params = _params(model)
    missing = [n for n in region.masks if n not in params]
    if missing:
        raise UserError(f"{what} does not match region: {len(missing)} region tensor(s) not in the {what}, "
                        f"first {missing[0]!r}")
    region.check_model({n: tuple(params[n].shape) for n in region.masks})


def graft_model(pre: TextClassifier, ft: TextClassifier, region: Region, *, outside: str | None = None,
                check_fingerprint: bool = True) -> TextClassifier:
    """The grafted model: θ_ft inside the region, θ_pre (or 0) elsewhere in the region's tensors.

    Tensors the region does not cover (embeddings, heads, …) are taken from ``ft``. Selection is bit-exact
    (``torch.where``): an empty region gives θ_pre's values, a full region θ_ft's.

    Args:
        pre: the pre-trained model θ_pre (needs only the region's tensors).
        ft: the fine-tuned model θ_ft; the result is a copy of it (on its device).
        region: γ over some of the models' tensors (normally :func:`~cl_graft.region.graftable_names`).
        outside: ``"pre"`` (the paper's graft) or ``"zero"`` (lottery-ticket-style baseline). Default: the
            region's ``meta["outside"]`` if recorded (lottery regions record ``"zero"``), else ``"pre"``.
        check_fingerprint: compare θ_pre's fingerprint with the one recorded in the region's meta.

    Raises:
        UserError: a region/model mismatch in names, shapes or θ_pre fingerprint, or a bad ``outside``.
    """
    outside = outside or region.meta.get("outside", "pre")
    if outside not in OUTSIDE:
        raise UserError(f"outside must be one of {OUTSIDE}, got {outside!r}")
    check_region(region, ft, what="fine-tuned model")
    check_region(region, pre, what="pre-trained model")
    pre_p, ft_p = _params(pre), _params(ft)
    if check_fingerprint and region.meta.get("fingerprints"):
        region.check_model(region.shapes, {"pre": fingerprint(pre_p, region.names)})
    new = ops.graft(pre_p, ft_p, region.masks) if outside == "pre" else ops.graft_zero(ft_p, region.masks)
    return _copy_with(ft, new)


def _copy_with(model: TextClassifier, values: Mapping[str, Tensor]) -> TextClassifier:
    """A copy of ``model`` with the given tensors replaced (copied onto the model's own device)."""
    out = clone_model(model)
    params = _params(out)
    with torch.no_grad():
        for n, v in values.items():
            params[n].copy_(v)
    return out


def wise(pre: TextClassifier, other: TextClassifier, alpha: float, *,
         names: Iterable[str] | None = None) -> TextClassifier:
    """WiSE interpolation (Wortsman et al. 2022, https://arxiv.org/abs/2109.01903) as a new model.

    ``(1 − α)·θ_pre + α·θ_other`` on ``names`` (default: the graftable tensors inside the transformer
    layers); every other tensor — task heads in particular, which θ_pre may not even have — comes from
    ``other``. WiSE-FT: ``other`` = θ_ft; WiSE-graft: ``other`` = a grafted model. α = 0 gives θ_pre's
    values, α = 1 ``other``'s, bit-exactly.
    """
    names = graftable_names(other.named_parameters()) if names is None else list(names)
    pre_p, other_p = _params(pre), _params(other)
    missing = [n for n in names if n not in pre_p]
    if missing:
        raise UserError(f"pre-trained model lacks {len(missing)} tensor(s) to interpolate, first {missing[0]!r}")
    mixed = ops.interpolate({n: pre_p[n] for n in names}, {n: other_p[n] for n in names}, float(alpha))
    return _copy_with(other, mixed)


# ----------------------------------------------------------------------------------------------- patches


class SkillPatch:
    """A stored skill: a region γ and θ_ft's values at its elements (+ optional whole tensors, e.g. heads).

    Attributes:
        region: the region (its ``meta`` travels with the patch).
        indices: name → flat element indices, int64 ``(k_n,)``, ascending, for every region tensor.
        values: name → θ_ft values at those indices, ``(k_n,)`` in the parameter's dtype.
        extra: name → whole tensor to set as well (task heads); empty by default.
    """

    def __init__(self, region: Region, values: Mapping[str, Tensor], *,
                 extra: Mapping[str, Tensor] | None = None) -> None:
        self.region = region
        self.indices = {n: torch.nonzero(m.reshape(-1)).squeeze(1) for n, m in region.masks.items()}
        self.values: dict[str, Tensor] = {}
        for n, idx in self.indices.items():
            v = values.get(n)
            if v is None or v.dim() != 1 or v.numel() != idx.numel():
                got = "missing" if v is None else f"shape {tuple(v.shape)}"
                raise UserError(f"skill patch: values of {n!r} are {got}, expected ({idx.numel()},)")
            self.values[n] = v.detach().cpu().clone()
        self.extra = {n: t.detach().cpu().clone() for n, t in (extra or {}).items()}

    @classmethod
    def from_model(cls, ft: TextClassifier, region: Region, *, extra_names: Iterable[str] = ()) -> SkillPatch:
        """Takes θ_ft's values at ``region`` (and the whole tensors ``extra_names``) from ``ft``."""
        check_region(region, ft, what="fine-tuned model")
        params = _params(ft)
        values = {n: params[n].detach().reshape(-1)[m.reshape(-1).to(params[n].device)]
                  for n, m in region.masks.items()}
        extra = {}
        for n in extra_names:
            if n not in params:
                raise UserError(f"fine-tuned model has no tensor {n!r} to store in the patch")
            extra[n] = params[n]
        return cls(region, values, extra=extra)

    def bytes(self, *, extra: bool = True) -> int:
        """Stored payload in bytes: int32 index + value per element (+ the ``extra`` tensors)."""
        elements = sum(v.numel() * (4 + v.element_size()) for v in self.values.values())
        return elements + (sum(t.numel() * t.element_size() for t in self.extra.values()) if extra else 0)

    def save(self, directory: str | os.PathLike) -> None:
        """Writes ``patch_config.json`` + ``patch.safetensors`` (atomically; verified on load)."""
        write_patch(directory, region_meta=self.region.meta, shapes=self.region.shapes, indices=self.indices,
                    values=self.values, extra=self.extra)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> SkillPatch:
        """Reads and verifies a directory written by :meth:`save` (checksums, shapes, index ranges)."""
        meta, shapes, indices, values, extra = read_patch(directory)
        masks = {}
        for n, shape in shapes.items():
            flat = torch.zeros(math.prod(shape), dtype=torch.bool)
            flat[indices[n]] = True
            masks[n] = flat.reshape(shape)
        return cls(Region._wrap(masks, meta), values, extra=extra)

    def __repr__(self) -> str:
        return f"SkillPatch({self.region!r}, {len(self.extra)} extra tensor(s), {self.bytes()} bytes)"


@dataclass
class Stash:
    """What :func:`patch_` overwrote: name → (indices, old values) and name → old whole tensor."""

    elements: dict[str, tuple[Tensor, Tensor]]
    whole: dict[str, Tensor]


def _flat(p: Tensor, name: str) -> Tensor:
    if not p.is_contiguous():
        raise UserError(f"cannot patch {name!r} in place: tensor is not contiguous")
    return p.data.view(-1)


@torch.no_grad()
def patch_(model: TextClassifier, patch: SkillPatch) -> Stash:
    """Writes the patch's values into ``model`` IN PLACE; touches only the region's elements (and ``extra``).

    Cost O(|γ|) plus a per-tensor constant; tensors without selected elements are skipped. Use the returned
    :class:`Stash` with :func:`restore_` to undo (patches nest: restore in reverse order).
    """
    params = _params(model)
    bad = [n for n in (*patch.values, *patch.extra) if n not in params]
    if bad:
        raise UserError(f"model does not match patch: {len(bad)} tensor(s) not in the model, first {bad[0]!r}")
    for n, shape in patch.region.shapes.items():
        if tuple(params[n].shape) != shape:
            raise UserError(f"model does not match patch: {n!r} is {tuple(params[n].shape)} in the model, "
                            f"{shape} in the patch")
    for n, t in patch.extra.items():
        if params[n].shape != t.shape:
            raise UserError(f"model does not match patch: {n!r} is {tuple(params[n].shape)} in the model, "
                            f"{tuple(t.shape)} in the patch")
    elements, whole = {}, {}
    for n, v in patch.values.items():
        if v.numel() == 0:
            continue
        flat = _flat(params[n], n)
        idx = patch.indices[n].to(flat.device)
        elements[n] = (idx, flat[idx])                 # advanced indexing copies: the old values
        flat[idx] = v.to(device=flat.device, dtype=flat.dtype)
    for n, t in patch.extra.items():
        whole[n] = params[n].detach().clone()
        params[n].copy_(t)
    return Stash(elements, whole)


@torch.no_grad()
def restore_(model: TextClassifier, stash: Stash) -> None:
    """Undoes :func:`patch_` IN PLACE, bit for bit."""
    params = _params(model)
    for n, (idx, old) in stash.elements.items():
        _flat(params[n], n)[idx] = old
    for n, t in stash.whole.items():
        params[n].copy_(t)
