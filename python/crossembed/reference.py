"""Plain float64 numpy versions of every kernel in :mod:`crossembed.kernels`.

This module is the executable specification of the C++ kernels: same
signatures, same semantics (tie-breaking, clipping, fallbacks), written to be
read rather than to be fast. Everything is computed in float64 (the Lorentz
distances in ``np.longdouble``), dense and with explicit loops where a loop
is the clearest statement of the rule. The tests compare every kernel with
these functions; the benchmarks do not use them.

Inputs are not validated here (that is the job of :mod:`crossembed.kernels`);
pass finite, well-shaped arrays. ``num_threads`` is accepted so that a call
can be pointed at either module unchanged; it has no effect.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

__all__ = [
    "VoteTable",
    "anchor_signatures",
    "cosine_distances",
    "csls_mutual_topk",
    "greedy_one_to_one",
    "lorentz_pairwise",
    "lorentz_topk",
    "median_anchor_distance",
    "otsu_threshold",
    "probit_scores",
    "probit_topk",
    "topk_rows_and_columns",
]


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _top_order(values: np.ndarray, k: int, *, largest: bool) -> np.ndarray:
    """Indices of the ``k`` best entries per row, best first, ties to the lower index.

    A stable sort keeps equal values in index order, which is the tie rule.
    """
    key = -values if largest else values
    return np.argsort(key, axis=1, kind="stable")[:, :k]


# --------------------------------------------------------------------------- probit similarity
def probit_scores(mu_q, v_q, mu_c, v_c, *, return_moments: bool = False, num_threads: Optional[int] = None):
    """``mu_s / sqrt(1 + pi/8 * sig2_s)`` for every (query, candidate) pair, float64.

    ``mu_s = <mu_q, mu_c>``, ``sig2_s = <mu_q^2, v_c> + <mu_c^2, v_q> + <v_q, v_c>``.
    Returns ``scores`` or ``(scores, mu_s, sig2_s)``, each (Q, N).
    """
    mu_q, v_q, mu_c, v_c = _f64(mu_q), _f64(v_q), _f64(mu_c), _f64(v_c)
    mu_s = mu_q @ mu_c.T
    sig2_s = (mu_q**2) @ v_c.T + v_q @ (mu_c**2).T + v_q @ v_c.T
    scores = mu_s / np.sqrt(1.0 + (math.pi / 8.0) * sig2_s)
    return (scores, mu_s, sig2_s) if return_moments else scores


def probit_topk(mu_q, v_q, mu_c, v_c, k: int, *, candidates=None, num_threads: Optional[int] = None):
    """Best ``k`` candidates per query by probit score: ``(scores (Q, k), indices (Q, k) int64)``.

    Scores the full (Q, N) matrix, then sorts each row (descending, ties to
    the lower candidate index). With ``candidates`` (Q, M) only the listed
    rows compete (``-1`` entries are padding); a query with fewer than ``k``
    valid candidates is padded with index ``-1`` and score ``-inf``.
    """
    scores = probit_scores(mu_q, v_q, mu_c, v_c)
    if candidates is None:
        order = _top_order(scores, k, largest=True)
        return np.take_along_axis(scores, order, axis=1), order.astype(np.int64)

    cand = np.asarray(candidates, dtype=np.int64).reshape(scores.shape[0], -1)
    out_scores = np.full((scores.shape[0], k), -np.inf)
    out_index = np.full((scores.shape[0], k), -1, dtype=np.int64)
    for q in range(scores.shape[0]):
        valid = np.sort(cand[q][cand[q] >= 0])  # sorted, so the stable sort below breaks ties by index
        best = valid[_top_order(scores[q, valid][None, :], k, largest=True)[0]]
        out_index[q, : best.size] = best
        out_scores[q, : best.size] = scores[q, best]
    return out_scores, out_index


# --------------------------------------------------------------------------- anchor signatures
def _unit_rows(X: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Rows scaled to unit length (zero rows stay zero) and a mask of the non-zero rows.

    Dividing by the largest entry first keeps the norm from over- or
    underflowing for huge or tiny rows.
    """
    X = _f64(X)
    peak = np.abs(X).max(axis=1, keepdims=True) if X.size else np.zeros((X.shape[0], 1))
    nonzero = peak[:, 0] > 0
    scaled = np.divide(X, peak, out=np.zeros_like(X), where=peak > 0)
    norm = np.linalg.norm(scaled, axis=1, keepdims=True)
    unit = np.divide(scaled, norm, out=np.zeros_like(X), where=norm > 0)
    return unit, nonzero


def cosine_distances(X, Y) -> np.ndarray:
    """``1 - cos(x, y)`` for all rows; a zero row has cosine 0 (distance 1) to everything.

    Computed as half the squared chord ``|x/|x| - y/|y||^2 / 2`` (equal to
    ``1 - cos`` for unit vectors), so that identical rows are at distance
    exactly 0 and small distances keep their relative precision.
    """
    ux, nzx = _unit_rows(X)
    uy, nzy = _unit_rows(Y)
    chord2 = (ux**2).sum(1)[:, None] + (uy**2).sum(1)[None, :] - 2.0 * (ux @ uy.T)
    # the expanded form above cancels for close rows; recompute those exactly from the differences
    i, j = np.nonzero(chord2 < 1e-4)
    chord2[i, j] = ((ux[i] - uy[j]) ** 2).sum(axis=1)
    dist = np.clip(chord2 / 2.0, 0.0, 2.0)
    dist[~(nzx[:, None] & nzy[None, :])] = 1.0
    return dist


def median_anchor_distance(anchors) -> float:
    """Median of ``1 - cos`` over all pairs ``i < j`` of anchors (numpy's median: mean of the middle two).

    Falls back to 1.0 with a single anchor or when the median is 0 (all
    anchors coincide).
    """
    anchors = _f64(anchors)
    if anchors.shape[0] < 2:
        return 1.0
    dist = cosine_distances(anchors, anchors)
    med = float(np.median(dist[np.triu_indices(anchors.shape[0], k=1)]))
    return med if med > 0 else 1.0


def anchor_signatures(
    X, anchors, *, sigma: Optional[float] = None, metric: str = "cosine", num_threads: Optional[int] = None
) -> np.ndarray:
    """Rows ``exp(-(d - min_row d) / sigma)`` L2-normalised, ``d = 1 - cos`` to each anchor; (N, A) float64.

    The shift by the row's smallest distance is a constant factor per row, so
    it cancels in the normalisation; it keeps the largest entry at exactly 1.
    """
    if metric != "cosine":
        raise ValueError(f"metric must be 'cosine', got {metric!r}")
    sigma = median_anchor_distance(anchors) if sigma is None else float(sigma)
    return _kernel_rows(cosine_distances(X, anchors), sigma)


def signatures_from_cosines(C, cols, *, sigma: float, num_threads: Optional[int] = None) -> np.ndarray:
    """:func:`anchor_signatures` rows from given cosines ``C[:, cols]``; (N, V) float64."""
    return _kernel_rows(1.0 - _f64(C)[:, np.asarray(cols, dtype=np.int64)], float(sigma))


def _kernel_rows(dist: np.ndarray, sigma: float) -> np.ndarray:
    """``exp(-(d - min_row d) / sigma)`` per row, L2-normalised (empty input returned as is)."""
    if dist.size == 0:
        return dist
    kern = np.exp(-(dist - dist.min(axis=1, keepdims=True)) / sigma)
    return kern / np.linalg.norm(kern, axis=1, keepdims=True)


# --------------------------------------------------------------------------- CSLS mutual top-k
def _active(exclude, n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    if exclude is not None:
        mask[np.asarray(exclude, dtype=np.int64).reshape(-1)] = False
    return mask


def _greedy(proposals):
    """One-to-one from ``(-score, i, j)`` proposals: best score first, ties to lower i then j."""
    used_a, used_b, pairs, scores = set(), set(), [], []
    for neg_score, i, j in sorted(proposals):
        if i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        pairs.append((i, j))
        scores.append(-neg_score)
    return np.array(pairs, dtype=np.int64).reshape(-1, 2), np.array(scores, dtype=np.float64)


def csls_mutual_topk(
    SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None, num_threads: Optional[int] = None
):
    """Mutual top-``k`` pairs under CSLS, made one-to-one greedily: ``(pairs (P, 2) int64, scores (P,))``.

    Only active rows take part (excluded rows are removed before anything is
    computed, hubness terms included):

    * ``s_ij = <SA_i, SB_j>``;
    * ``r_A(i)`` = mean of the ``min(csls_k, n_B)`` largest ``s_ij`` over active
      ``j``; ``r_B(j)`` likewise over active ``i`` (``n_A``, ``n_B`` = active counts);
    * ``CSLS(i, j) = 2 s_ij - r_A(i) - r_B(j)``;
    * row ``i``'s top-``min(k, n_B)`` columns and column ``j``'s top-``min(k, n_A)``
      rows by CSLS, ties to the lower index; ``(i, j)`` is proposed when each
      is in the other's list;
    * proposals sorted by CSLS descending (ties: lower ``i``, then lower ``j``)
      and kept unless ``i`` or ``j`` is already used.
    """
    SA, SB = _f64(SA), _f64(SB)
    rows = np.nonzero(_active(exclude_a, SA.shape[0]))[0]
    cols = np.nonzero(_active(exclude_b, SB.shape[0]))[0]
    if rows.size == 0 or cols.size == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0)

    sim = SA[rows] @ SB[cols].T
    r_a = -np.sort(-sim, axis=1)[:, : min(csls_k, cols.size)].mean(axis=1)
    r_b = -np.sort(-sim, axis=0)[: min(csls_k, rows.size), :].mean(axis=0)
    csls = 2.0 * sim - r_a[:, None] - r_b[None, :]

    row_top = _top_order(csls, min(k, cols.size), largest=True)  # positions within `cols`
    col_top = _top_order(csls.T, min(k, rows.size), largest=True)  # positions within `rows`
    proposals = []
    for a, top in enumerate(row_top):
        for b in top:
            if a in col_top[b]:
                proposals.append((-csls[a, b], int(rows[a]), int(cols[b])))
    return _greedy(proposals)


def topk_rows_and_columns(SA, SB, k_row: int, k_col: Optional[int] = None, *, num_threads: Optional[int] = None):
    """Each row's ``k_row`` best columns and each column's ``k_col`` best rows of ``SA @ SB.T``.

    Best first, ties to the lower index; ``k_row``/``k_col`` clipped to the
    other side's rows. Returns ``(row_scores, row_idx, col_scores, col_idx)``.
    """
    k_col = k_row if k_col is None else k_col
    sim = _f64(SA) @ _f64(SB).T
    k_row, k_col = min(k_row, sim.shape[1]), min(k_col, sim.shape[0])
    row_idx = _top_order(sim, k_row, largest=True)
    col_idx = _top_order(sim.T, k_col, largest=True)
    return (
        np.take_along_axis(sim, row_idx, axis=1),
        row_idx.astype(np.int64),
        np.take_along_axis(sim.T, col_idx, axis=1),
        col_idx.astype(np.int64),
    )


def csls_mutual_topk_candidates(
    SA,
    SB,
    cand_a,
    cand_b,
    *,
    k: int = 5,
    csls_k: int = 50,
    exclude_a=None,
    exclude_b=None,
    num_threads: Optional[int] = None,
):
    """:func:`csls_mutual_topk` restricted to listed candidate pairs.

    * ``s_ij`` only for ``j`` in ``cand_a[i]`` (A side) / ``i`` in ``cand_b[j]``
      (B side); ``-1`` entries and excluded rows are ignored;
    * ``r_A(i)`` = mean of the ``min(csls_k, #candidates)`` largest ``s_ij``
      over row ``i``'s candidates, 0 when it has none; ``r_B(j)`` likewise;
    * row ``i``'s CSLS top-``k`` among its candidates, column ``j``'s among its
      own, ties to the lower index; mutual pairs; greedy one-to-one as above.
    """
    SA, SB = _f64(SA), _f64(SB)
    act_a, act_b = _active(exclude_a, SA.shape[0]), _active(exclude_b, SB.shape[0])
    cand_a, cand_b = np.asarray(cand_a, dtype=np.int64), np.asarray(cand_b, dtype=np.int64)

    def lists(X, Y, cand, act_x, act_y):
        out = []
        for i in range(X.shape[0]):
            js = [int(j) for j in cand[i] if act_x[i] and j >= 0 and act_y[j]]
            out.append({j: float(X[i] @ Y[j]) for j in js})
        return out

    la, lb = lists(SA, SB, cand_a, act_a, act_b), lists(SB, SA, cand_b, act_b, act_a)

    def hub(lst):
        return np.array([np.mean(sorted(d.values(), reverse=True)[:csls_k]) if d else 0.0 for d in lst])

    r_a, r_b = hub(la), hub(lb)

    def top(lst, value):
        return [set(sorted(d, key=lambda j: (-value(i, j, d[j]), j))[:k]) for i, d in enumerate(lst)]

    top_a = top(la, lambda i, j, s: 2.0 * s - r_a[i] - r_b[j])
    top_b = top(lb, lambda j, i, s: 2.0 * s - r_a[i] - r_b[j])
    proposals = ((-(2.0 * la[i][j] - r_a[i] - r_b[j]), i, j) for i in range(len(la)) for j in top_a[i] if i in top_b[j])
    return _greedy(proposals)


def otsu_threshold(values, *, bins: int = 100) -> float:
    """Otsu's threshold on ``bins`` equal-width bins over ``[min, max]``.

    Value ``x`` falls in bin ``floor((x - min) / (max - min) * bins)`` (the
    maximum in the last bin). For each split after bin ``t`` (both sides
    holding at least one bin) the between-class variance
    ``w0 * w1 * (m0 - m1)^2`` is computed from the counts and the bin
    centres; the first maximising ``t`` wins and its upper edge
    ``min + (t + 1) * (max - min) / bins`` is returned. A constant input
    returns that constant.
    """
    v = _f64(values).reshape(-1)
    lo, hi = float(v.min()), float(v.max())
    if hi == lo:
        return lo
    # scale-free: v * s (s = 1/2 near the top of the range, so hi - lo stays finite; 2**1000
    # below 2**-900, so the bin width span / bins is never subnormal), class means in bin
    # units (centre of bin b is b + 1/2), exact sums
    top = max(abs(lo), abs(hi))
    s = 0.5 if top > 1e300 else (2.0**1000 if top < 2.0**-900 else 1.0)
    los, span = lo * s, hi * s - lo * s
    index = np.clip(np.floor((v * s - los) / span * bins), 0, bins - 1).astype(np.int64)
    counts = np.bincount(index, minlength=bins).astype(np.float64)
    weighted = counts * (np.arange(bins) + 0.5)

    best_t, best_var = 0, -1.0
    for t in range(bins - 1):
        n0, n1 = counts[: t + 1].sum(), counts[t + 1 :].sum()
        if n0 == 0 or n1 == 0:
            continue
        # fsum is exactly rounded, so empty bins never change a class mean
        # and equal splits compare equal (the first one wins)
        m0 = math.fsum(weighted[: t + 1]) / n0
        m1 = math.fsum(weighted[t + 1 :]) / n1
        var = n0 * n1 * (m0 - m1) ** 2
        if var > best_var:
            best_t, best_var = t, var
    return (los + (best_t + 1) * (span / bins)) / s


def greedy_one_to_one(
    pairs, scores, threshold: float, exclude_a=(), exclude_b=(), limit: Optional[int] = None
) -> np.ndarray:
    """The pairs that :meth:`crossembed.kernels.VoteTable.promote` returns, in promotion order.

    Candidates are the pairs with ``score > threshold``, taken by descending
    score (ties: lower ``i``, then lower ``j``); a pair is skipped when its
    ``i`` or ``j`` is excluded or already used; at most ``limit`` pairs
    (``None`` or a negative limit: no cap).
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    scores = _f64(scores).reshape(-1)
    used_a = set(int(i) for i in np.asarray(() if exclude_a is None else exclude_a, dtype=np.int64).reshape(-1))
    used_b = set(int(j) for j in np.asarray(() if exclude_b is None else exclude_b, dtype=np.int64).reshape(-1))
    order = sorted(range(len(scores)), key=lambda p: (-scores[p], pairs[p, 0], pairs[p, 1]))
    out = []
    for p in order:
        if limit is not None and 0 <= limit <= len(out):
            break
        i, j = int(pairs[p, 0]), int(pairs[p, 1])
        if scores[p] <= threshold or i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        out.append((i, j))
    return np.array(out, dtype=np.int64).reshape(-1, 2)


class VoteTable:
    """Dictionary-backed twin of :class:`crossembed.kernels.VoteTable`.

    Each :meth:`add` is one view: every distinct pair listed gets one vote
    (listing it twice in one view still counts once, so votes never exceed
    views) and ``n_views`` grows by one.
    """

    def __init__(self):
        self.counts: dict = {}
        self.n_views = 0

    def add(self, pairs) -> None:
        for key in {(int(i), int(j)) for i, j in np.asarray(pairs, dtype=np.int64).reshape(-1, 2)}:
            self.counts[key] = self.counts.get(key, 0) + 1
        self.n_views += 1

    def __len__(self) -> int:
        return len(self.counts)

    def items(self) -> Tuple[np.ndarray, np.ndarray]:
        keys = sorted(self.counts)
        return (
            np.array(keys, dtype=np.int64).reshape(-1, 2),
            np.array([self.counts[key] for key in keys], dtype=np.int64),
        )

    def votes(self, pairs) -> np.ndarray:
        return np.array(
            [self.counts.get((int(i), int(j)), 0) for i, j in np.asarray(pairs).reshape(-1, 2)], dtype=np.int64
        )

    def posterior_mean(self, pairs=None) -> np.ndarray:
        if pairs is None:
            pairs = self.items()[0]
        return (1.0 + self.votes(pairs)) / (2.0 + self.n_views)


# --------------------------------------------------------------------------- Lorentz distances
def lorentz_pairwise(X, Y, *, curvature: float = 1.0, num_threads: Optional[int] = None) -> np.ndarray:
    """Lorentz-model geodesic distances, computed in ``np.longdouble`` and returned as float64.

    ``d = (2/sqrt(c)) asinh(sqrt(c) sqrt(q) / 2)`` with
    ``q = |x - y|^2 - (x_t - y_t)^2 = -<x - y, x - y>_L`` (equal to
    ``acosh(-c <x, y>_L) / sqrt(c)``). ``q`` is written as a sum of
    non-negative terms so nothing cancels, even for nearby points far from
    the origin: with ``x = |x| xh`` (``xh`` a unit vector) and ``dr = |x| - |y|``,

    ``|x - y|^2 = |x| |y| |xh - yh|^2 + dr^2`` and
    ``x_t - y_t = dr (|x| + |y|) / (x_t + y_t)``, hence
    ``q = |x| |y| |xh - yh|^2 + dr^2 (T - R)(T + R) / T^2`` with
    ``T = x_t + y_t``, ``R = |x| + |y|`` and
    ``T - R = (1/c) (1 / (x_t + |x|) + 1 / (y_t + |y|))``. ``dr`` is formed as
    ``(x - y).(x + y) / (|x| + |y|)`` and the tangential term as
    ``|x - y|^2 - dr^2`` instead where that rounds less (tangential separation
    dominates), as the C++ kernel and the torch ``distance`` do.
    """
    ld = np.longdouble
    c = ld(curvature)
    X, Y = np.asarray(X, dtype=ld), np.asarray(Y, dtype=ld)
    rx, ry = np.sqrt((X * X).sum(1)), np.sqrt((Y * Y).sum(1))
    tx, ty = np.sqrt(1 / c + rx * rx), np.sqrt(1 / c + ry * ry)
    hx = np.divide(X, rx[:, None], out=np.zeros_like(X), where=rx[:, None] > 0)
    hy = np.divide(Y, ry[:, None], out=np.zeros_like(Y), where=ry[:, None] > 0)

    out = np.empty((X.shape[0], Y.shape[0]), dtype=np.float64)
    for i in range(X.shape[0]):  # one row at a time: longdouble has no BLAS and (NX, NY, D) can be large
        chord2 = ((hx[i][None, :] - hy) ** 2).sum(1)
        diff = X[i][None, :] - Y
        sq = (diff * diff).sum(1)
        big_t, big_r = tx[i] + ty, rx[i] + ry
        # dr from (x-y).(x+y): no cancellation for nearly equal radii
        dr = np.divide((diff * (X[i][None, :] + Y)).sum(1), big_r, out=np.zeros_like(big_r), where=big_r > 0)
        # |x||y| |xh - yh|^2 = |x - y|^2 - dr^2: the subtraction where it rounds less
        sub = sq - dr * dr
        rxy = rx[i] * ry
        q_tan = np.where(sq <= 2 * np.sqrt(rxy * np.maximum(sub, 0)) + np.finfo(ld).eps * rxy, sub, rxy * chord2)
        t_minus_r = (1 / (tx[i] + rx[i]) + 1 / (ty + ry)) / c
        q = np.maximum(q_tan, 0) + dr * dr * t_minus_r * (big_t + big_r) / (big_t * big_t)
        out[i] = (2 / np.sqrt(c)) * np.arcsinh(np.sqrt(c) * np.sqrt(q) / 2)
    return out


def lorentz_topk(X, Y, k: int, *, curvature: float = 1.0, num_threads: Optional[int] = None):
    """The ``k`` nearest rows of ``Y`` per row of ``X``: ``(distances (NX, k), indices (NX, k) int64)``.

    Smallest distance first, ties to the lower index.
    """
    dist = lorentz_pairwise(X, Y, curvature=curvature)
    order = _top_order(dist, k, largest=False)
    return np.take_along_axis(dist, order, axis=1), order.astype(np.int64)
