"""One registry of region finders: the learned graft region and the baselines of Panigrahi et al. 2023.

Every finder has the same contract: given θ_pre, θ_ft (any models), the task's data (text rows or a
:class:`~cl_graft.regions.data.RegionData`) and a
:class:`~cl_graft.regions.config.LocalizeConfig`, it returns a :class:`~cl_graft.regions.config.LocalizeResult` whose
region covers the graftable tensors, holds at most ``region_elements`` (default ⌊region_size · N⌋) elements,
selects only ``candidates`` when given, records its method/config/size/fingerprints in ``meta``, and is
deterministic under ``cfg.seed``. Add a finder by writing ``fn(ctx) -> (flat bool mask (N,), extra meta)`` and registering it.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..training.models import clone_model
from .config import LocalizeConfig, LocalizeResult
from .data import RegionData, TextRegionData, region_data
from .fisher import diagonal_fisher, fisher_sample, layer_fisher, with_pre_body
from .learned import learn_region
from .problem import Problem
from .region import Region, layer_index

PAPER = "https://arxiv.org/abs/2302.06600"


@dataclass
class Context:
    """What a finder gets: the flat problem, the models, the rows and the settings."""

    prob: Problem
    pre: nn.Module
    ft: nn.Module
    data: RegionData | None                  # None: no rows given (methods that need none)
    cfg: LocalizeConfig
    progress: bool


@dataclass(frozen=True)
class RegionMethod:
    """A named region finder with the paper that defines it."""

    name: str
    find: Callable[[Context], tuple[Tensor, dict]] | None   # None: the learned graft region (learn_region)
    paper: str
    help: str


def _topk(ctx: Context) -> tuple[Tensor, dict]:
    return ctx.prob.base_mask(ctx.prob.region_elements), {}


def _random(ctx: Context) -> tuple[Tensor, dict]:
    gen = torch.Generator().manual_seed(ctx.cfg.seed)
    scores = torch.rand(ctx.prob.numel, generator=gen).to(ctx.prob.device)    # (N,) uniform ranks
    return ctx.prob.topk(scores, ctx.prob.region_elements), {}


def _bias(ctx: Context) -> tuple[Tensor, dict]:
    prob = ctx.prob
    is_bias = torch.zeros(prob.numel, dtype=torch.bool, device=prob.device)
    for n, (a, z) in zip(prob.names, prob.spans, strict=True):
        if n.rsplit(".", 1)[-1] == "bias":
            is_bias[a:z] = True
    if not bool(is_bias.any()):
        raise UserError("the graftable tensors have no biases (method 'bias')")
    return prob.topk(prob.delta.abs(), prob.region_elements, allowed=is_bias), {}


def _lottery(ctx: Context) -> tuple[Tensor, dict]:
    return ctx.prob.base_mask(ctx.prob.region_elements), {"outside": "zero"}


def _fish(ctx: Context) -> tuple[Tensor, dict]:
    """Top-k diagonal Fisher of θ_pre (with θ_ft's head) on ``n_batches · batch_size`` training rows."""
    prob = ctx.prob
    work = clone_model(ctx.ft).eval()
    for p in work.parameters():
        p.requires_grad_(False)
    theta, plist = prob.bind(work)
    theta.copy_(prob.pre_flat)
    for p in plist:
        p.requires_grad_(True)
    n_rows = min(ctx.cfg.n_batches * ctx.cfg.batch_size, len(ctx.data))
    fisher = diagonal_fisher(work, plist, ctx.data, n_rows, seed=ctx.cfg.seed, progress=ctx.progress)
    return prob.topk(torch.cat([f.reshape(-1) for f in fisher]), prob.region_elements), {}


def _fim_layers(ctx: Context) -> tuple[Tensor, dict]:
    """Whole layers in FIM-score order (Lodha et al. 2023, θ_pre with θ_ft's head), top |Δ| in the last one."""
    prob, data = ctx.prob, ctx.data
    if data is not None and not isinstance(data, TextRegionData):
        raise UserError("fim-layers ranks the layers of a cl-graft text classifier: it needs the task's text rows")
    rows = fisher_sample(data.rows if data is not None else [], ctx.cfg.n_batches * ctx.cfg.batch_size, ctx.cfg.seed)
    fim = layer_fisher(with_pre_body(ctx.pre, ctx.ft), rows, task=data.task, batch_size=ctx.cfg.batch_size,
                       progress=ctx.progress)
    order = {layer: len(fim.layers) - r for r, layer in enumerate(fim.ranking())}   # top layer highest
    closeness = prob.delta.abs() / prob.delta.abs().max().clamp_min(1e-30)          # (N,) in [0, 1]
    scores = torch.empty(prob.numel, device=prob.device)                           # (N,) 2·order + |Δ|
    for n, (a, z) in zip(prob.names, prob.spans, strict=True):
        scores[a:z] = 2.0 * order[layer_index(n)] + closeness[a:z]
    return prob.topk(scores, prob.region_elements), {"fim_ranking": fim.ranking(), "fim_scores": fim.scores}


REGION_METHODS: dict[str, RegionMethod] = {m.name: m for m in (
    RegionMethod("graft", None, PAPER, "learned region, paper Eq. 3 (budgeted, normalised step)"),
    RegionMethod("topk", _topk, PAPER, "global top-k |θ_ft − θ_pre| (the base region of Eq. 3)"),
    RegionMethod("random", _random, PAPER, "uniformly random elements (seeded)"),
    RegionMethod("bias", _bias, PAPER, "top-k |Δ| among bias elements only (fails in the paper, Table 1)"),
    RegionMethod("fish", _fish, "https://arxiv.org/abs/2111.09839",
                 "FISH mask: top-k diagonal Fisher of θ_pre on training rows (Sung et al. 2021)"),
    RegionMethod("lottery", _lottery, "https://arxiv.org/abs/1803.03635",
                 "top-k |Δ| with 0 (not θ_pre) outside the region, lottery-ticket style; meta outside=zero"),
    RegionMethod("fim-layers", _fim_layers, "https://aclanthology.org/2023.findings-emnlp.204",
                 "whole layers by FIM score (surgical fine-tuning, Lodha et al. 2023) among the free elements; text classifiers"),
)}


def find_region(method: str, pre: nn.Module, ft: nn.Module, train_rows: list[dict] | RegionData,
                dev_rows: list[dict], cfg: LocalizeConfig, *, task: str | None = None,
                names: list[str] | None = None, candidates: Region | None = None,
                progress: bool = True) -> LocalizeResult:
    """Finds a region with the named method of :data:`REGION_METHODS` (arguments as for ``learn_region``:
    text rows, or a :class:`~cl_graft.regions.data.RegionData` for any model)."""
    if method not in REGION_METHODS:
        raise UserError(f"unknown region method {method!r}; choose from {', '.join(REGION_METHODS)}")
    spec = REGION_METHODS[method]
    if spec.find is None:
        return learn_region(pre, ft, train_rows, dev_rows, cfg, task=task, names=names, candidates=candidates,
                            progress=progress)
    t0 = time.perf_counter()
    if method == "fish" and not train_rows:
        raise UserError("no training rows to compute the Fisher information on")
    data = (region_data(ft, train_rows, dev_rows, task=task)
            if train_rows else None)                                  # topk/random/… need no rows
    task = data.task if data is not None else ft.resolve_task(task)
    prob = Problem.build(pre, ft, cfg, names=names, candidates=candidates)
    flat, extra = spec.find(Context(prob, pre, ft, data, cfg, progress))
    region = prob.region(flat, method=method, cfg=cfg, task=task, ft=ft, **extra)
    return LocalizeResult(region, [], time.perf_counter() - t0)
