"""Calibration metrics of the UEC evaluation: ROC AUC, ECE, top-1 confidence and its temperature."""

from __future__ import annotations

import numpy as np

__all__ = ["expected_calibration_error", "fit_confidence_temperature", "roc_auc", "top1_confidence"]


def roc_auc(scores, labels) -> float:
    """ROC AUC of ``scores`` for binary ``labels`` (Mann-Whitney, ties averaged); NaN with one class."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries but labels has {y.size}")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(s)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def expected_calibration_error(confidence, correct, *, bins: int = 15) -> float:
    """``sum_b |B_b|/n * |acc(B_b) - conf(B_b)|`` over equal-width confidence bins on [0, 1]."""
    c = np.asarray(confidence, dtype=np.float64).ravel()
    y = np.asarray(correct, dtype=np.float64).ravel()
    if c.shape != y.shape or c.size == 0:
        raise ValueError("confidence and correct must be non-empty and of equal length")
    if ((c < 0) | (c > 1)).any():
        raise ValueError("confidence must lie in [0, 1]")
    which = np.minimum((c * bins).astype(int), bins - 1)
    ece = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            ece += m.mean() * abs(y[m].mean() - c[m].mean())
    return float(ece)


def top1_confidence(top_scores: np.ndarray, tau: float) -> np.ndarray:
    """``softmax(top_scores / tau)[:, 0]`` (scores sorted best first)."""
    z = np.asarray(top_scores, dtype=np.float64) / tau
    z = z - z[:, :1]
    return 1.0 / np.exp(z).sum(axis=1)


def fit_confidence_temperature(top_scores: np.ndarray, correct) -> float:
    """The ``tau`` (log grid) minimising the binary NLL of :func:`top1_confidence`."""
    y = np.asarray(correct, dtype=np.float64)
    best, best_tau = np.inf, 1.0
    for tau in np.logspace(-3.5, 0.5, 81):
        p = np.clip(top1_confidence(top_scores, tau), 1e-12, 1 - 1e-12)
        nll = -(y * np.log(p) + (1 - y) * np.log1p(-p)).mean()
        if nll < best:
            best, best_tau = nll, float(tau)
    return best_tau
