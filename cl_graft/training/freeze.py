"""Bit-exact freezing of parameter *elements* under any torch optimizer.

Continual grafting (Panigrahi et al. 2023, §5.2, https://arxiv.org/abs/2302.06600) trains each new task only
outside the regions of earlier tasks, and its zero-forgetting promise holds only if those elements do not
move by a single bit; graft re-training, BitFit and the skill map's union steps train inside a region under
the same promise. Zeroing gradients is not enough: weight decay, momentum buffers and Adam moments still move
the elements (torch applies them to every element of a tensor that has a gradient). :class:`ElementFreeze`
therefore, for one training phase (an experience, a fine-tuning run):

1. clears the optimizer state of the model's parameters at the start (a new task starts with fresh
   momentum/moments, which also makes an interrupted stream resume bit-identically);
2. sets every param group's ``weight_decay`` to 0 for the phase and applies the decay itself, to trainable
   elements only — coupled (L2 on the gradient) or decoupled (AdamW's ``p *= 1 − lr·wd``) as the group says;
3. before each step zeroes the gradient of frozen elements and drops the gradient of wholly frozen tensors
   (so the optimizer skips them);
4. optionally (``guard=True``, the default) snapshots the tensors that hold frozen elements and, after every
   step, copies the snapshot back over the frozen elements — a belt for optimizers that move parameters with
   zero gradient and zero state.

Tensors with ``requires_grad=False`` get no gradient, so optimizers never touch them; they are left alone.
A partly trainable tensor with few frozen elements (at most :data:`SPARSE_SHARE` of it, as in stream-mode
grafting, where earlier regions hold ~1% per task) is handled through the flat indices of its frozen elements,
so the per-step work grows with the frozen elements, not the tensor; a mostly frozen one keeps a dense mask.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

SPARSE_SHARE = 0.5
"""Largest frozen share of a tensor handled by frozen-element indices rather than a dense mask."""


class ElementFreeze:
    """Keeps every element outside ``trainable`` bit-identical during optimizer steps.

    Args:
        params: name → parameter of the model being trained.
        trainable: name → bool mask of the parameter's shape (only those elements move) or ``None`` (the
            whole tensor moves). Names not listed are frozen whole.
        guard: restore frozen elements from a snapshot after each step (cost: a copy of the frozen elements,
            of whole tensors where a dense mask is kept).

    Use :meth:`begin_` before the phase, :meth:`before_update_` between ``backward`` and ``optimizer.step``,
    :meth:`after_update_` after the step and :meth:`end_` at the end.
    """

    def __init__(self, params: Mapping[str, nn.Parameter], trainable: Mapping[str, Tensor | None], *,
                 guard: bool = True) -> None:
        unknown = [n for n in trainable if n not in params]
        if unknown:
            raise KeyError(f"no parameter named {unknown[0]!r}")
        self.params = dict(params)
        self.whole = {n for n, m in trainable.items() if m is None or bool(m.all())}
        self.masks: dict[str, Tensor] = {}                          # name → bool mask (mostly frozen tensors)
        self.frozen_idx: dict[str, Tensor] = {}                     # name → flat indices of frozen elements
        for n, m in trainable.items():
            if n in self.whole or not bool(m.any()):                 # all-False masks: frozen whole
                continue
            m = m.to(self.params[n].device)
            frozen = ~m.reshape(-1)
            if int(frozen.sum()) <= SPARSE_SHARE * m.numel():
                self.frozen_idx[n] = frozen.nonzero().squeeze(1)
            else:
                self.masks[n] = m
        self.frozen = [n for n, p in self.params.items() if p.requires_grad and n not in self.whole
                       and n not in self.masks and n not in self.frozen_idx]
        self.guard = guard
        self._snapshot: dict[str, Tensor] = {}                      # name → whole tensor, or frozen values
        self._decay: list[tuple[str, float, dict, bool]] = []        # (name, wd, param group, decoupled)
        self._saved_wd: list[float] = []

    @torch.no_grad()
    def begin_(self, optimizer: torch.optim.Optimizer) -> None:
        """Clears optimizer state, moves weight decay into this object and takes the guard snapshot."""
        for p in self.params.values():
            optimizer.state.pop(p, None)
        by_id = {id(p): n for n, p in self.params.items()}
        self._saved_wd, self._decay = [], []
        for group in optimizer.param_groups:
            wd = float(group.get("weight_decay", 0.0) or 0.0)
            self._saved_wd.append(wd)
            if "weight_decay" in group:
                group["weight_decay"] = 0.0
            if wd == 0.0:
                continue
            decoupled = bool(group.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW)))
            for p in group["params"]:
                n = by_id.get(id(p))
                if n is not None and (n in self.masks or n in self.frozen_idx or n in self.whole):
                    self._decay.append((n, wd, group, decoupled))
        if self.guard:
            self._snapshot = {n: self.params[n].detach().clone() for n in (*self.masks, *self.frozen)}
            self._snapshot.update({n: self.params[n].view(-1)[idx] for n, idx in self.frozen_idx.items()})

    @torch.no_grad()
    def before_update_(self) -> None:
        """Masks gradients and applies weight decay to trainable elements (call right before the step)."""
        for n in self.frozen:
            self.params[n].grad = None
        for n, m in self.masks.items():
            g = self.params[n].grad
            if g is not None:
                g.mul_(m)
        for n, wd, group, decoupled in self._decay:
            p = self.params[n]
            if p.grad is None:
                continue
            mask, idx = self.masks.get(n), self.frozen_idx.get(n)
            if decoupled:                                           # AdamW: p *= 1 - lr·wd (trainable only)
                factor = 1.0 - float(group["lr"]) * wd
                kept = p.view(-1)[idx] if idx is not None else None
                p.mul_(factor if mask is None else torch.where(mask, factor, 1.0).to(p.dtype))
                if kept is not None:
                    p.view(-1).index_copy_(0, idx, kept)
            else:                                                   # L2: g += wd·p (frozen grads zeroed below)
                p.grad.add_(p if mask is None else p * mask, alpha=wd)
        for n, idx in self.frozen_idx.items():
            g = self.params[n].grad
            if g is not None:
                g.view(-1).index_fill_(0, idx, 0.0)

    @torch.no_grad()
    def after_update_(self) -> None:
        """Puts frozen elements back from the snapshot (no-op without ``guard``)."""
        for n, snap in self._snapshot.items():
            p = self.params[n]
            if n in self.frozen_idx:
                p.view(-1).index_copy_(0, self.frozen_idx[n], snap)
            elif n in self.masks:
                p.copy_(torch.where(self.masks[n], p, snap))
            else:
                p.copy_(snap)

    def end_(self, optimizer: torch.optim.Optimizer) -> None:
        """Gives the param groups their weight decay back and drops the snapshot."""
        for group, wd in zip(optimizer.param_groups, self._saved_wd):
            if "weight_decay" in group:
                group["weight_decay"] = wd
        self._snapshot, self._decay, self._saved_wd = {}, [], []
