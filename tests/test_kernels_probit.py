"""probit_scores / probit_topk / ProbitDocs against crossembed.reference.

Tolerance (derived, not tuned): the kernel computes in float32 from float32
inputs, so with u = 2^-24 and gamma_n = n u / (1 - n u) (the error bound of
any n-term float32 sum of products, whatever the summation order):

* |d mu_s| <= gamma_{D+2} * sum_d |mu_q mu_c|;
* sig2_s is a sum of 3D non-negative terms (products of up to 3 factors, and
  the doc block mu_c^2 + v_c rounded once), so |d sig2_s| / sig2_s <= gamma_{3D+6};
* score = mu_s / sqrt(1 + pi/8 sig2_s) then moves by at most
  |d mu_s| / den + |score| (gamma_{3D+6} / 2 + 4u) (sqrt, division, pi/8);
* subnormal products add up to 4D * 2^-149 absolute.
"""

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import crossembed as ce
from crossembed import reference as ref

# CROSSEMBED_HYPOTHESIS_EXAMPLES=600 runs the property tests 10x deeper (default 60: the fast suite)
EXAMPLES = int(os.environ.get("CROSSEMBED_HYPOTHESIS_EXAMPLES", "60"))

U32 = 2.0**-24
TINY32 = 2.0**-149


def gamma(n, u=U32):
    return n * u / (1 - n * u)


def probit_tolerance(mu_q, v_q, mu_c, v_c):
    """Entry-wise (Q, N) bound on |kernel - reference| for the scores (see module docstring)."""
    D = mu_q.shape[1]
    scores, _, sig2 = ref.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True)
    den = np.sqrt(1 + math.pi / 8 * sig2)
    magnitude = np.abs(mu_q.astype(np.float64)) @ np.abs(mu_c.astype(np.float64)).T
    return gamma(D + 2) * magnitude / den + np.abs(scores) * (gamma(3 * D + 6) / 2 + 4 * U32) + 4 * D * TINY32


def gaussians(rng, n, d, *, scale=1.0, var_scale=0.1):
    mu = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    var = (rng.random((n, d)) * var_scale).astype(np.float32)
    return mu, var


@pytest.mark.parametrize("D", [1, 7, 15, 17, 33, 384])
def test_probit_scores_and_moments_match_reference(rng, D):
    mu_q, v_q = gaussians(rng, 13, D)
    mu_c, v_c = gaussians(rng, 301, D)
    scores, mu_s, sig2 = ce.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True)
    assert scores.dtype == mu_s.dtype == sig2.dtype == np.float32 and scores.shape == (13, 301)
    r_scores, r_mu, r_sig2 = ref.probit_scores(mu_q, v_q, mu_c, v_c, return_moments=True)
    magnitude = np.abs(mu_q.astype(np.float64)) @ np.abs(mu_c.astype(np.float64)).T
    assert (np.abs(mu_s - r_mu) <= gamma(D + 2) * magnitude).all()
    assert (np.abs(sig2 - r_sig2) <= gamma(3 * D + 6) * r_sig2 + 4 * D * TINY32).all()
    assert (np.abs(scores - r_scores) <= probit_tolerance(mu_q, v_q, mu_c, v_c)).all()
    assert ce.probit_scores(mu_q, v_q, mu_c, v_c).dtype == np.float32


@pytest.mark.parametrize("D", [1, 7, 15, 17, 33, 384])
@pytest.mark.parametrize("k", [1, 10])
def test_probit_topk_is_valid_topk(rng, check_topk, D, k):
    mu_q, v_q = gaussians(rng, 17, D)
    mu_c, v_c = gaussians(rng, 1031, D)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, k)
    assert scores.shape == idx.shape == (17, k) and scores.dtype == np.float32 and idx.dtype == np.int64
    check_topk(ref.probit_scores(mu_q, v_q, mu_c, v_c), probit_tolerance(mu_q, v_q, mu_c, v_c), scores, idx)


def test_probit_topk_k_equals_n_is_a_full_sort(rng, check_topk):
    mu_q, v_q = gaussians(rng, 5, 9)
    mu_c, v_c = gaussians(rng, 40, 9)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 40)
    assert (np.sort(idx, axis=1) == np.arange(40)).all()
    check_topk(ref.probit_scores(mu_q, v_q, mu_c, v_c), probit_tolerance(mu_q, v_q, mu_c, v_c), scores, idx)


def test_probit_n1_d1_and_q0(rng):
    mu_q, v_q = gaussians(rng, 3, 1)
    mu_c, v_c = gaussians(rng, 1, 1)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 1)
    assert idx.tolist() == [[0], [0], [0]]
    np.testing.assert_allclose(scores, ref.probit_scores(mu_q, v_q, mu_c, v_c), rtol=8 * U32, atol=1e-30)
    scores, idx = ce.probit_topk(mu_q[:0], v_q[:0], mu_c, v_c, 1)
    assert scores.shape == idx.shape == (0, 1)
    assert ce.probit_scores(mu_q[:0], v_q[:0], mu_c, v_c).shape == (0, 1)


def test_probit_topk_matches_dense_kernel_scores(rng):
    mu_q, v_q = gaussians(rng, 9, 33)
    mu_c, v_c = gaussians(rng, 777, 33)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 25)
    dense = ce.probit_scores(mu_q, v_q, mu_c, v_c)
    tol = probit_tolerance(mu_q, v_q, mu_c, v_c)
    picked = np.take_along_axis(dense, idx, axis=1)
    assert (np.abs(picked - scores) <= 2 * np.take_along_axis(tol, idx, axis=1)).all()


def _tie_layout(rng, D, N=3000, positions=(5, 6, 17, 31, 1024, 2047, 2999)):
    """Docs where the same Gaussian sits at `positions` (spread over SIMD lanes, tiles, thread halves) and wins."""
    mu_q, v_q = gaussians(rng, 4, D)
    mu_c, v_c = gaussians(rng, N, D, scale=0.1)
    signs = np.where(rng.random(D) < 0.5, -1.0, 1.0)
    mu_q = ((np.abs(mu_q) + 0.5) * signs).astype(np.float32)  # every query points along `signs`
    mu_c[list(positions)] = 3 * signs  # ... and so does the duplicated doc, far more strongly than the rest
    v_c[list(positions)] = 0.05
    return mu_q, v_q, mu_c, v_c, list(positions)


@pytest.mark.parametrize("D", [1, 17, 384])
def test_probit_tied_duplicates_go_to_lower_index_for_any_threads(rng, D):
    mu_q, v_q, mu_c, v_c, pos = _tie_layout(rng, D)
    dense = ce.probit_scores(mu_q, v_q, mu_c, v_c)
    assert (dense[:, pos] == dense[:, pos[:1]]).all(), "identical docs must get bitwise-identical scores"
    results = [ce.probit_topk(mu_q, v_q, mu_c, v_c, 4, num_threads=t) for t in (1, 2, None)]
    for scores, idx in results:
        assert (idx == pos[:4]).all(), f"expected the lowest tied indices {pos[:4]}, got {idx}"
        assert (scores == scores[:, :1]).all()
    for scores, idx in results[1:]:
        np.testing.assert_array_equal(scores, results[0][0])
        np.testing.assert_array_equal(idx, results[0][1])


def test_probit_all_zero_means_tie_everywhere(rng):
    # mu = 0: every score is exactly 0 (variances only enlarge the denominator): the first k indices win
    mu_q, v_q = np.zeros((3, 16), np.float32), rng.random((3, 16)).astype(np.float32)
    mu_c, v_c = np.zeros((500, 16), np.float32), rng.random((500, 16)).astype(np.float32)
    for t in (1, 2):
        scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 7, num_threads=t)
        assert (scores == 0).all() and (idx == np.arange(7)).all()


def test_probit_zero_variances_reduce_to_dot_products(rng, check_topk):
    mu_q = rng.standard_normal((6, 33)).astype(np.float32)
    mu_c = rng.standard_normal((400, 33)).astype(np.float32)
    zq, zc = np.zeros_like(mu_q), np.zeros_like(mu_c)
    scores, mu_s, sig2 = ce.probit_scores(mu_q, zq, mu_c, zc, return_moments=True)
    assert (sig2 == 0).all()
    np.testing.assert_array_equal(scores, mu_s)
    s, idx = ce.probit_topk(mu_q, zq, mu_c, zc, 8)
    check_topk(mu_q.astype(np.float64) @ mu_c.T.astype(np.float64), probit_tolerance(mu_q, zq, mu_c, zc), s, idx)


def test_probit_negative_scores_and_large_variances(rng, check_topk):
    # all means anti-aligned (every score < 0) with variances spanning 6 orders of magnitude:
    # the "best" doc is the least negative, which a score bound built for positive scores gets wrong
    mu_q = np.abs(rng.standard_normal((8, 24))).astype(np.float32)
    mu_c = -np.abs(rng.standard_normal((900, 24))).astype(np.float32)
    v_q = (rng.random((8, 24)) * 1e-3).astype(np.float32)
    v_c = (10.0 ** rng.uniform(-3, 3, (900, 1)) * rng.random((900, 24))).astype(np.float32)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 12)
    check_topk(ref.probit_scores(mu_q, v_q, mu_c, v_c), probit_tolerance(mu_q, v_q, mu_c, v_c), scores, idx)


@pytest.mark.parametrize(
    "mu_scale,var_scale,may_refuse",
    [
        (1e6, 1e12, False),
        (1e8, 1e15, False),
        (1e15, 0.0, False),  # every moment fits float32: must be computed
        (1e12, 1e15, True),
        (1e15, 1e15, True),  # mu^2 v overflows float32: refusing is the documented answer
        (1e-10, 1e-10, False),
        (1e-20, 1e-20, False),
    ],
)
def test_probit_extreme_magnitudes_are_right_or_refused(rng, check_topk, mu_scale, var_scale, may_refuse):
    """Huge or tiny inputs give scores within the derived tolerance or, only where float32 overflows, a ValueError."""
    mu_q, v_q = gaussians(rng, 4, 33, scale=mu_scale, var_scale=var_scale)
    mu_c, v_c = gaussians(rng, 200, 33, scale=mu_scale, var_scale=var_scale)
    try:
        dense = ce.probit_scores(mu_q, v_q, mu_c, v_c)
        scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, 5)
    except ValueError as exc:
        assert may_refuse, f"refused inputs whose moments fit float32: {exc}"
        assert "mu_" in str(exc) or "v_" in str(exc)
        return
    tol = probit_tolerance(mu_q, v_q, mu_c, v_c)
    expect = ref.probit_scores(mu_q, v_q, mu_c, v_c)
    assert np.isfinite(dense).all()
    worst = np.argmax(np.abs(dense - expect) - tol)
    assert (np.abs(dense - expect) <= tol).all(), (
        f"score {dense.flat[worst]!r} vs reference {expect.flat[worst]!r} (tol {tol.flat[worst]:.3g})"
    )
    check_topk(expect, tol, scores, idx)


def test_probit_converts_inputs(rng):
    mu_q, v_q = gaussians(rng, 5, 17)
    mu_c, v_c = gaussians(rng, 60, 17)
    expect = ce.probit_topk(mu_q, v_q, mu_c, v_c, 6)
    # float64, Fortran order, strided views and plain lists give the same float32 computation
    variants = [
        (mu_q.astype(np.float64), v_q.astype(np.float64), mu_c.astype(np.float64), v_c.astype(np.float64)),
        (np.asfortranarray(mu_q), np.asfortranarray(v_q), np.asfortranarray(mu_c), np.asfortranarray(v_c)),
        (np.repeat(mu_q, 2, axis=1)[:, ::2], v_q, np.repeat(mu_c, 2, axis=0)[::2], v_c),
        (mu_q.tolist(), v_q.tolist(), mu_c, v_c),
    ]
    for args in variants:
        got = ce.probit_topk(*args, 6)
        np.testing.assert_array_equal(got[0], expect[0])
        np.testing.assert_array_equal(got[1], expect[1])
    ints = [np.round(a * 10).astype(np.int32) for a in (mu_q, v_q, mu_c, v_c)]
    np.testing.assert_array_equal(ce.probit_scores(*ints), ce.probit_scores(*[a.astype(np.float32) for a in ints]))


def _candidate_rows(rng, Q, N, M, pad_fraction=0.3):
    cand = np.stack([rng.choice(N, size=M, replace=False) for _ in range(Q)])
    cand[rng.random(cand.shape) < pad_fraction] = -1
    cand[0, :] = -1  # a query with no candidates at all
    cand[1, 1:] = -1  # and one with a single candidate
    return cand


@pytest.mark.parametrize("k", [1, 5, 20])
def test_probit_rerank_candidates_matches_reference(rng, k):
    mu_q, v_q = gaussians(rng, 12, 33)
    mu_c, v_c = gaussians(rng, 500, 33)
    cand = _candidate_rows(rng, 12, 500, 20)
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, k, candidates=cand)
    r_scores, r_idx = ref.probit_topk(mu_q, v_q, mu_c, v_c, k, candidates=cand)
    np.testing.assert_array_equal(idx, r_idx)  # continuous random scores: no near-ties among <= 20 candidates
    pad = r_idx < 0
    assert np.isneginf(scores[pad]).all()
    tol = np.take_along_axis(probit_tolerance(mu_q, v_q, mu_c, v_c), np.where(pad, 0, r_idx), axis=1)
    assert (np.abs(scores[~pad] - r_scores[~pad]) <= tol[~pad]).all()


def test_probit_rerank_ties_and_threads(rng):
    mu_q, v_q, mu_c, v_c, pos = _tie_layout(rng, 17)
    cand = np.array([[pos[3], 100, pos[1], -1, pos[2], pos[0], 7]] * 4)
    results = [ce.probit_topk(mu_q, v_q, mu_c, v_c, 3, candidates=cand, num_threads=t) for t in (1, 2)]
    for _scores, idx in results:
        assert (idx == pos[:3]).all(), f"ties must go to the lower doc index, got {idx}"
    np.testing.assert_array_equal(results[0][0], results[1][0])


def test_probit_doc_chunks_and_query_blocks(rng, check_topk):
    """N large enough for the kernel to split the docs into chunks per query block (merged heaps), Q > 2 blocks."""
    N, D = 20_000, 17
    mu_q, v_q, mu_c, v_c, pos = _tie_layout(rng, D, N=N, positions=(100, 7001, 13900, 13901, 19999))
    mu_q = np.vstack([mu_q, gaussians(rng, 126, D)[0]])
    v_q = np.vstack([v_q, gaussians(rng, 126, D)[1]])
    expect = ref.probit_scores(mu_q, v_q, mu_c, v_c)
    tol = probit_tolerance(mu_q, v_q, mu_c, v_c)
    results = [ce.probit_topk(mu_q, v_q, mu_c, v_c, k, num_threads=t) for k in (3, 50) for t in (1, 2)]
    for scores, idx in results:
        check_topk(expect, tol, scores, idx)
        assert (idx[:4, :3] == pos[:3]).all(), f"ties across doc chunks must go to the lower index, got {idx[:4, :3]}"
    for a, b in ((0, 1), (2, 3)):
        np.testing.assert_array_equal(results[a][0], results[b][0])
        np.testing.assert_array_equal(results[a][1], results[b][1])


@pytest.mark.parametrize("D", [7, 384])
def test_probit_threads_bitwise_identical(rng, D):
    mu_q, v_q = gaussians(rng, 33, D)
    mu_c, v_c = gaussians(rng, 2500, D)
    one = ce.probit_topk(mu_q, v_q, mu_c, v_c, 10, num_threads=1)
    two = ce.probit_topk(mu_q, v_q, mu_c, v_c, 10, num_threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_array_equal(
        ce.probit_scores(mu_q, v_q, mu_c, v_c, num_threads=1), ce.probit_scores(mu_q, v_q, mu_c, v_c, num_threads=2)
    )


def test_probit_docs_reuse_equals_one_shot(rng):
    mu_q, v_q = gaussians(rng, 6, 15)
    mu_c, v_c = gaussians(rng, 300, 15)
    docs = ce.ProbitDocs(mu_c, v_c)
    assert len(docs) == 300 and docs.dim == 15 and "300" in repr(docs)
    for part in (slice(0, 3), slice(3, 6)):
        a = docs.top_k(mu_q[part], v_q[part], 4)
        b = ce.probit_topk(mu_q[part], v_q[part], docs, None, 4)
        c = ce.probit_topk(mu_q[part], v_q[part], mu_c, v_c, 4)
        for x, y in ((a, b), (a, c)):
            np.testing.assert_array_equal(x[0], y[0])
            np.testing.assert_array_equal(x[1], y[1])
    np.testing.assert_array_equal(docs.scores(mu_q, v_q), ce.probit_scores(mu_q, v_q, mu_c, v_c))


_f32 = st.floats(-100, 100, width=32, allow_subnormal=False)
_var = st.floats(0, 100, width=32, allow_subnormal=False)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), Q=st.integers(1, 4), N=st.integers(1, 40), D=st.integers(1, 20))
def test_probit_topk_property(check_topk, data, Q, N, D):
    """Any float32 input (hypothesis favours zeros, duplicates and extremes): a valid top-k, thread-independent."""
    mu_q = data.draw(hnp.arrays(np.float32, (Q, D), elements=_f32))
    v_q = data.draw(hnp.arrays(np.float32, (Q, D), elements=_var))
    mu_c = data.draw(hnp.arrays(np.float32, (N, D), elements=_f32))
    v_c = data.draw(hnp.arrays(np.float32, (N, D), elements=_var))
    k = data.draw(st.integers(1, N))
    scores, idx = ce.probit_topk(mu_q, v_q, mu_c, v_c, k, num_threads=1)
    check_topk(ref.probit_scores(mu_q, v_q, mu_c, v_c), probit_tolerance(mu_q, v_q, mu_c, v_c), scores, idx)
    scores2, idx2 = ce.probit_topk(mu_q, v_q, mu_c, v_c, k, num_threads=2)
    np.testing.assert_array_equal(scores, scores2)
    np.testing.assert_array_equal(idx, idx2)
