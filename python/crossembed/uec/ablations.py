"""The rules UEC's default is compared with: the official code's rule set and retrieval-confidence routing.

Not the supported API (``crossembed.uec`` exports none of them): ``crossembed demo`` shows them
beside the default, and the evaluation harness builds its ablations on them. Each is a frozen
:class:`~crossembed.uec.routing.Routing` or :class:`~crossembed.uec.scoring.Scoring`.

The official code (MLAI-Yonsei/UEC):

variance normalisation
    every input's variance vector is divided by its own squared L2 norm,
    ``v' = v / |v|_2^2`` (the mean is L2-normalised separately);
    :func:`normalize_variance_official`.
precision-sum weights (:class:`PrecisionSumRouting`)
    ``pi_k(x) = softmax_k( P_k(x) / T )`` with the total precision
    ``P_k(x) = sum_d 1 / v'_kd(x)``; :func:`precision_sum`.
beta-scaled similarity (:class:`BetaCosineScoring`)
    ``s = cos(mu_q, mu_c) / (1 + beta * sig2_s / pi)`` with the moment
    ``sig2_s = <mu_q^2, v_c> + <mu_c^2, v_q> + <v_q, v_c>`` of the
    (unnormalised) means; no square root, unlike the probit;
    :func:`beta_scores`.

Retrieval confidence (:class:`ConfidenceRouting`): a model that is sure of a query puts its best
document far above the pack. Over a reference collection ``R_k`` (unit rows) the model's cosines
``s_(1) >= s_(2) >= ...`` give the *calibrated gap*

    g_k(q) = (s_(1) - mean(s_(2), ..., s_(top))) / c_k

in units of ``c_k``, the model's cosine spread between unrelated texts
(:attr:`ModelHeads.score_scale <crossembed.uec.heads.ModelHeads>`), so models with different score
ranges (e5 is anisotropic) compare. :func:`retrieval_gap` computes it, :func:`confidence_variance`
turns it into the score variance ``sigma_k^2(q) = (c_k / g_k(q))^2`` (raw cosine units: the top-1
lead is ``g`` noise standard deviations), which the routing adds isotropically to the query's
Gaussian (for a unit document it adds exactly ``sigma^2`` to ``sig2_s``) and weights by,
``pi_k ∝ sigma_k^-2/T`` (T = 1 is inverse-variance weighting).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import KW_ONLY, dataclass, field
from typing import Optional, Sequence, Tuple

import numpy as np

from crossembed import kernels
from crossembed._config import set_checked
from crossembed._rows import row_norms, softmax_rows, unit_rows
from crossembed._validation import as_matrix, check_bool, check_int, check_positive
from crossembed.uec.gaussian import GaussianEmbedding, normalize_gaussian
from crossembed.uec.heads import ModelHeads
from crossembed.uec.routing import LaplaceRouting, RetrievalReference, Routed, Routing, as_points, uniform_coefficients
from crossembed.uec.scoring import Scoring

__all__ = [
    "BetaCosineScoring",
    "ConfidenceRouting",
    "PrecisionSumRouting",
    "beta_scores",
    "beta_topk",
    "confidence_variance",
    "normalize_variance_official",
    "precision_sum",
    "retrieval_gap",
]

_EPS = 1e-30  # the official code's guard in 1 / (v + eps)
_GAP_FLOOR = 1e-3  # a gap below this (ties at the top) counts as this: finite variance


# --------------------------------------------------------------------------- the official code's rules
def normalize_variance_official(var) -> np.ndarray:
    """``v / |v|_2^2`` per row (float64); an all-zero row stays zero."""
    v = as_matrix(var, "var", dtype=np.float64, allow_float64=True, nonnegative=True, allow_empty=True)
    sq = (v * v).sum(axis=1, keepdims=True)
    return np.where(sq > 0, v / np.where(sq > 0, sq, 1.0), 0.0)


def precision_sum(var) -> np.ndarray:
    """``sum_d 1 / (v_d + 1e-30)`` per row (float64), the official code's logit."""
    v = as_matrix(var, "var", dtype=np.float64, allow_float64=True, nonnegative=True, allow_empty=True)
    return (1.0 / (v + _EPS)).sum(axis=1)


def beta_scores(mu_q, v_q, mu_c, v_c, *, beta: float = 1.0, num_threads: Optional[int] = None) -> np.ndarray:
    """Dense ``(Q, N)`` official similarity ``cos / (1 + beta sig2_s / pi)``, float32.

    The cosine uses the normalised means, ``sig2_s`` the means as given (as
    the official code does); ``beta = 0`` is the plain cosine.
    """
    beta = check_positive(beta, "beta", allow_zero=True)
    mu_q = as_matrix(mu_q, "mu_q")
    mu_c = as_matrix(mu_c, "mu_c")
    _, mu_s, sig2 = kernels.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True, num_threads=num_threads)
    nq = row_norms(mu_q.astype(np.float64))
    nc = row_norms(mu_c.astype(np.float64))
    cos = mu_s.astype(np.float64) / np.maximum(nq * nc.T, 1e-300)
    return (cos / (1.0 + beta * np.abs(sig2.astype(np.float64)) / math.pi)).astype(np.float32)


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


def beta_topk(mu_q, v_q, mu_c, v_c, k: int, *, beta: float = 1.0, candidates=None, chunk: int = 256, num_threads=None):
    """Top-``k`` by :func:`beta_scores` (query chunks; ``candidates`` (Q, M), -1 pads, reranks only those)."""
    mu_q = as_matrix(mu_q, "mu_q", allow_empty=True)
    v_q = as_matrix(v_q, "v_q", nonnegative=True, allow_empty=True)
    mu_c = as_matrix(mu_c, "mu_c")
    v_c = as_matrix(v_c, "v_c", nonnegative=True)
    if candidates is None:
        k = check_int(k, "k", low=1, high=mu_c.shape[0])
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


@dataclass(frozen=True)
class PrecisionSumRouting(Routing):
    """The official code's coefficients ``softmax_k(sum_d (1 / v_kd) / T)``.

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of the precision sum (default 1).
    """

    temperature: float = 1.0
    kind = "precision_sum"

    def __post_init__(self):
        set_checked(self, temperature=check_positive(self.temperature, "temperature"))

    def logits(self, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        """``z`` (n, K) with ``pi = softmax(z / T)``: the precision sums."""
        return np.stack([precision_sum(c.var) for c in components], axis=1)

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        return softmax_rows(self.logits(components, heads) / self.temperature), list(components)


class _BetaDocs:
    """Documents held for :func:`beta_topk` (nothing to precompute)."""

    def __init__(self, mean: np.ndarray, var: np.ndarray, beta: float):
        self.mean = as_matrix(mean, "mean")
        self.var = as_matrix(var, "var", nonnegative=True)
        if self.var.shape != self.mean.shape:
            raise ValueError(f"var has shape {self.var.shape} but mean has shape {self.mean.shape}")
        self.beta = beta

    def __len__(self) -> int:
        return self.mean.shape[0]

    @property
    def nbytes(self) -> int:
        return int(self.mean.nbytes + self.var.nbytes)

    def top_k(self, mu_q, v_q, k: int, *, candidates=None, num_threads: Optional[int] = None):
        return beta_topk(
            mu_q, v_q, self.mean, self.var, k, beta=self.beta, candidates=candidates, num_threads=num_threads
        )


@dataclass(frozen=True)
class BetaCosineScoring(Scoring):
    """The official UEC code's similarity ``cos / (1 + beta sig2_s / pi)``.

    Parameters
    ----------
    beta : float
        ``beta >= 0``, how strongly the score moment ``sig2_s`` shrinks the
        cosine (default 1; 0 is the plain cosine of the means).
    """

    beta: float = 1.0
    kind = "beta_cosine"
    #: the cosine renormalises the whole vector: extra coordinates would not add to per-model scores
    decomposes = False

    def __post_init__(self):
        set_checked(self, beta=check_positive(self.beta, "beta", allow_zero=True))

    def normalize(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """Unit means; the variance ``v / |v|_2^2`` per row (:func:`normalize_variance_official`)."""
        unit = normalize_gaussian(g)
        return GaussianEmbedding(unit.mean, normalize_variance_official(g.var).astype(np.float32), unit.weights)

    def normalize_mixture(self, g: GaussianEmbedding) -> GaussianEmbedding:
        """Unchanged: the official code scores the unnormalised convolution (its cosine normalises the means)."""
        return g

    def prepare(self, mean: np.ndarray, var: np.ndarray):
        """The documents, held as given (the beta cosine has no prepared form)."""
        return _BetaDocs(mean, var, self.beta)

    def similarity(self, mq, vq, mc, vc, *, num_threads: Optional[int] = None) -> np.ndarray:
        """Dense ``(Q, N)`` float32 beta-cosine scores."""
        return beta_scores(mq, vq, mc, vc, beta=self.beta, num_threads=num_threads)


# --------------------------------------------------------------------------- retrieval confidence
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
    qn, rn = unit_rows(q, dtype=None), unit_rows(r, dtype=None)
    s, _ = kernels.probit_topk(qn, np.zeros_like(qn), rn, np.zeros_like(rn), top, num_threads=num_threads)
    s = s.astype(np.float64)  # zero variances: the plain cosine
    return (s[:, 0] - s[:, 1:].mean(axis=1)) / scale


def confidence_variance(gap, scale: float = 1.0) -> np.ndarray:
    """Score variance ``(scale / max(g, 1e-3))^2`` from calibrated gaps ``g`` (float64)."""
    g = np.asarray(gap, dtype=np.float64)
    if g.ndim != 1 or not np.isfinite(g).all():
        raise ValueError("gap must be a finite 1-d array")
    scale = check_positive(scale, "scale")
    return (scale / np.maximum(g, _GAP_FLOOR)) ** 2


@dataclass(frozen=True)
class ConfidenceRouting(Routing):
    """Route queries by each model's retrieval confidence over the ensemble's reference collection.

    ``pi = softmax_k(-log sigma_k^2(q) / T)`` (:meth:`log_variance`); documents carry no retrieval
    confidence (uniform).

    Parameters
    ----------
    temperature : float
        ``T > 0`` in units of ``log sigma^2`` (default 2).
    top : int
        The gap compares the top-1 cosine with the mean of the next
        ``top - 1`` (default 20; capped at the reference size).
    laplace_variances : bool
        Score the Laplace variances (True), or (default False) each query as
        isotropic ``sigma_k^2(q)`` and each document as a point, so the score
        is shrunk by the query's uncertainty.
    fallback : routing
        Routes the queries (with a ``RuntimeWarning``) while no reference is
        set (default :class:`~crossembed.uec.routing.LaplaceRouting`).
    """

    temperature: float = 2.0
    _: KW_ONLY
    top: int = 20
    laplace_variances: bool = False
    fallback: Routing = field(default_factory=LaplaceRouting)
    kind = "confidence"
    needs_reference = True

    def __post_init__(self):
        if not callable(getattr(self.fallback, "route", None)):
            raise TypeError(f"fallback must be a routing, got {type(self.fallback).__name__}")
        set_checked(
            self,
            temperature=check_positive(self.temperature, "temperature"),
            top=check_int(self.top, "top", low=2),
            laplace_variances=check_bool(self.laplace_variances, "laplace_variances"),
        )

    def confidence_variance(
        self, components, heads: Sequence[ModelHeads], reference: RetrievalReference, *, num_threads=None
    ):
        """``sigma_k^2(q) = (c_k / g_k(q))^2`` of shape (n, K), float64 (module docstring)."""
        cols = []
        for k, c in enumerate(components):
            docs, scale = reference.documents[k], heads[k].score_scale
            gap = retrieval_gap(c.mean, docs, top=min(self.top, docs.shape[0]), scale=scale, num_threads=num_threads)
            cols.append(confidence_variance(gap, scale))
        return np.stack(cols, axis=1)

    def log_variance(self, variance: np.ndarray, components, heads: Sequence[ModelHeads]) -> np.ndarray:
        """The (n, K) log score variances the coefficients are the softmax of: ``log sigma_k^2(q)``
        (a subclass may shift or rescale them per model)."""
        return np.log(variance)

    def route(self, components, heads, *, role: str = "query", reference=None, texts=None) -> Routed:
        comps = list(components)
        if role == "passage":  # documents carry no retrieval confidence
            pi = uniform_coefficients(len(comps[0]), len(comps))
            return pi, comps if self.laplace_variances else as_points(comps)
        if reference is None:
            warnings.warn(
                "retrieval-confidence routing has no reference collection yet (with_reference(), an index, or "
                "encode the documents first): these queries are weighted by the fallback routing",
                RuntimeWarning,
                stacklevel=4,
            )
            return self.fallback.route(comps, heads, role=role)
        u = self.confidence_variance(comps, heads, reference)
        pi = softmax_rows(-self.log_variance(u, comps, heads) / self.temperature)
        if not self.laplace_variances:  # isotropic sigma_k^2: adds exactly sigma_k^2 to sig2_s of a unit document
            comps = [
                GaussianEmbedding(c.mean, (0.0 * c.var + u[:, k : k + 1]).astype(np.float32))
                for k, c in enumerate(comps)
            ]
        return pi, comps
