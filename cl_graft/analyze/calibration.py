"""Calibration and out-of-distribution tools: reliability bins, temperature scaling, head re-fitting, OOD pairs.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600, §4 and App. B.3/B.4) report that grafted models are
better calibrated than fine-tuned ones and generalise at least as well out of distribution. With a linear head
on MiniLM the head was trained on θ_ft's features and is mismatched with the grafted body; the remedies here
are what a user would try: temperature scaling on dev rows (Guo et al. 2017, https://arxiv.org/abs/1706.04599)
and re-fitting only the head on the grafted body's features.

Reliability bins use exactly the binning of :func:`cl_graft.metrics.ece` (equal-width confidence bins,
a confidence of 1.0 in the last), so ``Σ_b count_b/N · |acc_b − conf_b|`` reproduces the ECE.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import UserError
from ..metrics import softmax
from ..training.models import TextClassifier, clone_model

OOD_PAIRS: dict[str, tuple[str, ...]] = {
    "sst2": ("imdb", "yelp"),
    "mpqa": ("sst2",),
    "qnli": ("mnli", "snli"),
}
"""In-distribution task → its out-of-distribution test tasks (Panigrahi et al. 2023, §4.2). Labels are mapped
by name (:func:`cl_graft.task.ood_rows`): negative/positive as they are; for QNLI → MNLI/SNLI
entailment → entailment, contradiction → not_entailment, neutral dropped."""


def check_ood_pair(task: str, ood: str) -> None:
    """Refuses a pair that is not in :data:`OOD_PAIRS` (one line, naming the known pairs)."""
    if ood not in OOD_PAIRS.get(task, ()):
        known = "; ".join(f"{t} -> {', '.join(o)}" for t, o in OOD_PAIRS.items())
        raise UserError(f"unknown OOD pair {task} -> {ood}; known pairs: {known}")


def reliability(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> dict:
    """Reliability-diagram bins of (N, C) probabilities against (N,) labels.

    Returns:
        ``edges`` (n_bins + 1,), and per bin ``count``, ``accuracy`` and ``confidence`` (None where empty),
        plus ``ece`` (the count-weighted mean of |accuracy − confidence|, equal to :func:`metrics.ece`).
    """
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    conf = probs.max(axis=1)                                                # (N,)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)           # (N,)
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)          # (N,)
    count, acc, mean_conf = [], [], []
    for b in range(n_bins):
        sel = bins == b
        count.append(int(sel.sum()))
        acc.append(float(correct[sel].mean()) if sel.any() else None)
        mean_conf.append(float(conf[sel].mean()) if sel.any() else None)
    gap = sum(c * abs(a - m) for c, a, m in zip(count, acc, mean_conf, strict=True) if c)
    return {"edges": np.linspace(0, 1, n_bins + 1).tolist(), "count": count, "accuracy": acc,
            "confidence": mean_conf, "ece": gap / len(labels) if len(labels) else 0.0}


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The temperature T > 0 minimising the NLL of softmax(logits / T) on (N, C) ``logits`` and (N,) ``labels``.

    A grid over log T ∈ [−3, 4] (1% steps) refined by one finer grid around the best point: deterministic and
    free of optimizer settings.
    """
    if len(labels) == 0:
        raise UserError("no rows to fit a temperature on")
    z, y = np.asarray(logits, dtype=np.float64), np.asarray(labels)

    def nll(log_t: np.ndarray) -> np.ndarray:                               # (G,) → (G,)
        scaled = z[None] / np.exp(log_t)[:, None, None]                      # (G, N, C)
        scaled -= scaled.max(axis=2, keepdims=True)
        log_p = scaled - np.log(np.exp(scaled).sum(axis=2, keepdims=True))
        return -log_p[:, np.arange(len(y)), y].mean(axis=1)

    grid = np.arange(-3.0, 4.0, 0.01)
    best = grid[int(np.argmin(nll(grid)))]
    fine = np.linspace(best - 0.01, best + 0.01, 41)
    return float(np.exp(fine[int(np.argmin(nll(fine)))]))


def scaled_probs(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T), (N, C)."""
    return softmax(np.asarray(logits, dtype=np.float64) / temperature)


@torch.no_grad()
def head_features(model: TextClassifier, rows: list[dict], task: str, *, batch_size: int = 64) -> torch.Tensor:
    """The linear head's inputs (pooled hidden states) for ``rows``, (N, H) float32 on the CPU, in row order."""
    if model.head_kind != "linear":
        raise UserError(f"re-fitting the head needs a linear head, not {model.head_kind!r}")
    feats: list[torch.Tensor] = []
    hook = model.heads[task].register_forward_pre_hook(lambda m, inp: feats.append(inp[0].float().cpu()))
    modes = {m: m.training for m in model.modules()}
    model.eval()
    device = next(model.parameters()).device
    try:
        for s in range(0, len(rows), batch_size):
            enc = {k: v.to(device) for k, v in model.encode(rows[s:s + batch_size], task).items()}
            model(**enc, task=task)
    finally:
        hook.remove()
        for m, mode in modes.items():
            m.train(mode)
    return torch.cat(feats)


def refit_head(model: TextClassifier, rows: list[dict], task: str, *, l2: float = 1e-3,
               steps: int = 200) -> TextClassifier:
    """A copy of ``model`` whose linear head for ``task`` is re-fitted on its own body's features.

    Multinomial logistic regression (full-batch L-BFGS from the current head, L2 ``l2`` on the weight) on
    the pooled features of ``rows``; the body is untouched. Deterministic.
    """
    if not rows:
        raise UserError("no rows to re-fit the head on")
    x = head_features(model, rows, task)                                        # (N, H)
    y = torch.tensor([r["label"] for r in rows])
    out = clone_model(model)
    head = out.heads[task]
    w = head.weight.detach().float().cpu().clone().requires_grad_(True)         # (C, H)
    b = head.bias.detach().float().cpu().clone().requires_grad_(True)           # (C,)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ w.T + b, y) + l2 * w.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        head.weight.copy_(w.to(head.weight))
        head.bias.copy_(b.to(head.bias))
    return out.eval()
