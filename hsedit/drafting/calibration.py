"""Calibration measures and Sequential Temperature Scaling (numpy only).

`probs` are predicted probabilities, `labels` 0/1 outcomes, both 1-D and of one length.
"""

from __future__ import annotations

import numpy as np

ECE_BINS = 20
STS_GRID = np.geomspace(0.25, 8.0, 61)


def ece(probs: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error: |mean prediction - mean outcome| per equal-width bin, weighted."""
    probs, labels = np.asarray(probs, float), np.asarray(labels, float)
    if not len(probs):
        return float("nan")
    which = np.minimum((probs * bins).astype(int), bins - 1)
    gap = np.bincount(which, weights=probs - labels, minlength=bins)
    return float(np.abs(gap).sum() / len(probs))


def log_loss(probs: np.ndarray, labels: np.ndarray) -> float:
    p = np.clip(np.asarray(probs, float), 1e-7, 1 - 1e-7)
    y = np.asarray(labels, float)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()) if len(p) else float("nan")


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (ties count half), via the rank-sum statistic."""
    scores, labels = np.asarray(scores, float), np.asarray(labels).astype(bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # average ranks over ties
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def survival_from_logits(logits: np.ndarray, temperatures: np.ndarray) -> np.ndarray:
    """[n, K] confidence logits -> [n, K] survival prod_{i<=k} sigmoid(logit_i / T_i)."""
    return np.cumprod(1.0 / (1.0 + np.exp(-logits / temperatures[None, :])), axis=1)


def fit_sts(logits: np.ndarray, survived: np.ndarray, valid: np.ndarray, grid=STS_GRID) -> np.ndarray:
    """Sequential Temperature Scaling: for k = 1..K in turn, the T_k (earlier ones fixed) that
    minimises the ECE of the cumulative survival a_k against "x_1..x_k were all accepted".

    logits, survived, valid: [n, K]; valid marks blocks where position k could be judged.
    """
    k_max = logits.shape[1]
    temperatures = np.ones(k_max)
    for k in range(k_max):
        rows = valid[:, k].astype(bool)
        if rows.sum() < 20:
            continue
        best, best_error = 1.0, np.inf
        for t in grid:
            temperatures[k] = t
            error = ece(survival_from_logits(logits[rows, : k + 1], temperatures[: k + 1])[:, k], survived[rows, k])
            if error < best_error:
                best, best_error = t, error
        temperatures[k] = best
    return temperatures
