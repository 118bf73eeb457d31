"""Batched inference and evaluation of a :class:`~cl_graft.training.models.TextClassifier` on rows."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import UserError
from ..metrics import agreement, summarize


def text_length(row: dict) -> int:
    return len(row.get("text", "")) + len(row.get("text_a", "")) + len(row.get("text_b", ""))


@torch.no_grad()
def predict_logits(model, rows: list[dict], task: str | None = None, *, batch_size: int = 64,
                   progress: bool = False) -> np.ndarray:
    """Label logits (N, C) as float32 numpy, in the order of ``rows``.

    Rows are batched by length (less padding); the model's train/eval mode is restored afterwards.
    """
    was_training = model.training
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: text_length(rows[i]))
    out: list[np.ndarray | None] = [None] * len(rows)
    device = next(model.parameters()).device
    starts = range(0, len(rows), batch_size)
    for s in tqdm(starts, desc="eval", leave=False, disable=not progress):
        idx = order[s:s + batch_size]
        enc = {k: v.to(device) for k, v in model.encode([rows[i] for i in idx], task).items()}
        logits = model(**enc, task=task).float().cpu().numpy()
        for j, i in enumerate(idx):
            out[i] = logits[j]
    model.train(was_training)
    num_labels = model.tasks[model.resolve_task(task)].num_labels
    return np.stack(out) if rows else np.zeros((0, num_labels), dtype=np.float32)


def evaluate(model, rows: list[dict], task: str | None = None, *, batch_size: int = 64, n_bins: int = 10,
             progress: bool = False) -> tuple[dict, np.ndarray]:
    """Metrics (accuracy, F1 for binary tasks, ECE, headline ``score``) and the predictions (N,).

    Raises:
        UserError: the model's outputs on some row are NaN or infinite (no metric is computed from them).
    """
    name = model.resolve_task(task)
    logits = predict_logits(model, rows, name, batch_size=batch_size, progress=progress)
    bad = int((~np.isfinite(logits)).any(axis=1).sum())
    if bad:
        raise UserError(f"task {name}: the model's outputs are NaN or infinite on {bad} of {len(rows)} rows; "
                        f"no metric computed (a diverged or broken model)")
    labels = np.array([r["label"] for r in rows], dtype=np.int64)
    metrics = summarize(logits, labels, metric=model.tasks[name].metric, n_bins=n_bins)
    return metrics, logits.argmax(axis=1)


def score_model(model, test: list[dict], task: str, *, ood: Mapping[str, list[dict]],
                reference: np.ndarray | None = None) -> tuple[dict, np.ndarray]:
    """Test metrics, agreement with ``reference`` predictions (N,), and accuracy on each OOD row set."""
    metrics, preds = evaluate(model, test, task)
    row = {k: metrics[k] for k in ("accuracy", "f1", "ece") if k in metrics}
    row["agreement"] = agreement(preds, reference) if reference is not None else 1.0
    row["ood"] = {name: evaluate(model, rows, task)[0]["accuracy"] for name, rows in ood.items()}
    return row, preds
