"""Scoring a trained token router: precision / recall / AUC at a threshold, and the threshold it runs at."""

from __future__ import annotations

from typing import Any

import numpy as np


def binary_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    """Precision, recall and F1 of "score > threshold" for the positive class, the fraction of tokens routed
    (sent to the large model), the positive base rate and the ROC AUC."""
    predicted, positive = scores > threshold, labels > 0.5
    true_pos = float(np.sum(predicted & positive))
    precision = true_pos / max(float(np.sum(predicted)), 1.0)
    recall = true_pos / max(float(np.sum(positive)), 1.0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "route_rate": round(float(np.mean(predicted)), 4),
        "positive_rate": round(float(np.mean(positive)), 4),
        "auc": _rounded(roc_auc(scores, labels)),
        "num_tokens": len(labels),
    }


def _rounded(value: float) -> float | None:
    return None if np.isnan(value) else round(value, 4)  # JSON has no NaN


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    positive = labels > 0.5
    num_pos, num_neg = int(positive.sum()), int((~positive).sum())
    if num_pos == 0 or num_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # average ranks over ties
    unique, start, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    del unique
    for s, c in zip(start, counts, strict=True):
        ranks[order[s : s + c]] = s + (c + 1) / 2.0
    return float((ranks[positive].sum() - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg))


def best_f1_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The threshold (on a 0.01 grid in (0, 1)) with the highest F1 on the given rows."""
    grid = np.round(np.arange(0.01, 1.0, 0.01), 2)
    f1 = [binary_metrics(scores, labels, float(t))["f1"] for t in grid]
    return float(grid[int(np.argmax(f1))])


def threshold_at_rate(scores: np.ndarray, route_rate: float) -> float:
    """The threshold that routes (about) the given fraction of tokens: a baseline at equal cost."""
    if route_rate <= 0:
        return float(np.max(scores))
    return float(np.quantile(scores, 1.0 - route_rate))


def split_report(scores: np.ndarray, labels: np.ndarray, masks: dict[str, np.ndarray], threshold: float) -> Any:
    """``binary_metrics`` per split."""
    return {split: binary_metrics(scores[rows], labels[rows], threshold) for split, rows in masks.items()}
