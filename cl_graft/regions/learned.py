"""Learning a grafting region: the sparse γ whose θ_ft values, grafted onto θ_pre, recover the task.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models", ICML 2023
(https://arxiv.org/abs/2302.06600), Eq. 3, as the reference implements it, with these changes:

1. **Base region.** γ_base = global top-k |Δ| (Δ = θ_ft − θ_pre over the graftable tensors, computed once),
   k = ⌊base_fraction · region_elements⌋; with ``candidates`` only those elements can ever be selected. The default
   base_fraction = 1 is the paper's (the base fills the region; steps can only swap elements). With 0.5 the
   steps choose half of the region: on MiniLM/SST-2 (500 test rows) that scored 80.2% vs 78.8% at 0.01% and
   82.0% vs 81.2% at 0.1% (FT 82.2%) — differences within the noise of one run.
2. **Soft mask.** γ(S) = γ_base + (1 − 2γ_base) ⊙ σ(S − b), S ~ U[0, 1) (seeded), b = ``sigmoid_bias``.
3. **Gradient.** The graftable tensors of ONE private working copy of θ_ft are views of a flat buffer set to
   θ_pre + γ(S) ⊙ Δ each step (dropout off); autograd gives g = ∇_θ L, averaged over ``n_batches`` batches,
   and ∂L/∂γ = g ⊙ Δ. The step direction is the paper's u = (1 − 2γ_base) ⊙ ∂L/∂γ ⊙ σ'(S − b).
4. **Step scaling.** The paper's raw step S ← S − lr · u (lr = 1e7 for RoBERTa-base) depends on the scale of
   Δ and of the gradient, which differ by orders of magnitude between models and between SGD- and
   AdamW-trained θ_ft (on MiniLM lr = 1e7 barely moves the region, 1e9 grows it tenfold). So by default
   (``normalize="budget"``) u is divided by its k-th largest magnitude, k = ``region_elements`` (estimated on a
   fixed random sample of :data:`SCALE_SAMPLE` elements when N is larger) and clipped to [−1, 1]:
   S ← clamp(S − lr · clip(u / |u|_(k), −1, 1), 0, 2b). About k elements then move by ``lr`` per step in the direction of their gradient (the others proportionally less), so an element needs about
   b / lr consistent steps to flip, whatever the scale of Δ; clamping S to [0, 2b] keeps every flip
   reversible. ``normalize="max"`` divides by max |u| instead (only the leader moves by lr: very few flips);
   ``normalize="none"`` is the paper's raw step (no clamp of the move; use lr ≈ 1e7 there).
5. **Size.** The hard region is γ_base XOR [S > b]; if it holds more than ``region_elements`` elements
   (default ⌊region_size · N⌋), only the ``region_elements`` elements with the largest logit (b − S inside the
   base, S − b outside) are kept, and the scores of the ones dropped are reset to the flip threshold, so they must win again.
6. **Selection.** Every ``eval_every`` steps (and at step 0), the hard region is evaluated by grafting: the
   score on ≤ ``select_rows`` training rows plus on ≤ ``select_rows`` dev rows; the best region wins (the
   earliest on ties). Its exact size is returned and recorded in ``meta``. A region identical to the last one
   scored keeps its scores without a pass (``rescored`` in the history says which were scored): an element
   needs about b / lr steps to flip, so the first evaluations after step 0 often see the base region again.
   With ``eval_every=0`` nothing is scored and the region after the last step is returned, for a caller that
   judges it on rows of its own (the size search's refinement compares it with the rung's region on held-out
   rows it has already scored that one on).

Cost per batch: one forward/backward of the working copy, as in a fine-tuning step, plus about ten fused
O(N) vector passes per step. Memory: about ten float vectors of length N. Deterministic under ``seed`` on a
fixed device.
Under torchrun (:mod:`cl_graft.distributed`) each rank computes the gradient on its slice of every batch and
one ``all_reduce`` per step averages it, so every rank takes the same step and holds the same region.
"""
from __future__ import annotations

import contextlib
import functools
import math
import time

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from .. import distributed
from ..training.finetune import check_finite
from ..training.models import clone_model
from .config import LocalizeConfig, LocalizeResult
from .data import RegionData, by_length, region_data
from .problem import Problem, elements_for, hard_region
from .region import Region

SCALE_SAMPLE = 1 << 20
"""Above this many elements, |u|'s region_elements-th largest value is estimated on a fixed random sample of this size
(the rank scaled to the sample): ~30 ms instead of ~150 ms for a full top-k over MiniLM's 10.6 M."""


def _scale_step_(u: Tensor, region_elements: int, cfg: LocalizeConfig, sample: Tensor | None) -> Tensor:
    """Turns the paper's direction u (N,) IN PLACE into the step on S (item 4 of the module docstring)."""
    if cfg.normalize == "none":
        return u.mul_(cfg.lr)
    pool = u if sample is None else u[sample]                                # (N,) or (SCALE_SAMPLE,)
    m = 1 if cfg.normalize == "max" else max(1, round(min(region_elements, u.numel()) * pool.numel() / u.numel()))
    top = torch.topk(pool.abs(), m, sorted=False).values                   # (m,)
    top = top[top > 0]
    if top.numel() == 0:
        return u.zero_()
    # u / |u|_(m) · lr, dividing first: lr / |u|_(m) overflows to inf for a subnormal |u|_(m), and 0 · inf is NaN
    return u.div_(top.min()).mul_(cfg.lr).clamp_(-cfg.lr, cfg.lr)          # m-th largest |u| (or least nonzero)


@functools.lru_cache(maxsize=1)
def _draws(numel: int, seed: int, sample: bool) -> tuple[Tensor, Tensor | None]:
    """S's initial values ``(N,)`` in [0, 1) and, with ``sample``, the :data:`SCALE_SAMPLE` indices of the step
    scale's sample, both from one generator seeded with ``seed``. They depend on N and the seed alone, so a stream's
    tasks draw them once (MiniLM's 10.6 M: a permutation takes 0.3 s). Read-only: callers copy S."""
    gen = torch.Generator().manual_seed(seed)
    init = torch.rand(numel, generator=gen)
    return init, torch.randperm(numel, generator=gen)[:SCALE_SAMPLE].clone() if sample else None


def _assign(out: Tensor, op, *args: Tensor) -> None:
    """``out[:] = op(*args)``, written in place when the dtypes allow (one pass instead of two)."""
    if out.dtype == args[-1].dtype:
        op(*args, out=out)
    else:
        out.copy_(op(*args))


def gradient_attention(device: torch.device):
    """The attention kernel of a pass that will be differentiated on ``device``: under CPU bfloat16 autocast, the
    math kernel of ``scaled_dot_product_attention`` (its backward is plain matrix products; the fused CPU kernel's
    bfloat16 backward is slow: a MiniLM forward and backward of 16 rows × 50 tokens, one thread, took 0.20 s
    instead of 0.30 s, the gradient 0.5% from float32's with either kernel); elsewhere the default choice.
    Models that do not call ``scaled_dot_product_attention`` are unaffected."""
    cpu_bf16 = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    return sdpa_kernel([SDPBackend.MATH]) if device.type == "cpu" and cpu_bf16 else contextlib.nullcontext()


def _mean_gradient(work: nn.Module, plist: list[Tensor], out: Tensor, views: list[Tensor], batches_: list,
                   data: RegionData) -> float:
    """Writes the mean over ``batches_`` of ∇L w.r.t. ``plist`` into ``out[:-1]`` (through its flat ``views``)
    and returns the mean loss (the forward passes under :func:`gradient_attention`). Under torchrun each rank
    takes its slice of every batch and one ``all_reduce`` of ``out`` (N + 1,) averages gradient and loss over the
    ranks."""
    for p in plist:
        p.requires_grad_(True)
    total = 0.0
    for i, batch in enumerate(batches_):
        with gradient_attention(out.device):
            loss = data.loss(work, distributed.shard(batch)) / len(batches_)
        for view, g in zip(views, torch.autograd.grad(loss, plist), strict=True):
            if i:
                view.add_(g.reshape(-1))
            else:
                view.copy_(g.reshape(-1))
        total += loss.item()
    for p in plist:
        p.requires_grad_(False)
    if distributed.world_size() == 1:
        return total
    out[-1] = total
    return distributed.all_mean_(out)[-1].item()


def learn_region(pre: nn.Module, ft: nn.Module, train_rows: list[dict] | RegionData, dev_rows: list[dict],
                 cfg: LocalizeConfig, *, task: str | None = None, names: list[str] | None = None,
                 candidates: Region | None = None, progress: bool = True) -> LocalizeResult:
    """Learns γ (paper Eq. 3, budgeted and normalised; see the module docstring). Never mutates its inputs.

    Args:
        pre: θ_pre (needs only the graftable tensors); any ``nn.Module``.
        ft: θ_ft (with ``task`` registered for a text classifier); heads and other non-graftable tensors are
            used as they are.
        train_rows: text rows for the gradient and (≤ ``select_rows``) for selection, or a
            :class:`~cl_graft.regions.data.RegionData` (any model: its batches, loss and scores; then
            ``dev_rows`` and ``task`` are unused).
        dev_rows: text rows for selection (≤ ``select_rows``); may be empty.
        cfg: hyper-parameters.
        task: the task (default: ``ft``'s only task).
        names: graftable tensors (default ``graftable_names(ft.named_parameters())``).
        candidates: a region over ``names``; only its elements may be selected (e.g. free parameters).
        progress: show a progress bar.

    Returns:
        The best region (meta: method, config, task, region_size, region_elements, size, numel, density, best step,
        θ_pre/θ_ft fingerprints, model source), the history (step, size, flips, loss, train/dev scores)
        and the seconds taken.
    """
    t0 = time.perf_counter()
    data = region_data(ft, train_rows, dev_rows, task=task)
    prob = Problem.build(pre, ft, cfg, names=names, candidates=candidates)
    work = clone_model(ft).eval()
    for p in work.parameters():
        p.requires_grad_(False)
    theta, plist = prob.bind(work)                               # (N,) buffer; params are views of it
    b = cfg.sigmoid_bias
    init, sample = _draws(prob.numel, cfg.seed, prob.numel > SCALE_SAMPLE and cfg.normalize == "budget")
    logit = init.to(prob.device, copy=True).sub_(b)                         # T = S − b: (N,), flip iff T > 0
    sample = sample.to(prob.device) if sample is not None else None
    base = prob.base_mask(elements_for(cfg.base_fraction, prob.region_elements))        # (N,) bool
    # θ(S) = θ_pre + γ(S) ⊙ Δ = θ_base + D ⊙ σ(T) with θ_base = where(γ_base, θ_ft, θ_pre), D = (1 − 2γ_base) ⊙ Δ
    # (0 outside the candidates, so they keep θ_pre and get no step): one fused pass per step.
    theta_base = torch.where(base, prob.ft_flat, prob.pre_flat)             # (N,)
    signed = torch.where(base, -prob.delta, prob.delta).masked_fill_(~prob.cand, 0.0)   # D: (N,)
    stream = data.batches(cfg.batch_size, cfg.steps * cfg.n_batches, cfg.seed)
    history: list[dict] = []
    best: dict = {"score": -math.inf}
    last: dict = {}                                                         # the last region scored, its scores
    buffer = prob.delta.new_zeros(prob.numel + 1)                           # (N + 1,): mean ∇_θ L, then the loss
    grad, sig = buffer[:-1], torch.empty_like(prob.delta)                    # (N,) mean ∇_θ L, σ(S − b)
    grad_views = [grad[a:z] for a, z in prob.spans]

    def select(step: int, hard: Tensor, loss: float | None) -> None:
        flips_in, flips_out = int(torch.count_nonzero(hard > base)), int(torch.count_nonzero(base > hard))
        counts = {"step": step, "size": int(torch.count_nonzero(hard)), "flips_in": flips_in, "flips_out": flips_out,
                  "loss": loss}
        if not cfg.eval_every:                                              # no selection: the last region
            history.append({**counts, "train": None, "dev": None, "rescored": False})
            best.update(step=step, hard=hard)
            return
        same = bool(history) and torch.equal(hard, last["hard"])           # scored already: the same scores
        if not same:
            with torch.no_grad():
                _assign(theta, torch.where, hard, prob.ft_flat, prob.pre_flat)
            last.update(hard=hard.clone(), scores=tuple(data.score(work, split, limit=cfg.select_rows, seed=cfg.seed)
                                                        for split in ("train", "dev")))
        tr, dv = last["scores"]
        history.append({**counts, "train": tr, "dev": dv, "rescored": not same})
        if tr + dv > best["score"]:
            best.update(score=tr + dv, step=step, hard=hard.clone())

    select(0, hard_region(logit, base, prob.region_elements)[0], None)
    bar = tqdm(range(1, cfg.steps + 1), desc=f"localize {data.task}", disable=not progress)
    for step in bar:
        with torch.no_grad():
            torch.sigmoid(logit, out=sig)                                    # σ(S − b): (N,)
            _assign(theta, torch.addcmul, theta_base, signed, sig)           # θ(S)
        step_batches = by_length([next(stream) for _ in range(cfg.n_batches)])     # the same rows, less padding
        loss = _mean_gradient(work, plist, buffer, grad_views, step_batches, data)
        check_finite(f"localize {data.task} step {step}", loss=loss)
        with torch.no_grad():
            u = grad.mul_(signed).mul_(sig.addcmul_(sig, sig, value=-1.0))   # ∂L/∂S = ∇L ⊙ D ⊙ σ'(S − b)
            logit.sub_(_scale_step_(u, prob.region_elements, cfg, sample)).clamp_(-b, b)   # S ∈ [0, 2b]
            hard, dropped = hard_region(logit, base, prob.region_elements)
            logit[dropped] = 0.0                                             # back to the flip threshold
        if step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0):
            select(step, hard, loss)
            if history[-1]["train"] is not None:
                bar.set_postfix(size=history[-1]["size"], train=f"{history[-1]['train']:.3f}",
                                dev=f"{history[-1]['dev']:.3f}")
    region = prob.region(best["hard"], method="graft", cfg=cfg, task=data.task, ft=ft, best_step=best["step"],
                         base_size=int(torch.count_nonzero(base)))
    return LocalizeResult(region, history, time.perf_counter() - t0)
