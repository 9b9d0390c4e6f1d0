"""The UEC evaluation's softmax top-1 confidence and its temperature (ROC AUC and ECE: :mod:`crossembed.uec.metrics`)."""

from __future__ import annotations

import numpy as np

__all__ = ["fit_confidence_temperature", "top1_confidence"]


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
