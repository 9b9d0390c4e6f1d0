"""Each model's predicted retrieval difficulty per input (:class:`~crossembed.uec.routing.RankRouting`).

A Laplace posterior over a frozen encoder says how much the fit pairs pin its
weights down near an input; it does not say whether the encoder *understands*
the input (an English-only model on a German word is confident and wrong).
The fit pairs can say that directly: for pair ``i`` the rank
``r_i`` of its own positive among all fit positives (cosine of the frozen
embeddings) is the model's error on that input. A ridge head regresses

    y_i = log(1 + 1000 r_i / (n - 1))        (the rank per 1,000 candidates)

on the model's own unit query embedding, the ridge penalty chosen by exact
leave-one-out error. Its prediction ``t_k(q)`` is the model's expected
log-rank of the right document for a new input: a per-input uncertainty in
the same units for every model (all heads see the same fit pairs), so
``softmax_k(-t_k(q) / T)`` routes a query to the models likely to rank it
well, from the query alone (no reference collection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["RIDGE_ALPHAS", "RankHead", "fit_rank_head", "in_batch_ranks"]

#: ridge penalties searched by leave-one-out error (the features are unit vectors)
RIDGE_ALPHAS = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
#: ranks are expressed per this many candidates, so heads fitted on different n agree in scale
RANK_SCALE = 1000.0


def in_batch_ranks(anchors: np.ndarray, positives: np.ndarray, *, block: int = 2048) -> np.ndarray:
    """Rank of positive ``i`` for anchor ``i`` among all positives (0 = first; ties are not counted against it).

    Rows must be unit vectors of one model; blocked, O(block x n) memory.
    """
    n = len(anchors)
    ranks = np.empty(n, dtype=np.int64)
    P = np.ascontiguousarray(positives, dtype=np.float32)
    for s in range(0, n, block):
        A = np.ascontiguousarray(anchors[s : s + block], dtype=np.float32)
        S = A @ P.T
        rows = np.arange(len(A))
        own = S[rows, s + rows]  # the same product as the row's others, so rounding cannot rank a pair above itself
        ranks[s : s + block] = (S > own[:, None]).sum(axis=1)
    return ranks


@dataclass
class RankHead:
    """``t(q) = q . coef + intercept``: the predicted ``log(1 + rank per 1,000 candidates)``."""

    coef: np.ndarray  # (D,) float64
    intercept: float
    alpha: float  # chosen ridge penalty
    loo_mse: float  # leave-one-out mean squared error at alpha
    target_var: float  # variance of the target (loo_mse / target_var < 1: the head predicts something)

    def predict(self, means: np.ndarray) -> np.ndarray:
        """(n,) float64 predicted log-ranks of unit query means ``(n, D)``."""
        return np.asarray(means, dtype=np.float64) @ self.coef + self.intercept

    def to_array(self) -> np.ndarray:
        return np.concatenate([self.coef, [self.intercept, self.alpha, self.loo_mse, self.target_var]])

    @classmethod
    def from_array(cls, a: np.ndarray) -> RankHead:
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 1 or a.size < 5:
            raise ValueError("a rank head array holds D coefficients and 4 scalars")
        return cls(a[:-4].copy(), float(a[-4]), float(a[-3]), float(a[-2]), float(a[-1]))


def fit_rank_head(anchors: np.ndarray, positives: np.ndarray, *, alphas: Sequence[float] = RIDGE_ALPHAS) -> RankHead:
    """Ridge head from unit anchor embeddings to their in-batch log-rank (module docstring).

    Parameters
    ----------
    anchors, positives : (n, D) arrays
        Unit embeddings of the fit pairs (row ``i`` of each is one pair), n >= 2.
    alphas : sequence of float
        Ridge penalties; the one with the smallest exact leave-one-out error wins
        (ties to the first).
    """
    n = len(anchors)
    if n < 2 or len(positives) != n:
        raise ValueError("anchors and positives must hold the same n >= 2 pairs")
    if not alphas or min(alphas) <= 0:
        raise ValueError("alphas must be positive")
    y = np.log1p(in_batch_ranks(anchors, positives) * (RANK_SCALE / max(n - 1, 1)))
    X = np.asarray(anchors, dtype=np.float64)
    x_mean, y_mean = X.mean(axis=0), y.mean()
    Xc, yc = X - x_mean, y - y_mean
    U, s, Vt = np.linalg.svd(Xc, full_matrices=False)
    Uy = U.T @ yc
    best = None
    for a in alphas:
        shrink = s**2 / (s**2 + a)
        # hat matrix of ridge on centred data plus the intercept's 1/n
        leverage = (U**2 * shrink).sum(axis=1) + 1.0 / n
        resid = (yc - U @ (shrink * Uy)) / np.maximum(1.0 - leverage, 1e-12)
        mse = float(np.mean(resid**2))
        if best is None or mse < best[0]:
            best = (mse, float(a))
    mse, a = best
    coef = Vt.T @ ((s / (s**2 + a)) * Uy)
    return RankHead(coef, float(y_mean - x_mean @ coef), a, mse, float(yc.var()))
