"""The experiment behind ``cl-graft surgical``: full FT vs surgical top-k FIM layers vs random layers vs grafting.

Lodha et al. 2023 (https://aclanthology.org/2023.findings-emnlp.204) claim that fine-tuning the top-2/3 FIM
layers comes close to full fine-tuning (sometimes beats it), beats other layer choices, and that the FIM
ranking stays stable during training. Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600) localize the
skill in a sparse region instead. This module runs both on one task and puts them side by side:

- FIM scores at θ_pre (the fresh task head, seeded as in full FT), which choose the layers;
- full FT (given or trained), surgical FT of the top-k layers for each k, random k layers (seeded control),
  and a learned graft region with as many elements as the top-k layers hold ("grafting at a matching size");
- ranking stability: FIM at the start (θ_pre), end (θ_ft) and, with ``stability``, the middle (step
  ``steps // 2`` of the same run, reproduced by re-running the first half with the same seed and batch order;
  no dev selection); also θ_pre's body with θ_ft's head (``pre_ft_head``), which separates the head's part
  in a change of ranking from the body's;
- where skills live: FIM shares per layer next to a small graft region's share per layer (its anatomy).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..grafting.graft import graft_model
from ..regions.config import LocalizeConfig
from ..regions.fisher import LayerFisher, layer_fisher, rank_agreement, with_pre_body
from ..regions.methods import find_region
from ..regions.region import graftable_names
from ..training.evaluate import score_model
from ..training.finetune import FinetuneConfig, finetune_, trainable_names
from ..training.models import TextClassifier, clone_model
from .finetune import random_layers, surgical_finetune, trained_count


@dataclass
class SurgicalPlan:
    """What to run: top-k sizes, random-control sizes, the graft comparison and the stability check."""

    top: list[int]
    random: list[int]
    graft: bool = True
    stability: bool = True
    anatomy_region_size: float = 1e-3
    fisher_batch: int = 16
    seed: int = 0


def _row(name: str, kind: str, layers, trained: int, seconds: float | None, scores: dict) -> dict:
    return {"name": name, "kind": kind, "layers": layers, "trained": trained,
            "seconds": None if seconds is None else round(seconds, 1), **scores}


def surgical_table(pre: TextClassifier, ft: TextClassifier, ft_seconds: float | None, fim_start: LayerFisher,
                   splits, sample: list[dict], cfg: FinetuneConfig, plan: SurgicalPlan,
                   progress: bool = True) -> dict:
    """Runs the plan on one task and returns rows, FIM scores, stability and the anatomy comparison.

    Args:
        pre: θ_pre with the task's fresh head (the start of every training run here); not modified.
        ft: θ_ft of the same task (full fine-tuning with ``cfg``); ``ft_seconds`` its training time if known.
        fim_start: FIM scores of ``pre`` on ``sample`` (they choose the layers).
        splits: the task's rows (:class:`~cl_graft.task.TaskRows`).
        sample: the rows the FIM scores are computed on.
        cfg: the fine-tuning recipe shared by full and surgical FT.

    Returns:
        ``{"rows", "fim", "stability", "anatomy"}``; rows carry accuracy/F1/ECE/agreement with FT,
        ``trained`` (parameters trained or grafted, heads excluded), ``seconds``, ``relative`` (score / FT's).
    """
    task, seed = splits.spec.name, plan.seed
    heads = set(ft.head_parameter_names())
    params = dict(pre.named_parameters())
    body = [n for n in trainable_names(pre, freeze_embeddings=cfg.freeze_embeddings) if n not in heads]
    ft_scores, ft_preds = score_model(ft, splits.test, task, ood={})
    rows = [_row("FT", "full", "all", sum(params[n].numel() for n in body), ft_seconds, ft_scores)]

    def train(name: str, kind: str, layers: list[int]) -> None:
        t0 = time.perf_counter()
        model, _ = surgical_finetune(pre, layers, splits.train, splits.dev, cfg, task=task, progress=progress)
        scores, _ = score_model(model, splits.test, task, ood={}, reference=ft_preds)
        rows.append(_row(name, kind, layers, trained_count(pre, layers), time.perf_counter() - t0, scores))

    for k in plan.top:
        train(f"FIM top-{k}", "surgical", fim_start.top(k))
    for k in plan.random:
        train(f"random-{k}", "random", random_layers(pre, k, seed))
    numel = sum(params[n].numel() for n in graftable_names(params.items()))
    if plan.graft:
        for k in plan.top:
            elements = trained_count(pre, fim_start.top(k))
            t0 = time.perf_counter()
            lcfg = LocalizeConfig(region_size=elements / numel, region_elements=elements, seed=seed)
            region = find_region("graft", pre, ft, splits.train, splits.dev, lcfg, task=task, progress=progress).region
            scores, _ = score_model(graft_model(pre, ft, region), splits.test, task, ood={}, reference=ft_preds)
            rows.append(_row(f"graft ~top-{k}", "graft", None, region.size, time.perf_counter() - t0, scores))
    for r in rows:
        r["relative"] = r[splits.spec.metric] / ft_scores[splits.spec.metric] if ft_scores[splits.spec.metric] else None
    fim = {"start": fim_start,
           "pre_ft_head": layer_fisher(with_pre_body(pre, ft), sample, task=task, batch_size=plan.fisher_batch,
                                       progress=progress)}
    if plan.stability:
        mid = clone_model(pre)
        finetune_(mid, splits.train, [], replace(cfg, steps=max(1, cfg.steps // 2)), task=task, progress=progress)
        fim["middle"] = layer_fisher(mid, sample, task=task, batch_size=plan.fisher_batch, progress=progress)
    fim["end"] = layer_fisher(ft, sample, task=task, batch_size=plan.fisher_batch, progress=progress)
    ks = sorted(set(plan.top))
    stages = list(fim)
    stability = {f"{a}-{b}": {str(k): rank_agreement(fim[a], fim[b], k) for k in ks}
                 for i, a in enumerate(stages) for b in stages[i + 1:]}
    acfg = LocalizeConfig(region_size=plan.anatomy_region_size, seed=seed)
    region = find_region("graft", pre, ft, splits.train, splits.dev, acfg, task=task, progress=progress).region
    by_layer = region.breakdown()["by_layer"]
    per_layer = [by_layer.get(i, {"size": 0})["size"] / max(region.size, 1) for i in fim_start.layers]
    anatomy = {"region_size": plan.anatomy_region_size, "size": region.size, "share": per_layer,
               "top_layers": sorted(fim_start.layers, key=lambda i: -per_layer[fim_start.layers.index(i)])}
    return {"rows": rows, "fim": {k: v.to_json() for k, v in fim.items()}, "stability": stability,
            "anatomy": anatomy}
