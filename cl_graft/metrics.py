"""Classification metrics as plain numpy functions.

ECE follows Guo et al. (2017) as used by Panigrahi et al. (2023): equal-width confidence bins,
``sum_b (n_b / n) * |acc_b - conf_b|`` with confidence = max softmax probability over the label logits.
"""
from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax. ``logits``: (N, C) -> (N, C) probabilities."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of ``pred == labels`` (both (N,) ints); 0.0 for empty input."""
    pred, labels = np.asarray(pred), np.asarray(labels)
    return float((pred == labels).mean()) if len(labels) else 0.0


def f1(pred: np.ndarray, labels: np.ndarray, positive: int = 1) -> float:
    """Binary F1 of class ``positive`` (GLUE's metric for MRPC and QQP); 0.0 when undefined."""
    pred, labels = np.asarray(pred), np.asarray(labels)
    tp = int(((pred == positive) & (labels == positive)).sum())
    fp = int(((pred == positive) & (labels != positive)).sum())
    fn = int(((pred != positive) & (labels == positive)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """Expected calibration error in [0, 1].

    Args:
        probs: (N, C) class probabilities.
        labels: (N,) true labels.
        n_bins: number of equal-width confidence bins over [0, 1]; a confidence of exactly 1.0 falls in the last.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    if len(labels) == 0:
        return 0.0
    conf = probs.max(axis=1)                                     # (N,)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            total += sel.mean() * abs(correct[sel].mean() - conf[sel].mean())
    return float(total)


def agreement(pred_a: np.ndarray, pred_b: np.ndarray) -> float:
    """Fraction of examples on which two models predict the same label."""
    return accuracy(pred_a, pred_b)


def summarize(logits: np.ndarray, labels: np.ndarray, *, metric: str = "accuracy", n_bins: int = 10) -> dict:
    """Accuracy, F1 (binary tasks), ECE and the task's headline ``score`` from (N, C) logits."""
    probs = softmax(np.asarray(logits, dtype=np.float64))
    pred = probs.argmax(axis=1)
    out = {"n": len(labels), "accuracy": accuracy(pred, labels), "ece": ece(probs, labels, n_bins)}
    if probs.shape[1] == 2:
        out["f1"] = f1(pred, labels)
    out["score"] = out["f1"] if metric == "f1" else out["accuracy"]
    return out
