"""A region γ — a binary mask over the graftable parameters — as a first-class, saveable type.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models",
ICML 2023 (https://arxiv.org/abs/2302.06600): the grafted model θ_pre + γ ⊙ (θ_ft − θ_pre) recovers most
of the fine-tuned performance with a tiny γ. A :class:`Region` maps parameter names to bool tensors of
the parameters' shapes, carries free-form JSON ``meta`` (method, hyper-parameters, model id,
``fingerprints``: ``{"pre": ..., "ft": ...}``) and is saved like a peft adapter (see :mod:`.io`).
Regions are values: every operation returns a new region and never mutates its operands.
"""
from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .. import ops
from ..errors import UserError
from .io import CONFIG_NAME, HEADS_NAME, MASKS_NAME, fingerprint, load_heads, read_region, write_region

__all__ = [
    "CONFIG_NAME", "DEFAULT_GRAFTABLE", "HEADS_NAME", "MASKS_NAME", "PARAM_TYPES", "Region",
    "check_region", "fingerprint", "graftable_names", "layer_index", "load_heads", "param_type",
]  # fmt: skip

DEFAULT_GRAFTABLE = r"(?:^|\.)(layer|layers|h|block)\.\d+\."
"""Searched in full parameter names: BERT/RoBERTa ``encoder.layer.3.``, GPT-2 ``transformer.h.0.`` (or
``h.0.`` at the start of a bare ``GPT2Model``'s names), Llama ``model.layers.0.``, T5 ``encoder.block.0.``.
Embeddings, poolers, final norms and heads do not match."""

_LAYER = re.compile(r"(?:^|\.)(?:layer|layers|h|block)\.(\d+)\.")

PARAM_TYPES = (
    "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_out", "ffn_in", "ffn_out", "layernorm", "other",
)  # fmt: skip
_ATTENTION = {"attention", "attn", "self_attn", "selfattention", "self_attention", "encdecattention"}
_BY_TOKEN = {  # module-name token → type, checked after layernorm and fused qkv
    "attn_qkv": {"c_attn", "qkv", "query_key_value", "wqkv"},
    "attn_q": {"query", "q_proj", "q", "q_lin"},
    "attn_k": {"key", "k_proj", "k", "k_lin"},
    "attn_v": {"value", "v_proj", "v", "v_lin"},
    "attn_out": {"o_proj", "out_proj", "out_lin", "o"},
    "ffn_in": {"intermediate", "c_fc", "gate_proj", "up_proj", "fc1", "lin1", "dense_h_to_4h", "w1", "w3",
               "wi"},
    "ffn_out": {"down_proj", "fc2", "lin2", "dense_4h_to_h", "w2", "wo"},
}


def graftable_names(
    named_params: Iterable[tuple[str, Tensor]], pattern: str = DEFAULT_GRAFTABLE, exclude: str | None = None
) -> list[str]:
    """Names (in the given order) that match ``pattern`` (``re.search``) and not ``exclude``.

    Args:
        named_params: ``(name, tensor)`` pairs, e.g. ``model.named_parameters()``.
        pattern: regex for graftable tensors; the default selects everything inside the transformer layers.
        exclude: optional regex of names to leave out (e.g. ``r"LayerNorm"``).
    """
    try:
        keep, drop = re.compile(pattern), re.compile(exclude) if exclude else None
    except re.error as e:
        raise UserError(f"bad graftable-parameter regex: {e}") from None
    names = [n for n, _ in named_params if keep.search(n) and not (drop and drop.search(n))]
    if not names:
        minus = f" minus {exclude!r}" if exclude else ""
        raise UserError(f"no graftable parameters: nothing matches {pattern!r}{minus}")
    return names


def layer_index(name: str) -> int | None:
    """The transformer-layer index in ``name`` (first ``.layer|layers|h|block.N.``), or None."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def param_type(name: str) -> str:
    """Classifies a parameter name into one of :data:`PARAM_TYPES` (weights and biases alike).

    Covers BERT/RoBERTa (``attention.self.query``, ``attention.output.dense``, ``intermediate.dense``,
    ``output.dense``, ``LayerNorm``), GPT-2 (``attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc``, ``mlp.c_proj``,
    ``ln_1``), Llama (``self_attn.q_proj`` … ``o_proj``, ``mlp.gate_proj/up_proj/down_proj``,
    ``*_layernorm``), and the DistilBERT, T5, OPT and GPT-NeoX spellings.
    """
    m = _LAYER.search(name)
    tokens = (name[m.end() :] if m else name).lower().split(".")[:-1]  # module path after the layer
    if any("norm" in t or re.fullmatch(r"ln_?\d*", t) for t in tokens):
        return "layernorm"
    for kind, words in _BY_TOKEN.items():
        if words.intersection(tokens):
            return kind
    attention = bool(_ATTENTION.intersection(tokens))
    if {"c_proj", "dense", "output"}.intersection(tokens):
        return "attn_out" if attention else "ffn_out"
    return "other"


def _is_bias(name: str) -> bool:
    return name.rsplit(".", 1)[-1].lower() == "bias"


class Region:
    """A binary mask γ over named parameter tensors, plus JSON-able ``meta``.

    Attributes:
        masks: name → bool tensor of that parameter's shape (treat as read-only).
        meta: free-form JSON-able dict (method, hyper-parameters, model id, ``fingerprints``).
    """

    def __init__(self, masks: Mapping[str, Tensor], meta: Mapping[str, Any] | None = None) -> None:
        for n, m in masks.items():
            if not isinstance(m, Tensor) or m.dtype != torch.bool:
                got = getattr(m, "dtype", type(m).__name__)
                raise UserError(f"region mask {n!r} must be a bool tensor, got {got}")
        self.masks: dict[str, Tensor] = {n: m.detach().clone() for n, m in masks.items()}
        self.meta: dict[str, Any] = copy.deepcopy(dict(meta or {}))

    @classmethod
    def adopt(cls, masks: dict[str, Tensor], meta: dict[str, Any] | None = None) -> Region:
        """A region that takes ownership of freshly made bool ``masks`` and ``meta`` without copying them
        (the constructor copies); the caller must not modify them afterwards."""
        region = cls.__new__(cls)
        region.masks, region.meta = masks, meta if meta is not None else {}
        return region

    @classmethod
    def empty(cls, shapes: Mapping[str, Sequence[int]], meta: Mapping[str, Any] | None = None) -> Region:
        """A region with nothing selected over tensors of the given shapes (on the CPU)."""
        return cls({n: torch.zeros(tuple(s), dtype=torch.bool) for n, s in shapes.items()}, meta)

    @classmethod
    def full(cls, shapes: Mapping[str, Sequence[int]], meta: Mapping[str, Any] | None = None) -> Region:
        """A region selecting every element of tensors of the given shapes (on the CPU)."""
        return cls({n: torch.ones(tuple(s), dtype=torch.bool) for n, s in shapes.items()}, meta)

    @property
    def names(self) -> list[str]:
        return list(self.masks)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(m.shape) for n, m in self.masks.items()}

    @classmethod
    def random(cls, shapes: Mapping[str, Sequence[int]], k: int, *, seed: int,
               meta: Mapping[str, Any] | None = None) -> Region:
        """A uniformly random region of exactly ``min(k, N)`` elements (seeded; :func:`cl_graft.ops.random_mask`)."""
        return cls.adopt(ops.random_mask(shapes, k, seed=seed), {"method": "random", "seed": seed, **(meta or {})})

    @property
    def size(self) -> int:
        """|γ|: number of selected elements."""
        return ops.mask_size(self.masks)

    @property
    def numel(self) -> int:
        """N: number of elements covered (selected or not)."""
        return sum(m.numel() for m in self.masks.values())

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def counts(self) -> dict[str, int]:
        """Selected elements per tensor."""
        return {n: int(torch.count_nonzero(m)) for n, m in self.masks.items()}

    def density(self) -> float:
        """|γ| / N over the covered tensors (0.0 when N = 0)."""
        return ops.density(self.masks)

    def density_over(self, total: int) -> float:
        """|γ| / ``total``, e.g. the share of the whole model rather than the graftable set."""
        if total <= 0:
            raise UserError(f"density_over needs a positive total, got {total}")
        return self.size / total

    def to(self, device: str | torch.device) -> Region:
        return Region.adopt({n: m.to(device) for n, m in self.masks.items()}, copy.deepcopy(self.meta))

    def restrict(self, names: Sequence[str]) -> Region:
        """The region over ``names`` only (each must be covered), on the CPU, with the same ``meta``."""
        missing = [n for n in names if n not in self.masks]
        if missing:
            raise UserError(f"region lacks tensor {missing[0]!r}")
        return Region.adopt({n: self.masks[n].cpu() for n in names}, copy.deepcopy(self.meta))

    def _combined_meta(self, op: str, other: Region | None = None) -> dict[str, Any]:
        """``meta`` of a set operation's result: this region's meta, with the operation appended to its
        ``derived`` list (``{"op": op}``, plus ``"other"``: the other operand's meta without its own history)."""
        meta = copy.deepcopy(self.meta)
        step: dict[str, Any] = {"op": op}
        if other is not None:
            step["other"] = {k: copy.deepcopy(v) for k, v in other.meta.items() if k != "derived"}
        meta["derived"] = [*meta.get("derived", []), step]
        return meta

    def paired(self, other: Region, op: str) -> list[tuple[str, Tensor, Tensor]]:
        """``(name, own mask, other's mask on the same device)`` per tensor, for an operation ``op`` on two
        regions; ``TypeError`` (naming ``op``) for a non-region, :class:`UserError` unless both cover the same
        names and shapes."""
        if not isinstance(other, Region):
            raise TypeError(f"unsupported operand for {op}: Region and {type(other).__name__}")
        if set(self.masks) != set(other.masks):
            diff = sorted(set(self.masks) ^ set(other.masks))
            raise UserError(f"regions cover different tensors ({len(diff)} differ, first {diff[0]!r})")
        bad = [n for n, m in self.masks.items() if m.shape != other.masks[n].shape]
        if bad:
            n = bad[0]
            raise UserError(f"regions differ in {len(bad)} shape(s), first {n!r}: "
                            f"{tuple(self.masks[n].shape)} vs {tuple(other.masks[n].shape)}")
        return [(n, m, other.masks[n].to(m.device)) for n, m in self.masks.items()]

    def __or__(self, other: Region) -> Region:
        return Region.adopt({n: a | b for n, a, b in self.paired(other, "|")},
                            self._combined_meta("|", other))

    def __and__(self, other: Region) -> Region:
        return Region.adopt({n: a & b for n, a, b in self.paired(other, "&")},
                            self._combined_meta("&", other))

    def __sub__(self, other: Region) -> Region:
        return Region.adopt({n: a & ~b for n, a, b in self.paired(other, "-")},
                            self._combined_meta("-", other))

    def __xor__(self, other: Region) -> Region:
        return Region.adopt({n: a ^ b for n, a, b in self.paired(other, "^")},
                            self._combined_meta("^", other))

    def __invert__(self) -> Region:
        """The complement: every covered element not in this region."""
        return Region.adopt({n: ~m for n, m in self.masks.items()}, self._combined_meta("~"))

    def __eq__(self, other: object) -> bool:
        """Bit-exact equality of the masks (names, shapes, bits); ``meta`` is ignored."""
        if not isinstance(other, Region):
            return NotImplemented
        return self.shapes == other.shapes and all(
            torch.equal(m, other.masks[n].to(m.device)) for n, m in self.masks.items()
        )

    __hash__ = None  # type: ignore[assignment]

    def overlap(self, other: Region) -> float:
        """|self ∩ other| / |other| (asymmetric, the paper's Fig. 8a); 0.0 when ``other`` is empty."""
        denom = other.size
        return (self & other).size / denom if denom else 0.0

    def iou(self, other: Region) -> float:
        """Jaccard index |self ∩ other| / |self ∪ other|; 0.0 when both are empty."""
        union = (self | other).size
        return (self & other).size / union if union else 0.0

    def breakdown(self) -> dict[str, Any]:
        """Where the region lies: counts by layer, by parameter type, and in biases.

        Returns:
            ``{"size", "numel", "by_layer", "by_type", "bias"}``; each count is ``{"size": selected,
            "numel": covered}``. ``by_layer`` is keyed by layer index (int; ``None`` for names outside the
            layers), sorted. ``by_type`` is keyed by :data:`PARAM_TYPES` (only types present) and counts
            weights *and* biases, so it partitions the region; ``bias`` counts all bias tensors (LayerNorm
            biases included) across types, an overlay that is also counted in ``by_type``.
        """
        def add(table: dict, key: Any, size: int, numel: int) -> None:
            entry = table.setdefault(key, {"size": 0, "numel": 0})
            entry["size"] += size
            entry["numel"] += numel

        by_layer: dict[int | None, dict[str, int]] = {}
        by_type: dict[str, dict[str, int]] = {}
        bias = {"size": 0, "numel": 0}
        for n, count in self.counts().items():
            numel = self.masks[n].numel()
            add(by_layer, layer_index(n), count, numel)
            add(by_type, param_type(n), count, numel)
            if _is_bias(n):
                bias["size"] += count
                bias["numel"] += numel
        layers = sorted(by_layer, key=lambda k: (k is None, k or 0))  # None (outside the layers) last
        return {
            "size": self.size,
            "numel": self.numel,
            "by_layer": {k: by_layer[k] for k in layers},
            "by_type": {t: by_type[t] for t in PARAM_TYPES if t in by_type},
            "bias": bias,
        }

    def check_model(
        self, shapes: Mapping[str, Sequence[int]], fingerprints: Mapping[str, str] | None = None
    ) -> None:
        """Refuses a model that this region was not made for.

        Args:
            shapes: name → shape of the model's graftable tensors (exactly the region's names).
            fingerprints: optional ``{"pre": fingerprint(θ_pre)}``, compared with
                ``meta["fingerprints"]["pre"]`` when both are known.
        """
        mine = set(self.masks)
        if set(shapes) != mine:
            only_region = [n for n in self.masks if n not in shapes]
            only_model = [n for n in shapes if n not in mine]
            first = (f"{only_region[0]!r} is not in the model" if only_region
                     else f"{only_model[0]!r} is not in the region")
            count = len(only_region) + len(only_model)
            raise UserError(f"model does not match region: {count} name(s) differ, first {first}")
        bad = [n for n, m in self.masks.items() if tuple(m.shape) != tuple(shapes[n])]
        if bad:
            n = bad[0]
            raise UserError(f"model does not match region: {len(bad)} shape(s) differ, first {n!r} is "
                            f"{tuple(shapes[n])} in the model, {tuple(self.masks[n].shape)} in the region")
        recorded = self.meta.get("fingerprints")
        want = recorded.get("pre") if isinstance(recorded, dict) else None
        have = (fingerprints or {}).get("pre")
        if want and have and want != have:
            raise UserError(f"model does not match region: θ_pre fingerprint {have[:12]}… differs from the "
                            f"region's {want[:12]}…")

    def save(self, directory: str | os.PathLike, *, heads: Mapping[str, Tensor] | None = None) -> None:
        """Writes ``region_config.json`` + bit-packed ``region.safetensors`` (+ ``heads.safetensors``)."""
        write_region(directory, self.masks, self.meta, heads)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Region:
        """Reads and verifies a directory written by :meth:`save` (masks on the CPU)."""
        masks, meta = read_region(directory)
        return cls.adopt(masks, meta)

    def __repr__(self) -> str:
        size, numel = self.size, self.numel
        return f"Region({len(self.masks)} tensors, {size}/{numel} selected, density {self.density():.3g})"


def check_region(region: Region, model: nn.Module, *, what: str = "model") -> None:
    """Refuses a model that lacks one of the region's tensors or has it in another shape."""
    params = dict(model.named_parameters())
    missing = [n for n in region.masks if n not in params]
    if missing:
        raise UserError(f"{what} does not match region: {len(missing)} region tensor(s) not in the {what}, "
                        f"first {missing[0]!r}")
    region.check_model({n: tuple(params[n].shape) for n in region.masks})
