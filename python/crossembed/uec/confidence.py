"""A calibrated confidence per query: the probability that a search's top hit is relevant.

UEC scores each query with K models side by side; how sure a result is shows
in the scores and in whether the models agree. Per query, from its best
:data:`DEPTH` results (:func:`search_features`):

* ``top1``: the ensemble's score of the top hit;
* ``margin``: top-1 minus top-2 score;
* ``gap``: top-1 minus the mean of the other results, in units of their standard deviation;
* ``drop``: top-1 minus the last of the results (the :data:`DEPTH`-th score): how far the top hit
  stands above the query's neighbourhood, in score units (``gap`` divides that spread out);
* ``agreement``: the routing weight of the models whose own best among those
  results is the ensemble's top hit (each model's block of the side-by-side
  score, its hubness included): 1 when every model puts the same hit first;
* ``member_margin``: each model's own score of the top hit minus its best score
  of the other results (in its calibrated cosine units), averaged with the routing weights;
* ``log_rank``: the routing-weighted rank heads' predicted log-rank of the right
  document (each model's own estimate, before any search, of how hard the query is).

:class:`TopHitConfidence` maps them to ``P(top hit relevant)`` with a logistic
regression on standardised features, fitted by :func:`fit_top_hit_confidence`
on the fit pairs (each fit anchor searched among its positives and any
distractor documents; no evaluation label is read).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import numpy as np
from scipy.special import expit

from crossembed._config import set_checked
from crossembed._validation import as_matrix
from crossembed.uec.gaussian import GaussianEmbedding

__all__ = ["DEPTH", "FEATURES", "TopHitConfidence", "fit_top_hit_confidence", "search_features"]

#: results per query the features read (a search for fewer is widened to this many)
DEPTH = 10
FEATURES = ("top1", "margin", "gap", "drop", "agreement", "member_margin", "log_rank")
#: L2 penalty of the logistic regression, per pair, on standardised features
_PENALTY = 1e-2


def _member_scores(q: GaussianEmbedding, docs: np.ndarray, dims: Sequence[int], hub_dims: int) -> np.ndarray:
    """(Q, m, K) each model's block of the side-by-side score (its hubness coordinate included)."""
    out, start = [], 0
    k_models = len(dims)
    for k, d in enumerate(dims):
        s = np.einsum("qd,qmd->qm", q.mean[:, start : start + d], docs[:, :, start : start + d], dtype=np.float64)
        if hub_dims:
            hub = sum(dims) + k
            s = s + q.mean[:, hub, None].astype(np.float64) * docs[:, :, hub]
        out.append(s)
        start += d
    if hub_dims not in (0, k_models):
        raise ValueError(f"hub_dims must be 0 or {k_models}, got {hub_dims}")
    return np.stack(out, axis=2)


def search_features(
    q: GaussianEmbedding, scores, docs, dims: Sequence[int], hub_dims: int, log_rank
) -> Tuple[np.ndarray, np.ndarray]:
    """``(features (Q, len(FEATURES)) float64, has_hit (Q,) bool)`` of one search (module docstring).

    Parameters
    ----------
    q : GaussianEmbedding
        The queries as the ensemble combined them (side-by-side blocks, routing weights).
    scores : array (Q, m)
        The ensemble's scores of each query's best ``m >= 1`` results, best first; ``-inf`` pads.
    docs : array (Q, m, D)
        Those results' document means (any values where the score pads).
    dims : sequence of int
        Each model's block width ``D_k``, in order.
    hub_dims : int
        Trailing hubness coordinates (0 or K).
    log_rank : array (Q,)
        The routing-weighted predicted log-rank of each query.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != len(q) or s.shape[1] < 1:
        raise ValueError(f"scores must have shape ({len(q)}, m >= 1), got {s.shape}")
    docs = np.asarray(docs, dtype=np.float32)
    if docs.shape != (*s.shape, q.dim):
        raise ValueError(f"docs must have shape {(*s.shape, q.dim)}, got {docs.shape}")
    valid = np.isfinite(s)
    has_hit = valid[:, 0]
    low = np.where(valid, s, np.inf).min(axis=1)
    s = np.where(valid, s, np.where(np.isfinite(low), low, 0.0)[:, None])  # pads count as the lowest score
    rest = s[:, 1:] if s.shape[1] > 1 else s
    gap = (s[:, 0] - rest.mean(axis=1)) / np.maximum(rest.std(axis=1), 1e-6)
    margin = s[:, 0] - (s[:, 1] if s.shape[1] > 1 else s[:, 0])
    pi = np.asarray(q.weights, dtype=np.float64)
    if pi.shape != (len(q), len(dims)):  # a mixing without per-model blocks
        raise ValueError(f"queries must carry {len(dims)} routing weights per row, got shape {pi.shape}")
    member = _member_scores(q, np.where(valid[:, :, None], docs, 0.0), dims, hub_dims)
    member = np.where(valid[:, :, None], member, -np.inf)
    agreement = (pi * (member.argmax(axis=1) == 0)).sum(axis=1)
    others = member[:, 1:].max(axis=1) if member.shape[1] > 1 else member[:, 0]
    second = np.isfinite(others)  # a query with one result has no gap to a second
    own = np.where(second, member[:, 0] - np.where(second, others, 0.0), 0.0)  # (Q, K): w_k times the cosine gap
    starts = np.r_[0, np.cumsum(dims)[:-1]]
    w = np.stack(
        [np.linalg.norm(q.mean[:, a : a + d].astype(np.float64), axis=1) for a, d in zip(starts, dims)], axis=1
    )
    member_margin = (pi * own / np.maximum(w, 1e-30)).sum(axis=1)
    drop = s[:, 0] - s[:, -1]
    log_rank = np.asarray(log_rank, np.float64)
    feats = np.stack([s[:, 0], margin, gap, drop, agreement, member_margin, log_rank], axis=1)
    return feats, has_hit


@dataclass(frozen=True)
class TopHitConfidence:
    """``P(top hit relevant) = sigmoid(intercept + coef . (features - center) / scale)`` (module docstring).

    Parameters
    ----------
    coef, center, scale : tuple of float
        One per :data:`FEATURES` entry (``scale > 0``).
    intercept : float
    n_pairs : int
        Fit anchors it was fitted on.
    fit_accuracy : float
        Their top-1 accuracy (the base rate it was calibrated to).
    """

    coef: Tuple[float, ...]
    intercept: float
    center: Tuple[float, ...]
    scale: Tuple[float, ...]
    n_pairs: int = 0
    fit_accuracy: float = float("nan")

    def __post_init__(self):
        f = len(FEATURES)
        arrays = {}
        for name in ("coef", "center", "scale"):
            a = as_matrix(getattr(self, name), name, ndim=1, dtype=np.float64, allow_float64=True)
            if a.shape != (f,):
                raise ValueError(f"{name} must hold {f} numbers (one per feature), got {a.shape[0]}")
            arrays[name] = tuple(float(x) for x in a)
        if min(arrays["scale"]) <= 0:
            raise ValueError("scale must be positive")
        set_checked(self, intercept=float(self.intercept), **arrays)

    def probability(self, features: np.ndarray) -> np.ndarray:
        """(Q,) float64 in (0, 1) from :func:`search_features`' features."""
        z = (np.asarray(features, dtype=np.float64) - np.array(self.center)) / np.array(self.scale)
        return expit(self.intercept + z @ np.array(self.coef))  # no overflow far from the fit's features

    def get_state(self) -> Dict[str, np.ndarray]:
        return {
            "confidence.coef": np.array(self.coef),
            "confidence.center": np.array(self.center),
            "confidence.scale": np.array(self.scale),
            "confidence.stats": np.array([self.intercept, self.n_pairs, self.fit_accuracy]),
        }

    @classmethod
    def from_state(cls, arrays: Dict[str, np.ndarray]) -> TopHitConfidence:
        """Rebuild from :meth:`get_state` (``KeyError`` names a missing array)."""
        stats = np.asarray(arrays["confidence.stats"], dtype=np.float64)
        return cls(
            coef=arrays["confidence.coef"],
            intercept=float(stats[0]),
            center=arrays["confidence.center"],
            scale=arrays["confidence.scale"],
            n_pairs=int(stats[1]),
            fit_accuracy=float(stats[2]),
        )


def fit_top_hit_confidence(features, correct) -> TopHitConfidence:
    """Logistic regression of ``correct`` (Q,) on ``features`` (Q, F) standardised, L2 ``1e-2`` per pair (Newton).

    When every top hit was right (or every one wrong) the features cannot be told apart: the
    confidence is then the constant ``(right + 0.5) / (Q + 1)`` (the rate with half a pseudo-count
    each way, so never 0 or 1), with a RuntimeWarning that it does not rank queries.
    """
    x = as_matrix(features, "features", dtype=np.float64, allow_float64=True)
    y = np.asarray(correct, dtype=np.float64).ravel()
    if x.shape != (len(y), len(FEATURES)):
        raise ValueError(f"features must have shape ({len(y)}, {len(FEATURES)}), got {x.shape}")
    center, scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-9)
    if y.min() == y.max():
        rate = (y.sum() + 0.5) / (len(y) + 1)
        warnings.warn(
            f"every one of the {len(y)} held-out top hits was {'right' if y[0] else 'wrong'}: the confidence is "
            f"the constant {rate:.3f} and does not rank queries (fit on more, or harder, pairs)",
            RuntimeWarning,
            stacklevel=2,
        )
        return TopHitConfidence(
            coef=(0.0,) * len(FEATURES),
            intercept=float(np.log(rate / (1 - rate))),
            center=center,
            scale=scale,
            n_pairs=len(y),
            fit_accuracy=float(y.mean()),
        )
    z = np.concatenate([np.ones((len(y), 1)), (x - center) / scale], axis=1)
    w = np.zeros(z.shape[1])
    w[0] = np.log(y.mean() / (1 - y.mean()))
    reg = np.full(z.shape[1], _PENALTY * len(y))
    reg[0] = 0.0  # the intercept is not shrunk
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + reg * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return TopHitConfidence(
        coef=w[1:], intercept=w[0], center=center, scale=scale, n_pairs=len(y), fit_accuracy=float(y.mean())
    )
