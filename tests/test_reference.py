"""The float64 references of crossembed.reference against brute-force Python loops.

The kernel tests trust crossembed.reference; these tests earn that trust on
tiny inputs, term by term, with independent formulations where one exists.
"""

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

from crossembed import reference as ref


def _probit_loop(mu_q, v_q, mu_c, v_c):
    Q, D = mu_q.shape
    out = np.empty((Q, mu_c.shape[0]))
    for q in range(Q):
        for n in range(mu_c.shape[0]):
            mu_s = math.fsum(mu_q[q, d] * mu_c[n, d] for d in range(D))
            sig2 = math.fsum(
                mu_q[q, d] ** 2 * v_c[n, d] + mu_c[n, d] ** 2 * v_q[q, d] + v_q[q, d] * v_c[n, d] for d in range(D)
            )
            out[q, n] = mu_s / math.sqrt(1 + math.pi / 8 * sig2)
    return out


def _gaussians(rng, n, d):
    return rng.standard_normal((n, d)), rng.random((n, d))


def test_probit_scores_match_loops(rng):
    mu_q, v_q = _gaussians(rng, 4, 5)
    mu_c, v_c = _gaussians(rng, 7, 5)
    scores, mu_s, sig2 = ref.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True)
    np.testing.assert_allclose(scores, _probit_loop(mu_q, v_q, mu_c, v_c), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(mu_s, mu_q @ mu_c.T, rtol=1e-13)
    assert (sig2 >= 0).all()


def test_probit_topk_sorted_with_ties_to_lower_index(rng):
    mu_q, v_q = _gaussians(rng, 3, 4)
    mu_c, v_c = _gaussians(rng, 6, 4)
    mu_c[4], v_c[4] = mu_c[1], v_c[1]  # duplicate row: tied scores
    loop = _probit_loop(mu_q, v_q, mu_c, v_c)
    scores, idx = ref.probit_topk(mu_q, v_q, mu_c, v_c, 6)
    for q in range(3):
        expect = sorted(range(6), key=lambda n: (-loop[q, n], n))
        assert idx[q].tolist() == expect
        assert idx[q].tolist().index(1) < idx[q].tolist().index(4)
        np.testing.assert_allclose(scores[q], loop[q, expect], rtol=1e-13)


def test_probit_topk_candidates_pad_with_minus_one(rng):
    mu_q, v_q = _gaussians(rng, 2, 3)
    mu_c, v_c = _gaussians(rng, 8, 3)
    loop = _probit_loop(mu_q, v_q, mu_c, v_c)
    cand = np.array([[5, -1, 2, 7], [-1, 3, -1, -1]])
    scores, idx = ref.probit_topk(mu_q, v_q, mu_c, v_c, 3, candidates=cand)
    assert idx[0].tolist() == sorted([5, 2, 7], key=lambda n: (-loop[0, n], n))
    assert idx[1].tolist() == [3, -1, -1]
    assert scores[1, 0] == pytest.approx(loop[1, 3]) and np.isneginf(scores[1, 1:]).all()


def _cos_loop(a, b):
    na, nb = math.sqrt(math.fsum(x * x for x in a)), math.sqrt(math.fsum(x * x for x in b))
    if na == 0 or nb == 0:
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b)) / (na * nb)


def test_cosine_distances_match_loops_and_zero_rows(rng):
    X, Y = rng.standard_normal((5, 4)), rng.standard_normal((3, 4))
    X[2] = 0
    dist = ref.cosine_distances(X, Y)
    for i in range(5):
        for j in range(3):
            assert dist[i, j] == pytest.approx(1 - _cos_loop(X[i], Y[j]), abs=1e-14)
    assert (dist[2] == 1).all()
    assert ref.cosine_distances(X[:1], X[:1])[0, 0] == 0.0


def test_cosine_distances_scale_free_at_extreme_magnitudes(rng):
    X, Y = rng.standard_normal((4, 6)), rng.standard_normal((3, 6))
    base = ref.cosine_distances(X, Y)
    for scale in (1e-200, 1e-20, 1e15, 1e200):
        np.testing.assert_allclose(ref.cosine_distances(X * scale, Y), base, rtol=1e-12, atol=1e-14)


def test_median_anchor_distance_loops_and_fallbacks(rng):
    A = rng.standard_normal((6, 3))
    pairs = [1 - _cos_loop(A[i], A[j]) for i in range(6) for j in range(i + 1, 6)]
    assert ref.median_anchor_distance(A) == pytest.approx(float(np.median(pairs)), rel=1e-12)
    assert ref.median_anchor_distance(A[:1]) == 1.0
    assert ref.median_anchor_distance(np.repeat(A[:1], 4, axis=0)) == 1.0  # all pairs coincide
    # three of four anchors coincide: 3 zero and 3 positive distances, median = mean of 0 and d
    B = np.vstack([np.repeat(A[:1], 3, axis=0), A[1:2]])
    assert ref.median_anchor_distance(B) == pytest.approx((1 - _cos_loop(A[0], A[1])) / 2, rel=1e-12)


def test_anchor_signatures_match_unshifted_loops(rng):
    X, anchors = rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    X[1] = 0
    sigma = 0.3
    sig = ref.anchor_signatures(X, anchors, sigma=sigma)
    for i in range(4):
        row = [math.exp(-(1 - _cos_loop(X[i], a)) / sigma) for a in anchors]
        norm = math.sqrt(math.fsum(r * r for r in row))
        np.testing.assert_allclose(sig[i], [r / norm for r in row], rtol=1e-12)
    np.testing.assert_allclose(sig[1], 1 / math.sqrt(3))  # zero row: uniform
    assert ref.anchor_signatures(X, anchors).shape == (4, 3)  # default sigma


def test_anchor_signatures_shift_prevents_underflow(rng):
    X, anchors = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    sig = ref.anchor_signatures(X, anchors, sigma=1e-6)
    assert np.isfinite(sig).all()
    np.testing.assert_allclose(np.linalg.norm(sig, axis=1), 1.0)
    assert (sig.max(axis=1) == 1.0).all()  # the nearest anchor dominates completely


def _csls_loop(SA, SB, k, csls_k, ex_a=(), ex_b=()):
    rows = [i for i in range(len(SA)) if i not in ex_a]
    cols = [j for j in range(len(SB)) if j not in ex_b]
    s = {(i, j): math.fsum(SA[i] * SB[j]) for i in rows for j in cols}
    r_a = {i: sum(sorted((s[i, j] for j in cols), reverse=True)[:csls_k]) / min(csls_k, len(cols)) for i in rows}
    r_b = {j: sum(sorted((s[i, j] for i in rows), reverse=True)[:csls_k]) / min(csls_k, len(rows)) for j in cols}
    c = {(i, j): 2 * s[i, j] - r_a[i] - r_b[j] for i in rows for j in cols}
    top_row = {i: sorted(cols, key=lambda j: (-c[i, j], j))[:k] for i in rows}
    top_col = {j: sorted(rows, key=lambda i: (-c[i, j], i))[:k] for j in cols}
    prop = sorted(((i, j) for i in rows for j in top_row[i] if i in top_col[j]), key=lambda p: (-c[p], p[0], p[1]))
    out, ua, ub = [], set(), set()
    for i, j in prop:
        if i not in ua and j not in ub:
            ua.add(i), ub.add(j), out.append((i, j, c[i, j]))
    return out


@pytest.mark.parametrize(
    "k,csls_k,ex_a,ex_b", [(1, 1, (), ()), (2, 3, (), ()), (3, 50, (1, 4), (0,)), (10, 2, (), (2, 3))]
)
def test_csls_mutual_topk_matches_loops(rng, k, csls_k, ex_a, ex_b):
    SA, SB = rng.standard_normal((7, 4)), rng.standard_normal((6, 4))
    pairs, scores = ref.csls_mutual_topk(
        SA, SB, k=k, csls_k=csls_k, exclude_a=list(ex_a) or None, exclude_b=list(ex_b) or None
    )
    expect = _csls_loop(SA, SB, k, csls_k, ex_a, ex_b)
    assert [tuple(p) for p in pairs.tolist()] == [(i, j) for i, j, _ in expect]
    np.testing.assert_allclose(scores, [c for _, _, c in expect], rtol=1e-12, atol=1e-12)
    assert all(i not in ex_a and j not in ex_b for i, j in pairs.tolist())


def test_csls_mutual_topk_ties_go_to_lower_indices():
    # B's rows 1 and 2 are identical: A's row 0 matches both equally well and must take row 1
    SA = np.array([[1.0, 0.0], [0.0, 1.0]])
    SB = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    pairs, _ = ref.csls_mutual_topk(SA, SB, k=1, csls_k=1)
    assert pairs.tolist() == [[0, 1], [1, 0]]  # both CSLS 0: listed by lower i
    assert ref.csls_mutual_topk(SA, SB, k=1, csls_k=1, exclude_a=[0, 1])[0].shape == (0, 2)


def _otsu_within_variance(values, bins):
    """Otsu by minimising the within-class variance over bin centres (equivalent criterion)."""
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins
    centre = [lo + (min(int((v - lo) / (hi - lo) * bins), bins - 1) + 0.5) * width for v in values]
    best = None
    for t in range(bins - 1):
        edge = lo + (t + 1) * width
        low = [c for c in centre if c < edge]
        high = [c for c in centre if c >= edge]
        within = sum(len(g) * np.var(g) for g in (low, high) if g)
        if best is None or within < best[0] - 1e-12:
            best = (within, edge)
    return best[1]


def test_otsu_threshold_matches_within_class_formulation(rng):
    for seed in range(5):
        r = np.random.default_rng(seed)
        values = np.concatenate([r.normal(0.2, 0.05, 60), r.normal(0.7, 0.1, 40)])
        assert ref.otsu_threshold(values, bins=20) == pytest.approx(_otsu_within_variance(list(values), 20), abs=1e-12)


def test_otsu_threshold_edge_cases():
    assert ref.otsu_threshold(np.full(5, 0.3)) == 0.3
    # two values: every split between them is equally good, the first one wins
    assert ref.otsu_threshold(np.array([0.0, 1.0]), bins=10) == pytest.approx(0.1)
    assert ref.otsu_threshold(np.array([0.0, 0.0, 0.0, 1.0, 1.0]), bins=4) == pytest.approx(0.25)


def test_greedy_one_to_one_hand_worked():
    pairs = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [2, 2], [3, 3]])
    scores = np.array([0.9, 0.9, 0.8, 0.7, 0.2, 0.95])
    assert ref.greedy_one_to_one(pairs, scores, 0.5).tolist() == [[3, 3], [0, 0], [1, 1]]
    assert ref.greedy_one_to_one(pairs, scores, 0.5, exclude_a=[0]).tolist() == [[3, 3], [1, 0]]
    assert ref.greedy_one_to_one(pairs, scores, 0.5, exclude_b=[0], limit=2).tolist() == [[3, 3], [0, 1]]
    assert ref.greedy_one_to_one(pairs, scores, 0.95).shape == (0, 2)  # strictly above the threshold
    assert ref.greedy_one_to_one(pairs, scores, 0.0, limit=0).shape == (0, 2)


def test_vote_table_counts_and_posterior():
    t = ref.VoteTable()
    t.add([[0, 1], [2, 3]])
    t.add(np.zeros((0, 2), dtype=np.int64))
    t.add([[0, 1], [0, 1]])  # listed twice in one view: one vote
    pairs, votes = t.items()
    assert pairs.tolist() == [[0, 1], [2, 3]] and votes.tolist() == [2, 1]
    assert t.n_views == 3 and len(t) == 2
    np.testing.assert_allclose(t.posterior_mean(), [3 / 5, 2 / 5])
    assert t.votes([[5, 5]]).tolist() == [0]


def _lorentz_decimal(x, y, c):
    """acosh(-c <x, y>_L) / sqrt(c) in 60-digit decimal arithmetic (no cancellation problem at that precision)."""
    getcontext().prec = 60
    c = Decimal(c)
    xs, ys = [Decimal(float(v)) for v in x], [Decimal(float(v)) for v in y]
    xt = (1 / c + sum(v * v for v in xs)).sqrt()
    yt = (1 / c + sum(v * v for v in ys)).sqrt()
    z = -c * (sum(a * b for a, b in zip(xs, ys)) - xt * yt)
    if z <= 1:
        return 0.0
    return float((z + (z * z - 1).sqrt()).ln() / c.sqrt())


@pytest.mark.parametrize("curvature", [0.1, 1.0, 7.0])
def test_lorentz_pairwise_matches_high_precision(rng, curvature):
    X = rng.standard_normal((4, 3)) * np.array([[0.01], [1], [5], [50]])
    near = X + rng.standard_normal(X.shape) * 1e-6
    radial = X * (1 + 1e-7)  # nearby points along the radius: where the plain asinh form cancels
    Y = np.vstack([rng.standard_normal((2, 3)), near, radial, np.zeros((1, 3))]).astype(np.float32).astype(np.float64)
    X = np.vstack([X, np.zeros((1, 3))])
    got = ref.lorentz_pairwise(X, Y, curvature=curvature)
    for i in range(X.shape[0]):
        for j in range(Y.shape[0]):
            # longdouble direction vectors carry ~1e-19 absolute error, i.e. ~1e-19 |x| / |x - y|
            # relative error in the distance: at most ~1e-12 for the 1e-9-apart pairs at |x| = 50
            rel = max(1e-15, 1e-18 * np.linalg.norm(X[i]) / max(np.linalg.norm(X[i] - Y[j]), 1e-300))
            assert got[i, j] == pytest.approx(_lorentz_decimal(X[i], Y[j], curvature), rel=rel, abs=1e-300)
    assert got[-1, -1] == 0.0


def test_lorentz_topk_ties_to_lower_index(rng):
    X, Y = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    Y[3] = Y[0]
    dist, idx = ref.lorentz_topk(X, Y, 5)
    full = ref.lorentz_pairwise(X, Y)
    for i in range(3):
        assert idx[i].tolist() == sorted(range(5), key=lambda j: (full[i, j], j))
        assert idx[i].tolist().index(0) < idx[i].tolist().index(3)
