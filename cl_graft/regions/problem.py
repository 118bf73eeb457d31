"""The localization problem as flat vectors over the graftable set (Panigrahi et al. 2023, grafting).

Every region finder (:mod:`cl_graft.regions.learned`, :mod:`cl_graft.regions.methods`) works on the same picture:
θ_pre, θ_ft and Δ = θ_ft − θ_pre concatenated over the graftable tensors (in ``names`` order) into ``(N,)``
vectors computed once, a candidate mask (elements that may be selected), and ``region_elements`` (max |γ|). A flat
bool vector becomes a :class:`~cl_graft.regions.region.Region` with the metadata every finder records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import ops
from ..errors import UserError
from ..training.finetune import check_finite
from .region import Region, fingerprint, graftable_names


def elements_for(region_size: float, numel: int) -> int:
    """⌊region_size · N⌋, robust to float rounding (0.29 · 100 = 28.999… counts as 29)."""
    return math.floor(region_size * numel + 1e-6)


def resolve_elements(cfg, numel: int) -> int:
    """``cfg.region_elements`` or ⌊region_size · N⌋, checked: at least 1 (not an empty region) and at most N."""
    elements = cfg.region_elements if cfg.region_elements is not None else elements_for(cfg.region_size, numel)
    if elements < 1:
        raise UserError(f"--region-size {cfg.region_size:g} selects no element: {cfg.region_size:g} × {numel} "
                        f"graftable parameters < 1 (an empty region)")
    if elements > numel:
        raise UserError(f"region_elements {elements} is over the {numel} graftable parameters")
    return elements


@dataclass
class Problem:
    """θ_pre, θ_ft, Δ and candidates as ``(N,)`` vectors; ``spans[i]`` is ``names[i]``'s slice."""

    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    spans: list[tuple[int, int]]
    pre_flat: Tensor
    ft_flat: Tensor
    delta: Tensor
    cand: Tensor
    region_elements: int
    fingerprints: dict[str, str]

    @property
    def numel(self) -> int:
        return self.delta.numel()

    @property
    def device(self) -> torch.device:
        return self.delta.device

    @classmethod
    def build(cls, pre: nn.Module, ft: nn.Module, cfg, *, names: list[str] | None = None,
              candidates: Region | None = None) -> Problem:
        """Flattens the graftable tensors of ``pre`` and ``ft`` (on ``ft``'s device) and fixes ``region_elements``.

        Raises:
            UserError: models that differ in the graftable tensors, candidates over other tensors, an
                empty region (region_size · N < 1 or no candidates) or ``region_elements`` larger than N.
        """
        pre_p, ft_p = dict(pre.named_parameters()), dict(ft.named_parameters())
        names = graftable_names(ft_p.items()) if names is None else list(names)
        if not names:
            raise UserError("no graftable tensors given")
        for n in names:
            if n not in ft_p or n not in pre_p:
                which = "fine-tuned" if n not in ft_p else "pre-trained"
                raise UserError(f"{which} model has no tensor {n!r}")
            if pre_p[n].shape != ft_p[n].shape:
                raise UserError(f"models differ in {n!r}: {tuple(pre_p[n].shape)} vs {tuple(ft_p[n].shape)}")
        shapes = {n: tuple(ft_p[n].shape) for n in names}
        device = ft_p[names[0]].device

        def flat(tensors: dict[str, Tensor]) -> Tensor:                # (N,) float32 on `device`
            return torch.cat([tensors[n].detach().reshape(-1).to(device, torch.float32) for n in names])

        pre_flat, ft_flat = flat(pre_p), flat(ft_p)
        check_finite("localize: the pre-trained model", tensors={"a graftable tensor": pre_flat})
        check_finite("localize: the fine-tuned model", tensors={"a graftable tensor": ft_flat})
        numel = pre_flat.numel()
        if candidates is None:
            cand = torch.ones(numel, dtype=torch.bool, device=device)
        else:
            candidates.check_model(shapes)
            cand = torch.cat([candidates.masks[n].reshape(-1) for n in names]).to(device)
        elements = resolve_elements(cfg, numel)
        n_cand = int(torch.count_nonzero(cand))
        if n_cand == 0:
            raise UserError("no candidate elements to localize among (the candidate region is empty)")
        spans, start = [], 0
        for n in names:
            spans.append((start, start + math.prod(shapes[n])))
            start = spans[-1][1]
        return cls(names, shapes, spans, pre_flat, ft_flat, ft_flat - pre_flat, cand, min(elements, n_cand),
                   {"pre": fingerprint(pre_p, names), "ft": fingerprint(ft_p, names)})

    def bind(self, work: nn.Module) -> tuple[Tensor, list[Tensor]]:
        """Makes ``work``'s graftable parameters views of one ``(N,)`` buffer (initialised to θ_ft).

        Returns:
            The buffer and the parameters in ``names`` order. ``work`` must be a private copy.
        """
        params = dict(work.named_parameters())
        theta = self.ft_flat.to(params[self.names[0]].dtype).clone()
        plist = []
        for n, (a, z) in zip(self.names, self.spans, strict=True):
            params[n].data = theta[a:z].view(self.shapes[n])
            plist.append(params[n])
        return theta, plist

    def topk(self, scores: Tensor, k: int, *, allowed: Tensor | None = None) -> Tensor:
        """The ``k`` candidates (and ``allowed``, bool (N,)) with the largest ``scores`` (N,) → bool (N,).

        Fewer than ``k`` are selected only when fewer are eligible.
        """
        eligible = self.cand if allowed is None else self.cand & allowed.to(self.device)
        idx = eligible.nonzero().squeeze(1)                                 # (M,) ascending
        return _top(idx, scores[idx], k, eligible)

    def base_mask(self, k: int) -> Tensor:
        """γ_base: top-k |Δ| among the candidates, (N,) bool."""
        return self.topk(self.delta.abs(), k)

    def region(self, flat_mask: Tensor, *, method: str, cfg, task: str | None, ft: nn.Module,
               **extra) -> Region:
        """The Region of a flat ``(N,)`` bool mask, with the metadata every finder records."""
        mask = flat_mask.detach().cpu()
        masks = {n: mask[a:z].reshape(self.shapes[n]).clone() for n, (a, z) in zip(self.names, self.spans)}
        size = int(torch.count_nonzero(mask))
        meta = {"method": method, "task": task, "region_size": cfg.region_size,
                "region_elements": self.region_elements, "size": size, "numel": self.numel, "density": size / self.numel, "outside": "pre", "config": cfg.to_json(),
                "candidates": None if bool(self.cand.all()) else int(torch.count_nonzero(self.cand)),
                "fingerprints": dict(self.fingerprints), "model": getattr(ft, "source", type(ft).__name__),
                "head": getattr(ft, "head_kind", None), **extra}
        return Region.adopt(masks, meta)


def hard_region(logit: Tensor, base: Tensor, region_elements: int) -> tuple[Tensor, Tensor]:
    """γ = γ_base XOR [S > b], cut to the ``region_elements`` elements of largest margin (b − S inside the base, S − b
    outside).

    Args:
        logit: T = S − b, ``(N,)``.
        base: γ_base, bool ``(N,)``.
        region_elements: max |γ|.

    Returns:
        ``(hard, dropped)``: the region and the elements that ``region_elements`` cut out, both bool ``(N,)``.
    """
    hard = (logit > 0) ^ base                                           # (N,)
    if int(torch.count_nonzero(hard)) <= region_elements:
        return hard, torch.zeros_like(hard)
    idx = hard.nonzero().squeeze(1)                                     # (M,) ascending
    margin = torch.where(base[idx], -logit[idx], logit[idx])             # (M,) ≥ 0
    kept = _top(idx, margin, region_elements, hard)
    return kept, hard & ~kept


def _top(idx: Tensor, values: Tensor, k: int, like: Tensor) -> Tensor:
    """The ``k`` elements of ``idx`` ``(M,)`` (ascending flat indices) with the largest ``values`` ``(M,)``, as a
    bool mask shaped like ``like`` ``(N,)``; all of them when k ≥ M, ties to the lower index. The same elements as
    :func:`~cl_graft.ops.topk_mask` over all N with −inf outside ``idx``, but it ranks only the M (a region or
    the allowance's candidates; MiniLM: 0.2 s for each top-k over its 10.6 M elements)."""
    out = torch.zeros_like(like)
    k = min(k, len(idx))
    if k > 0:
        out[idx[ops.topk_mask({"flat": values.to(torch.float32)}, k, absolute=False)["flat"]]] = True
    return out
