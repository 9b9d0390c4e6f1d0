"""The pure maths behind UEC's two rule sets and its retrieval-confidence routing.

Official code's rules (MLAI-Yonsei/UEC; :class:`~crossembed.uec.routing.PrecisionSumRouting`
and :class:`~crossembed.uec.scoring.BetaCosineScoring`):

variance normalisation
    every input's variance vector is divided by its own squared L2 norm,
    ``v' = v / |v|_2^2`` (the mean is L2-normalised separately);
    :func:`normalize_variance_official`.
precision-sum weights
    ``pi_k(x) = softmax_k( P_k(x) / T )`` with the total precision
    ``P_k(x) = sum_d 1 / v'_kd(x)``; :func:`precision_sum`.
beta-scaled similarity
    ``s = cos(mu_q, mu_c) / (1 + beta * sig2_s / pi)`` with the moment
    ``sig2_s = <mu_q^2, v_c> + <mu_c^2, v_q> + <v_q, v_c>`` of the
    (unnormalised) means; no square root, unlike the probit;
    :func:`beta_scores`.

Retrieval confidence (:class:`~crossembed.uec.routing.ConfidenceRouting`): a model that is sure of
a query puts its best document far above the pack. Over a reference
collection ``R_k`` (unit rows) the model's cosines ``s_(1) >= s_(2) >= ...``
give the *calibrated gap*

    g_k(q) = (s_(1) - mean(s_(2), ..., s_(top))) / c_k

in units of ``c_k``, the model's cosine spread between unrelated texts
(:attr:`ModelHeads.score_scale <crossembed.uec.heads.ModelHeads>`), so models with different score
ranges (e5 is anisotropic) compare. :func:`retrieval_gap` computes it,
:func:`confidence_variance` turns it into the score variance
``sigma_k^2(q) = (c_k / g_k(q))^2`` (raw cosine units: the top-1 lead is
``g`` noise standard deviations), which the ensemble adds isotropically to
the query's Gaussian (for a unit document it adds exactly ``sigma^2`` to
``sig2_s``) and weights by, ``pi_k ∝ sigma_k^-2/T`` (T = 1 is
inverse-variance weighting).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed._validation import as_matrix, check_int, check_positive

__all__ = [
    "beta_scores",
    "beta_topk",
    "confidence_variance",
    "normalize_variance_official",
    "precision_sum",
    "retrieval_gap",
]

_EPS = 1e-30  # the official code's guard in 1 / (v + eps)
_GAP_FLOOR = 1e-3  # a gap below this (ties at the top) counts as this: finite variance


def normalize_variance_official(var) -> np.ndarray:
    """``v / |v|_2^2`` per row (float64); an all-zero row stays zero."""
    v = as_matrix(var, "var", dtype=np.float64, allow_float64=True, nonnegative=True, allow_empty=True)
    sq = (v * v).sum(axis=1, keepdims=True)
    return np.where(sq > 0, v / np.where(sq > 0, sq, 1.0), 0.0)


def precision_sum(var) -> np.ndarray:
    """``sum_d 1 / (v_d + 1e-30)`` per row (float64), the official code's logit."""
    v = as_matrix(var, "var", dtype=np.float64, allow_float64=True, nonnegative=True, allow_empty=True)
    return (1.0 / (v + _EPS)).sum(axis=1)


def _moments(mu_q, v_q, mu_c, v_c, num_threads) -> Tuple[np.ndarray, np.ndarray]:
    _, mu_s, sig2 = kernels.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True, num_threads=num_threads)
    return mu_s.astype(np.float64), sig2.astype(np.float64)


def beta_scores(mu_q, v_q, mu_c, v_c, *, beta: float = 1.0, num_threads: Optional[int] = None) -> np.ndarray:
    """Dense ``(Q, N)`` official similarity ``cos / (1 + beta sig2_s / pi)``, float32.

    The cosine uses the normalised means, ``sig2_s`` the means as given (as
    the official code does); ``beta = 0`` is the plain cosine.
    """
    beta = check_positive(beta, "beta", allow_zero=True)
    mu_q = as_matrix(mu_q, "mu_q")
    mu_c = as_matrix(mu_c, "mu_c")
    mu_s, sig2 = _moments(mu_q, v_q, mu_c, v_c, num_threads)
    nq = np.linalg.norm(mu_q.astype(np.float64), axis=1)
    nc = np.linalg.norm(mu_c.astype(np.float64), axis=1)
    cos = mu_s / np.maximum(nq[:, None] * nc[None, :], 1e-300)
    return (cos / (1.0 + beta * np.abs(sig2) / math.pi)).astype(np.float32)


def _topk_rows(scores: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Best ``k`` per row, best first, ties to the lower index."""
    n = scores.shape[1]
    if k >= n:
        idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    else:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        ps = np.take_along_axis(scores, part, axis=1)
        idx = np.take_along_axis(part, np.lexsort((part, -ps), axis=1), axis=1)
        ties = (scores >= ps.min(axis=1, keepdims=True)).sum(axis=1) > k  # the k-th place is shared
        if ties.any():
            idx[ties] = np.argsort(-scores[ties], axis=1, kind="stable")[:, :k]
    idx = idx.astype(np.int64)
    return np.take_along_axis(scores, idx, axis=1), idx


def beta_topk(
    mu_q,
    v_q,
    mu_c,
    v_c,
    k: int,
    *,
    beta: float = 1.0,
    candidates=None,
    chunk: int = 256,
    num_threads: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """Top-``k`` by :func:`beta_scores` (query chunks; ``candidates`` (Q, M), -1 pads, reranks only those)."""
    mu_q = as_matrix(mu_q, "mu_q", allow_empty=True)
    v_q = as_matrix(v_q, "v_q", nonnegative=True, allow_empty=True)
    mu_c = as_matrix(mu_c, "mu_c")
    v_c = as_matrix(v_c, "v_c", nonnegative=True)
    n = mu_c.shape[0]
    if candidates is None:
        k = check_int(k, "k", low=1, high=n)
        out_s, out_i = [], []
        for a in range(0, mu_q.shape[0], chunk):
            s = beta_scores(mu_q[a : a + chunk], v_q[a : a + chunk], mu_c, v_c, beta=beta, num_threads=num_threads)
            ss, ii = _topk_rows(s, k)
            out_s.append(ss)
            out_i.append(ii)
        if not out_s:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return np.concatenate(out_s).astype(np.float32), np.concatenate(out_i)
    cand = np.asarray(candidates, dtype=np.int64)
    if cand.ndim != 2 or cand.shape[0] != mu_q.shape[0]:
        raise ValueError(f"candidates must have shape ({mu_q.shape[0]}, M), got {cand.shape}")
    k = check_int(k, "k", low=1, high=cand.shape[1])
    scores = np.full(cand.shape, -np.inf, dtype=np.float64)
    for i in range(cand.shape[0]):
        c = cand[i][cand[i] >= 0]
        if c.size:
            s = beta_scores(mu_q[i : i + 1], v_q[i : i + 1], mu_c[c], v_c[c], beta=beta, num_threads=num_threads)[0]
            scores[i, : c.size] = s
            cand[i, : c.size] = c
            cand[i, c.size :] = -1
    order = np.lexsort((np.where(cand < 0, np.iinfo(np.int64).max, cand), -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1).astype(np.float32), np.take_along_axis(cand, order, axis=1)


def retrieval_gap(queries, reference, *, top: int = 20, scale: float = 1.0, num_threads=None) -> np.ndarray:
    """Calibrated gap ``(s_(1) - mean(s_(2..top))) / scale`` of each query over ``reference``.

    ``queries`` (Q, D) and ``reference`` (N, D) are L2-normalised first;
    ``top`` >= 2 and <= N. Float64 result, shape (Q,).
    """
    q = as_matrix(queries, "queries", allow_empty=True)
    r = as_matrix(reference, "reference")
    if q.shape[1] != r.shape[1]:
        raise ValueError(f"queries have dimension {q.shape[1]} but reference has {r.shape[1]}")
    top = check_int(top, "top", low=2, high=r.shape[0])
    scale = check_positive(scale, "scale")
    if q.shape[0] == 0:
        return np.zeros(0)
    qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-30)
    rn = r / np.maximum(np.linalg.norm(r, axis=1, keepdims=True), 1e-30)
    zq, zr = np.zeros_like(qn), np.zeros_like(rn)
    s, _ = kernels.probit_topk(qn, zq, rn, zr, top, num_threads=num_threads)  # zero variance: plain cosine
    s = s.astype(np.float64)
    return (s[:, 0] - s[:, 1:].mean(axis=1)) / scale


def confidence_variance(gap, scale: float = 1.0) -> np.ndarray:
    """Score variance ``(scale / max(g, 1e-3))^2`` from calibrated gaps ``g`` (float64)."""
    g = np.asarray(gap, dtype=np.float64)
    if g.ndim != 1 or not np.isfinite(g).all():
        raise ValueError("gap must be a finite 1-d array")
    scale = check_positive(scale, "scale")
    return (scale / np.maximum(g, _GAP_FLOOR)) ** 2
