"""The experiment behind ``cl-graft localize``: find or load regions, graft them, score them against θ_ft.

Panigrahi et al. 2023 (https://arxiv.org/abs/2302.06600), Tables 1–3: for FT and each grafted model,
in-distribution accuracy (and F1), ECE, agreement with FT, out-of-distribution accuracy, region size and
density, and the time it took to find the region. Every region is saved (with the task's head) together with
a PNG of its anatomy (selected elements per layer, stacked by parameter type). The paper's training baselines
(:data:`TRAINED_BASELINES`: graft re-training and BitFit) are rows of the same table: models trained from
θ_pre inside a region with the fine-tuning recipe, scored the same way.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import UserError
from ..grafting.graft import graft_model
from ..regions.config import LocalizeConfig
from ..regions.finetune import bias_region, bitfit, finetune_region
from ..regions.methods import find_region
from ..regions.region import Region, check_region, fingerprint
from ..training.evaluate import score_model
from ..training.finetune import FinetuneConfig
from ..training.models import TextClassifier, clone_model
from .report import save_anatomy

REGIONS_DIR = "regions"
TRAINED_BASELINES = {
    "retrain": "graft re-training: the graft region of the same region size trained from θ_pre (paper Table 1)",
    "bitfit": "BitFit: only the biases trained from θ_pre (https://arxiv.org/abs/2106.10199); one row",
}


def region_label(method: str, region_size: float) -> str:
    """A region's folder name under ``regions/``: ``<method>-<region size>``, e.g. ``graft-0.001``."""
    return f"{method}-{region_size:g}"


def load_given_regions(paths: Sequence[str], pre: TextClassifier, ft: TextClassifier | None, *,
                       region_elements: int | None) -> dict[str, Region]:
    """Loads saved regions and checks each against the models; label → region.

    Raises:
        UserError: an unreadable, truncated or tampered region, one made for other tensors or another θ_pre,
            an empty region, or one larger than ``region_elements``.
    """
    pre_params = dict(pre.named_parameters())
    given = {}
    for path in paths:
        region = Region.load(path)
        for model, what in ((pre, "pre-trained model"), (ft, "fine-tuned model")):
            if model is not None:
                check_region(region, model, what=what)
        region.check_model(region.shapes, {"pre": fingerprint(pre_params, region.names)})
        if region.is_empty:
            raise UserError(f"region {path} is empty")
        if region_elements is not None and region.size > region_elements:
            raise UserError(f"region {path} holds {region.size} elements, over --region-elements {region_elements}")
        label = region_label(region.meta.get("method", "region"), region.meta.get("region_size") or region.density())
        given[f"given-{len(given)}-{label}"] = region
    return given


def _trained(method: str, pre: TextClassifier, ft: TextClassifier, region: Region, train: list[dict],
             dev: list[dict], recipe: FinetuneConfig, task: str, progress: bool) -> TextClassifier:
    """A :data:`TRAINED_BASELINES` model: θ_pre with the task's head at its fine-tuning init, trained inside
    ``region`` (the graft region for ``retrain``; ignored for ``bitfit``, which takes the biases)."""
    start = clone_model(pre)
    if task not in start.tasks:
        start.add_task(ft.tasks[task], seed=recipe.seed)
    if method == "bitfit":
        return bitfit(start, train, dev, recipe, task=task, progress=progress)[0]
    return finetune_region(start, region, train, dev, recipe, task=task, progress=progress)[0]


def localize_table(pre: TextClassifier, ft: TextClassifier, train: list[dict], dev: list[dict], test: list[dict],
                   *, task: str, methods: Sequence[str], region_sizes: Sequence[float], cfg: LocalizeConfig,
                   out: Path, ood: Mapping[str, list[dict]] | None = None,
                   given: Mapping[str, Region] | None = None, recipe: FinetuneConfig | None = None,
                   progress: bool = True) -> list[dict]:
    """Finds (``methods`` × ``region_sizes``) and/or takes (``given``) regions, grafts, scores, saves.

    Args:
        pre, ft: θ_pre and θ_ft (``task`` registered in ``ft``).
        train, dev, test: rows; train/dev are for finding regions, test for scoring.
        task: the task.
        methods, region_sizes: :data:`~cl_graft.regions.methods.REGION_METHODS` and :data:`TRAINED_BASELINES`
            names, and the region sizes to run.
        cfg: localization settings; its ``region_size`` is replaced by each value of ``region_sizes``.
        out: folder; regions go to ``out/regions/<label>/`` (+ ``anatomy.png``).
        ood: OOD name → rows labelled in the task's label space.
        given: label → an already-checked region to score as well (saved again under its label).
        recipe: the fine-tuning recipe of the trained baselines (required when ``methods`` names one).

    Returns:
        One row per model: ``name``, ``method``, ``region_size``, ``size``, ``density``, ``seconds``, metrics.
    """
    ood = dict(ood or {})
    ft_row, ft_preds = score_model(ft, test, task, ood=ood)
    rows = [{"name": "FT", "method": "finetuned", "region_size": None, "size": None, "density": None,
             "seconds": None, **ft_row}]
    if recipe is None and any(m in TRAINED_BASELINES for m in methods):
        raise UserError("the trained baselines (retrain, bitfit) need the fine-tuning recipe")
    jobs = [(label, r, r.meta.get("method", "given"), r.meta.get("region_size")) for label, r in (given or {}).items()]
    jobs += [(region_label(m, s), None, m, s) for s in region_sizes for m in methods if m != "bitfit"]
    jobs += [("bitfit", bias_region(pre), "bitfit", None)] if "bitfit" in methods else []
    heads = {n: p.detach() for n, p in ft.named_parameters() if n.startswith(f"heads.{task}.")}
    found: dict[tuple[str, float], Region] = {}
    for label, region, method, region_size in jobs:
        t0 = time.perf_counter()
        if region is None:
            finder = "graft" if method == "retrain" else method
            if (finder, region_size) not in found:
                run_cfg = LocalizeConfig.from_json({**cfg.to_json(), "region_size": region_size})
                found[finder, region_size] = find_region(finder, pre, ft, train, dev, run_cfg, task=task,
                                                      progress=progress).region
            region = found[finder, region_size]
        if method in TRAINED_BASELINES:
            model = _trained(method, pre, ft, region, train, dev, recipe, task, progress)
        else:
            model = graft_model(pre, ft, region)
        seconds = time.perf_counter() - t0
        row, _ = score_model(model, test, task, ood=ood, reference=ft_preds)
        if method not in TRAINED_BASELINES:
            folder = out / REGIONS_DIR / label
            region.save(folder, heads=heads or None)
            save_anatomy(region, folder / "anatomy.png",
                         title=f"{task} {label}\n{region.size} elements, {100 * region.density():.3g}%")
        rows.append({"name": label, "method": method, "region_size": region_size, "size": region.size,
                     "density": region.density(), "seconds": round(seconds, 2), **row})
    return rows


