"""Diagonal empirical Fisher information: per element (the ``fish`` region method) and per layer (the FIM
score of surgical fine-tuning and the ``fim-layers`` method). The one Fisher of cl-graft.

- Diagonal empirical Fisher of element j: ``F_j = (1/n) Σ_i (∂ log p(y_i | x_i) / ∂θ_j)²`` over n rows with
  their true labels. :func:`diagonal_fisher` computes it exactly, one backward per row, for any model that a
  :class:`~cl_graft.regions.data.RegionData` can score (FISH masks, Sung et al. 2021,
  https://arxiv.org/abs/2111.09839).
- Its sum over a tensor, ``Σ_j F_j = (1/n) Σ_i ‖g_i‖²``, is all that the FIM score needs, and
  :func:`fisher_sums` gets it from ONE forward and backward per batch (below); tests check the two against each
  other.
- FIM score of a layer (Lodha et al., "On Surgical Fine-tuning for Language Encoders", Findings of EMNLP 2023,
  https://aclanthology.org/2023.findings-emnlp.204): the sum of ``F_j`` over the layer's parameters, divided by
  the sum over all layers, so the scores are shares that add up to 1 (layers of one encoder have equal sizes, so
  the per-element mean, also reported, ranks them identically). The same shares are kept per parameter group
  inside a layer (attention, feed-forward, LayerNorm).

:func:`fisher_sums` needs no per-row gradients: forward hooks keep each module's input ``a`` (B, T, in) and
output, ``torch.autograd.grad`` of ``Σ_i log p(y_i | x_i)`` gives the output gradients ``δ`` (B, T, out) (rows are
independent in eval mode, so ``δ_i`` carries only row i's loss), and per row ("ghost norms", Goodfellow 2015,
https://arxiv.org/abs/1510.01799):

- ``nn.Linear`` / GPT-2 ``Conv1D`` weight: ``‖Σ_t δ_t a_tᵀ‖² = Σ_ts (δ_t·δ_s)(a_t·a_s)``, two (T, T) Gram
  matrices instead of an (out, in) gradient; bias ``‖Σ_t δ_t‖²``;
- ``nn.LayerNorm`` weight ``‖Σ_t δ_t ⊙ x̂_t‖²`` (x̂ the normalised input), bias ``‖Σ_t δ_t‖²``.

A layer parameter owned by any other kind of module, or a module run twice per forward, is refused. Rows are
batched by length (little padding). Cost on MiniLM (16 rows of SST-2, 1 CPU thread): about one training step's
forward and backward per batch.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm
from transformers.pytorch_utils import Conv1D

from ..errors import UserError
from ..training.finetune import batches
from ..training.models import TextClassifier, clone_model
from .data import RegionData
from .region import graftable_names, layer_index, param_type

GROUPS = ("attention", "feed-forward", "layernorm")


def param_group(name: str) -> str:
    """``attention`` / ``feed-forward`` / ``layernorm`` (or ``other``) for a parameter inside a layer."""
    kind = param_type(name)
    if kind.startswith("attn_"):
        return "attention"
    if kind.startswith("ffn_"):
        return "feed-forward"
    return kind


def fisher_sample(rows: list[dict], n: int, seed: int) -> list[dict]:
    """``min(n, len(rows))`` rows in a seeded random order (the fine-tuning batch order's first batch)."""
    if not rows or n < 1:
        raise UserError("the Fisher sample is empty: no training rows (or --fisher-rows < 1)")
    return next(batches(rows, min(n, len(rows)), 1, seed))


def diagonal_fisher(model: nn.Module, params: Sequence[Tensor], data: RegionData, n_rows: int, *, seed: int,
                    progress: bool = False) -> list[Tensor]:
    """Per-element diagonal empirical Fisher of ``params``: ``(1/n) Σ_i (∂ log p(y_i | x_i) / ∂θ)²``, one tensor
    of each parameter's shape.

    Args:
        model: the model whose ``params`` (requiring grad) are scored; ``data`` reads its log-likelihoods.
        params: the parameters to score.
        data: the task; its first ``n_rows`` training examples in the seeded batch order are used one at a time
            (per-example gradients, as FISH does).
        n_rows: rows to average over (at most ``len(data)``).
        seed: seed of the batch order.
    """
    fisher = [torch.zeros_like(p) for p in params]
    for one in tqdm(data.batches(1, n_rows, seed), total=n_rows, desc=f"fisher {data.task}",
                    disable=not progress):                                 # the seeded order, one at a time
        log_p = data.log_likelihood(model, one)[0]
        for f, g in zip(fisher, torch.autograd.grad(log_p, list(params)), strict=True):
            f.add_(g.square())
    return [f / n_rows for f in fisher]


def with_pre_body(pre: nn.Module, ft: nn.Module) -> nn.Module:
    """A copy of ``ft`` whose graftable tensors (the transformer layers) hold ``pre``'s values: θ_pre's body with
    θ_ft's task heads, the model whose Fisher is θ_pre's (θ_pre has no task head). Neither input is modified.

    Raises:
        UserError: ``pre`` lacks one of ``ft``'s graftable tensors.
    """
    work = clone_model(ft)
    params, pre_params = dict(work.named_parameters()), dict(pre.named_parameters())
    names = graftable_names(params.items())
    missing = [n for n in names if n not in pre_params]
    if missing:
        raise UserError(f"pre-trained model lacks {len(missing)} graftable tensor(s), first {missing[0]!r}")
    with torch.no_grad():
        for n in names:
            params[n].copy_(pre_params[n])
    return work


def _row_sq_norms(kind: str, module: nn.Module, a: Tensor, d: Tensor) -> dict[str, Tensor]:
    """Per-row squared gradient norms ``‖g_i‖²`` (B,) of ``module``'s weight and bias, from its input ``a``
    (B, T, in) and output gradient ``d`` (B, T, out), without materialising the (B, out, in) gradients."""
    if kind == "layernorm":
        mean = a.mean(-1, keepdim=True)
        xhat = (a - mean) / torch.sqrt(a.var(-1, unbiased=False, keepdim=True) + module.eps)   # (B, T, H)
        weight = (d * xhat).sum(1).square().sum(1)                              # (B,)
    else:                                               # Linear and Conv1D: ‖Σ_t d_t a_tᵀ‖² = Σ_ts (d_t·d_s)(a_t·a_s)
        weight = (d @ d.transpose(1, 2) * (a @ a.transpose(1, 2))).sum((1, 2))   # (B, T, T) → (B,)
    return {"weight": weight, "bias": d.sum(1).square().sum(1)}


def _kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, Conv1D):
        return "conv1d"
    if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1:
        return "layernorm"
    return None


def fisher_sums(model: TextClassifier, rows: list[dict], *, task: str | None = None,
                    names: Sequence[str] | None = None, batch_size: int = 16,
                    progress: bool = False) -> dict[str, float]:
    """Diagonal empirical Fisher of ``model`` on ``rows`` summed over each tensor: name → (1/n) Σ_i ‖g_i‖²,
    where g_i is the tensor's gradient of log p(y_i | x_i).

    Args:
        model: any head; not modified (eval mode during the pass, each module's mode restored after).
        rows: labelled rows of ``task`` (at least one).
        names: parameters to score (default: the graftable ones, i.e. inside the transformer layers).
        batch_size: rows per forward/backward pass.

    Raises:
        UserError: no rows, or a parameter owned by a module whose per-row gradient is not implemented.
    """
    if not rows:
        raise UserError("the Fisher sample is empty: no training rows")
    task = model.resolve_task(task)
    params = dict(model.named_parameters())
    names = list(graftable_names(params.items()) if names is None else names)
    owners: dict[str, tuple[nn.Module, str]] = {}                        # module path → (module, kind)
    for n in names:
        path, _, leaf = n.rpartition(".")
        module = model.get_submodule(path)
        kind = _kind(module)
        if kind is None or leaf not in ("weight", "bias"):
            raise UserError(f"per-row Fisher of {n!r} ({type(module).__name__}) is not supported")
        owners[path] = (module, kind)
    fisher = dict.fromkeys(names, 0.0)
    records: list[tuple[str, Tensor, Tensor]] = []                         # (path, input, output)
    hooks = [module.register_forward_hook(lambda m, inp, out, p=path: records.append((p, inp[0], out)))
             for path, (module, _) in owners.items()]
    modes, grad_state = {m: m.training for m in model.modules()}, {n: p.requires_grad for n, p in params.items()}
    model.eval()
    for n in names:
        params[n].requires_grad_(True)
    device = next(model.parameters()).device
    try:
        order = sorted(rows, key=lambda r: sum(len(r.get(k, "")) for k in ("text", "text_a", "text_b")))
        for start in tqdm(range(0, len(rows), batch_size), desc=f"fisher {task}", disable=not progress):
            batch = order[start:start + batch_size]                       # similar lengths: little padding
            records.clear()
            enc = {k: v.to(device) for k, v in model.encode(batch, task).items()}
            labels = torch.tensor([r["label"] for r in batch], device=device)
            log_p = torch.log_softmax(model(**enc, task=task).float(), dim=-1)     # (B, C)
            total = log_p.gather(1, labels[:, None]).sum()
            grads = torch.autograd.grad(total, [out for _, _, out in records])
            calls: dict[str, list[tuple[Tensor, Tensor]]] = {}            # path → [(input, output grad)]
            for (path, a, _), d in zip(records, grads, strict=True):
                calls.setdefault(path, []).append((a.detach(), d))
            records.clear()
            for path, pairs in calls.items():
                module, kind = owners[path]
                if len(pairs) > 1:
                    raise UserError(f"per-row Fisher of {path!r}: the module runs {len(pairs)} times per forward")
                a, d = (t.reshape(len(batch), -1, t.shape[-1]).double() for t in pairs[0])
                for leaf, sq in _row_sq_norms(kind, module, a, d).items():
                    if f"{path}.{leaf}" in fisher:
                        fisher[f"{path}.{leaf}"] += float(sq.sum())
    finally:
        for h in hooks:
            h.remove()
        for n, p in params.items():
            p.requires_grad_(grad_state[n])
        for m, mode in modes.items():
            m.train(mode)
    return {n: f / len(rows) for n, f in fisher.items()}


@dataclass
class LayerFisher:
    """FIM scores of one model on one row sample.

    Attributes:
        layers: the layer indices, ascending.
        scores: per layer, its share of the total Fisher (sums to 1).
        per_element: per layer, the mean Fisher per element.
        groups: group (:data:`GROUPS`) → per layer, that group's share of the total Fisher.
        n_rows: rows in the sample.
    """

    layers: list[int]
    scores: list[float]
    per_element: list[float]
    groups: dict[str, list[float]]
    n_rows: int

    def ranking(self) -> list[int]:
        """Layer indices, highest score first (ties: lower layer first)."""
        return [self.layers[i] for i in sorted(range(len(self.layers)), key=lambda i: (-self.scores[i], i))]

    def top(self, k: int) -> list[int]:
        """The ``k`` highest-scoring layers, ascending."""
        if not 1 <= k <= len(self.layers):
            raise UserError(f"top {k} layers asked for; the model has {len(self.layers)} (use 1..{len(self.layers)})")
        return sorted(self.ranking()[:k])

    def to_json(self) -> dict:
        return {**asdict(self), "ranking": self.ranking()}


def layer_fisher(model: TextClassifier, rows: list[dict], *, task: str | None = None, batch_size: int = 16,
                 progress: bool = False) -> LayerFisher:
    """FIM scores per layer and per parameter group (module docstring) of ``model`` on ``rows``."""
    fisher = fisher_sums(model, rows, task=task, batch_size=batch_size, progress=progress)
    sizes = {n: p.numel() for n, p in model.named_parameters() if n in fisher}
    layers = sorted({layer_index(n) for n in fisher})
    index = {layer: i for i, layer in enumerate(layers)}
    sums, counts = np.zeros(len(layers)), np.zeros(len(layers))
    groups = {g: np.zeros(len(layers)) for g in GROUPS}
    for n, value in fisher.items():
        i = index[layer_index(n)]
        sums[i] += value
        counts[i] += sizes[n]
        groups.setdefault(param_group(n), np.zeros(len(layers)))[i] += value
    total = sums.sum() or 1.0
    return LayerFisher(layers, (sums / total).tolist(), (sums / counts).tolist(),
                       {g: (v / total).tolist() for g, v in groups.items()}, len(rows))


def rank_agreement(a: LayerFisher, b: LayerFisher, k: int) -> dict:
    """Spearman correlation of two FIM rankings of the same layers and the overlap of their top ``k``."""
    if a.layers != b.layers:
        raise UserError("the two FIM rankings cover different layers")
    ranks = [np.argsort(np.argsort([-s for s in x.scores], kind="stable")) for x in (a, b)]
    rho = float(np.corrcoef(ranks[0], ranks[1])[0, 1]) if len(a.layers) > 1 else 1.0
    return {"spearman": rho, f"top{k}_overlap": len(set(a.top(k)) & set(b.top(k))) / k}
