"""The experiment behind ``cl-graft analyze``: calibration, OOD accuracy and WiSE curves of FT vs grafting.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600): grafted models are better calibrated than θ_ft
(§4.1, App. B.3; ECE lower by about half) and match or beat it out of distribution (§4.2, App. B.4), and
WiSE-FT (Wortsman et al. 2022, https://arxiv.org/abs/2109.01903) is the baseline that trades ID for OOD
accuracy along θ_pre ↔ θ_ft. Models compared on one task:

- FT; learned graft regions at several region sizes; optionally graft re-training (the region's elements
  trained from θ_pre) and BitFit (:mod:`cl_graft.regions.finetune`) with FT's recipe;
- per model: test accuracy/F1/ECE and reliability bins; ECE after temperature scaling fitted on dev rows;
  for grafted models, the head re-fitted on the grafted body's features (train rows); OOD accuracy;
- WiSE-FT (θ_pre ↔ θ_ft) and WiSE-graft (θ_pre ↔ grafted) for each mixing weight α, ID and OOD.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from ..grafting.graft import graft_model, wise
from ..metrics import ece, summarize
from ..regions.config import LocalizeConfig
from ..regions.finetune import bitfit, finetune_region
from ..regions.methods import find_region
from ..training.evaluate import evaluate, predict_logits
from ..training.finetune import FinetuneConfig
from ..training.models import TextClassifier
from .calibration import fit_temperature, refit_head, reliability, scaled_probs

SECTIONS = ("calibration", "ood", "wise")


@dataclass
class AnalyzePlan:
    """What to run: sections, graft region sizes, training baselines and the WiSE grid."""

    sections: tuple[str, ...]
    region_sizes: list[float]
    baselines: bool
    retrain_region_size: float
    alphas: list[float]
    wise_region_size: float
    seed: int = 0
    n_bins: int = 10

    def __post_init__(self) -> None:
        bad = [s for s in self.sections if s not in SECTIONS]
        if bad or not self.sections:
            raise UserError(f"unknown section {bad[0] if bad else ''!r}; choose from {', '.join(SECTIONS)}")
        for what, value in (("retrain", self.retrain_region_size), ("wise", self.wise_region_size)):
            if value not in self.region_sizes:
                raise UserError(f"--{what}-region-size {value:g} is not one of --region-size {self.region_sizes}")
        if any(not 0 <= a <= 1 for a in self.alphas):
            raise UserError("WiSE mixing weights must be in [0, 1]")


def _scores(model: TextClassifier, splits, ood: dict[str, list[dict]], n_bins: int) -> tuple[dict, np.ndarray]:
    """Test metrics + OOD accuracy of one model, and its (N, C) test logits."""
    task = splits.spec.name
    logits = predict_logits(model, splits.test, task)
    labels = np.array([r["label"] for r in splits.test])
    row = {k: v for k, v in summarize(logits, labels, metric=splits.spec.metric, n_bins=n_bins).items() if k != "n"}
    row["ood"] = {name: evaluate(model, rows, task)[0]["accuracy"] for name, rows in ood.items()}
    return row, logits


def analyze_task(pre: TextClassifier, ft: TextClassifier, splits, ood: dict[str, list[dict]],
                 cfg: FinetuneConfig, plan: AnalyzePlan, *, progress: bool = True) -> dict:
    """Runs the plan on one task.

    Args:
        pre: θ_pre with the task's fresh head (start of the training baselines); not modified.
        ft: θ_ft of the task.
        splits: object with ``spec``, ``train``, ``dev``, ``test`` rows.
        ood: OOD name → rows already mapped into the task's labels (empty unless the ``ood`` section runs).
        cfg: FT's recipe, used by graft re-training and BitFit.

    Returns:
        ``{"rows", "reliability", "wise"}``: one row per model (metrics, ``temperature``, ``ece_scaled``,
        ``refit`` for grafted models, ``ood``, ``seconds``), reliability bins per model, WiSE curves.
    """
    task, labels = splits.spec.name, np.array([r["label"] for r in splits.test])
    dev_labels = np.array([r["label"] for r in splits.dev])
    calib = "calibration" in plan.sections
    models: list[tuple[str, str, TextClassifier, float]] = [("FT", "finetuned", ft, 0.0)]
    regions = {}
    for s in plan.region_sizes:
        t0 = time.perf_counter()
        lcfg = LocalizeConfig(region_size=s, seed=plan.seed)
        regions[s] = find_region("graft", pre, ft, splits.train, splits.dev, lcfg, task=task, progress=progress).region
        models.append((f"graft-{s:g}", "graft", graft_model(pre, ft, regions[s]), time.perf_counter() - t0))
    if calib and plan.baselines:
        t0 = time.perf_counter()
        retrained, _ = finetune_region(pre, regions[plan.retrain_region_size], splits.train, splits.dev, cfg,
                                       task=task, progress=progress)
        models.append((f"graft-retrain-{plan.retrain_region_size:g}", "retrain", retrained, time.perf_counter() - t0))
        t0 = time.perf_counter()
        models.append(("BitFit", "bitfit", bitfit(pre, splits.train, splits.dev, cfg, task=task,
                                                  progress=progress)[0], time.perf_counter() - t0))
    rows, bins = [], {}
    for name, kind, model, seconds in models:
        row, logits = _scores(model, splits, ood, plan.n_bins)
        row.update(name=name, kind=kind, seconds=round(seconds, 1))
        if calib:
            bins[name] = reliability(scaled_probs(logits, 1.0), labels, plan.n_bins)
            row["temperature"] = fit_temperature(predict_logits(model, splits.dev, task), dev_labels)
            row["ece_scaled"] = ece(scaled_probs(logits, row["temperature"]), labels, plan.n_bins)
            if kind == "graft" and model.head_kind == "linear":
                refit, _ = _scores(refit_head(model, splits.train, task), splits, ood, plan.n_bins)
                row["refit"] = refit
        rows.append(row)
    curves = {}
    if "wise" in plan.sections:
        ends = {r["name"]: {k: r[k] for k in ("accuracy", "f1", "ece", "score", "ood") if k in r} for r in rows}
        label = f"graft-{plan.wise_region_size:g}"
        grafted = next(m for name, _, m, _ in models if name == label)
        start = None                              # α = 0 is θ_pre with FT's head for both curves: score it once
        for name, other, end in (("WiSE-FT", ft, ends["FT"]), (f"WiSE-{label}", grafted, ends[label])):
            curves[name] = []
            for a in plan.alphas:
                if a == 0:
                    start = start or _scores(wise(pre, other, 0.0), splits, ood, plan.n_bins)[0]
                point = end if a == 1 else start if a == 0 else _scores(wise(pre, other, a), splits, ood,
                                                                            plan.n_bins)[0]
                curves[name].append(point)
    return {"rows": rows, "reliability": bins, "wise": {"alphas": plan.alphas, "curves": curves}}
