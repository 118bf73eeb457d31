"""Pure tensor math for skill localization by grafting.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models",
ICML 2023 (https://arxiv.org/abs/2302.06600). With θ_pre, θ_ft and a binary region γ over the graftable
parameters, the grafted model is θ_pre + γ ⊙ (θ_ft − θ_pre).

Every function takes tensors or dicts of tensors (parameter name → tensor), returns new tensors and never
mutates its inputs. No I/O and no module walking happen here. Where all tensors are ranked jointly
(``topk_mask``, ``random_mask``), the flat global order is the tensors' row-major order, tensor by tensor
in sorted name order; ties are broken by that order (lower global index wins).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import Tensor

from .errors import UserError


def _select(tensors: Mapping[str, Tensor], names: Iterable[str] | None, what: str) -> list[str]:
    """Returns ``names`` (default: all keys of ``tensors``), checking that each is present."""
    names = list(tensors) if names is None else list(names)
    missing = [n for n in names if n not in tensors]
    if missing:
        raise UserError(f"{what} lack {len(missing)} requested tensor(s), first {missing[0]!r}")
    return names


def _check_same_shape(name: str, a: Tensor, b: Tensor, what: str) -> None:
    if a.shape != b.shape:
        raise UserError(f"{what} of {name!r} has shape {tuple(b.shape)}, expected {tuple(a.shape)}")


def _split(flat: Tensor, names: Sequence[str], shapes: Mapping[str, Sequence[int]]) -> dict[str, Tensor]:
    """Cuts a flat ``(N,)`` tensor into named tensors of the given shapes (``N`` = total numel)."""
    parts = torch.split(flat, [math.prod(shapes[n]) for n in names])
    return {n: part.reshape(tuple(shapes[n])) for n, part in zip(names, parts, strict=True)}


def topk_mask(scores: Mapping[str, Tensor], k: int, *, absolute: bool = True) -> dict[str, Tensor]:
    """Global top-k: the ``k`` largest scores over all tensors jointly (one threshold).

    Exactly ``min(k, N)`` elements are True. Ties at the threshold go to the lowest global index (see the
    module docstring). Memory: one flat float copy of the scores, O(N) selection via ``kthvalue``.

    Args:
        scores: name → score tensor, any shape (e.g. Δ for magnitude top-k, a diagonal Fisher).
        k: number of elements to select; 0 gives all False, k ≥ N all True.
        absolute: rank by |score| (default, paper's top-k |Δ|); False ranks by the signed score.

    Returns:
        name → bool tensor of the score's shape, on the scores' device, in the order of ``scores``.
    """
    if k < 0:
        raise UserError(f"top-k needs k >= 0, got {k}")
    names = sorted(scores)
    shapes = {n: tuple(scores[n].shape) for n in names}
    if not names:
        return {}
    dtype = torch.float32
    for n in names:
        dtype = torch.promote_types(dtype, scores[n].dtype)
    flat = torch.cat([scores[n].detach().reshape(-1).to(dtype) for n in names])  # (N,)
    if absolute:
        flat = flat.abs()
    total = flat.numel()
    if k >= total or k == 0:
        keep = torch.full((total,), k > 0, dtype=torch.bool, device=flat.device)  # (N,)
    else:
        if torch.isnan(flat).any():
            raise UserError("top-k scores contain NaN")
        threshold = torch.kthvalue(flat, total - k + 1).values  # k-th largest, ()
        keep = flat > threshold  # (N,)
        ties = torch.nonzero(flat == threshold).squeeze(1)  # (T,) ascending global index
        keep[ties[: k - int(keep.sum())]] = True
    masks = _split(keep, names, shapes)
    return {n: masks[n] for n in scores}


def random_mask(shapes: Mapping[str, Sequence[int]], k: int, *, seed: int) -> dict[str, Tensor]:
    """A uniformly random region with exactly ``min(k, N)`` elements, on the CPU.

    Deterministic under ``seed`` (its own ``torch.Generator``; the global RNG is untouched).

    Args:
        shapes: name → shape of each tensor.
        k: number of elements to select (k ≥ N selects all).
        seed: generator seed.

    Returns:
        name → bool tensor of that shape, in the order of ``shapes``.
    """
    if k < 0:
        raise UserError(f"random region needs k >= 0, got {k}")
    names = sorted(shapes)
    total = sum(math.prod(shapes[n]) for n in names)
    gen = torch.Generator().manual_seed(seed)
    keep = torch.zeros(total, dtype=torch.bool)  # (N,)
    keep[torch.randperm(total, generator=gen)[: min(k, total)]] = True
    masks = _split(keep, names, shapes)
    return {n: masks[n] for n in shapes}


def _check_mask(name: str, ref: Tensor, mask: Mapping[str, Tensor]) -> Tensor:
    m = mask[name]
    if m.dtype != torch.bool:
        raise UserError(f"mask of {name!r} must be bool, got {m.dtype}")
    _check_same_shape(name, ref, m, "mask")
    return m.to(ref.device)


def graft(
    pre: Mapping[str, Tensor], ft: Mapping[str, Tensor], mask: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """θ_pre + γ ⊙ Δ as a selection: θ_ft inside the mask, θ_pre outside (bit-exact, no arithmetic).

    Args:
        pre: name → θ_pre tensor.
        ft: name → θ_ft tensor, same shapes.
        mask: name → bool tensor γ of the same shape; only these names are returned.

    Returns:
        name → new tensor ``where(γ, θ_ft, θ_pre)`` on θ_pre's device.
    """
    _select(pre, mask, "pre-trained weights")
    _select(ft, mask, "fine-tuned weights")
    out = {}
    for n in mask:
        _check_same_shape(n, pre[n], ft[n], "fine-tuned tensor")
        out[n] = torch.where(_check_mask(n, pre[n], mask), ft[n].detach().to(pre[n].device), pre[n].detach())
    return out


def graft_zero(ft: Mapping[str, Tensor], mask: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Lottery-ticket-style baseline: θ_ft inside the mask, 0 outside (fails in the paper, Table 1).

    Args:
        ft: name → θ_ft tensor.
        mask: name → bool tensor of the same shape.

    Returns:
        name → new tensor ``where(γ, θ_ft, 0)`` for the names in ``mask``.
    """
    _select(ft, mask, "fine-tuned weights")
    out = {}
    for n in mask:
        t = ft[n].detach()
        out[n] = torch.where(_check_mask(n, t, mask), t, torch.zeros((), dtype=t.dtype, device=t.device))
    return out


def interpolate(a: Mapping[str, Tensor], b: Mapping[str, Tensor], alpha: float) -> dict[str, Tensor]:
    """(1 − α)·a + α·b per name (WiSE-FT with a = θ_pre, b = θ_ft; WiSE-graft with b = grafted).

    α = 0 returns copies of ``a`` and α = 1 copies of ``b``, bit-exactly; otherwise ``torch.lerp``.

    Args:
        a: name → tensor.
        b: name → tensor; same names, shapes and dtypes as ``a``.
        alpha: interpolation weight (values outside [0, 1] extrapolate).

    Returns:
        name → new tensor, in the order of ``a``.
    """
    if set(a) != set(b):
        diff = sorted(set(a) ^ set(b))
        raise UserError(f"cannot interpolate: {len(diff)} name(s) in only one side, first {diff[0]!r}")
    out = {}
    for n in a:
        _check_same_shape(n, a[n], b[n], "second tensor")
        if alpha == 0:
            out[n] = a[n].detach().clone()
        elif alpha == 1:
            out[n] = b[n].detach().clone()
        else:
            out[n] = torch.lerp(a[n].detach(), b[n].detach().to(a[n].device), alpha)
    return out


def mask_size(mask: Mapping[str, Tensor]) -> int:
    """Number of True elements |γ| over all tensors of ``mask``."""
    return sum(int(torch.count_nonzero(m)) for m in mask.values())


def density(mask: Mapping[str, Tensor]) -> float:
    """|γ| / N over the mask's own elements (0.0 for a mask with no elements)."""
    total = sum(m.numel() for m in mask.values())
    return mask_size(mask) / total if total else 0.0
