"""csls_mutual_topk_candidates against its float64 reference, and against the dense kernel when every pair is listed."""

import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref


def _signatures(rng, n_a, n_b, a=24, noise=0.05):
    base = rng.random((max(n_a, n_b), a))
    SA = base[:n_a] + noise * rng.random((n_a, a))
    SB = base[rng.permutation(base.shape[0])[:n_b]] + noise * rng.random((n_b, a))
    return SA.astype(np.float32), SB.astype(np.float32)


def _nearest(X, Y, m):
    sims = X.astype(np.float64) @ Y.astype(np.float64).T
    return np.argsort(-sims, axis=1, kind="stable")[:, :m].astype(np.int64)


@pytest.mark.parametrize(
    "n_a,n_b,m,k,csls_k",
    [(60, 50, 8, 3, 5), (40, 70, 12, 5, 50), (1, 9, 4, 5, 2), (30, 30, 30, 5, 10), (90, 170, 150, 4, 60)],
)
def test_matches_reference(n_a, n_b, m, k, csls_k):
    rng = np.random.default_rng(n_a * 1000 + n_b)
    SA, SB = _signatures(rng, n_a, n_b)
    cand_a, cand_b = _nearest(SA, SB, min(m, n_b)), _nearest(SB, SA, min(m, n_a))
    cand_a[::7, -1] = -1  # padding
    got_p, got_s = ce.kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, k=k, csls_k=csls_k)
    exp_p, exp_s = ref.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, k=k, csls_k=csls_k)
    assert np.array_equal(got_p, exp_p)
    np.testing.assert_allclose(got_s, exp_s, rtol=1e-5, atol=1e-5)


def test_all_pairs_listed_equals_the_dense_kernel():
    rng = np.random.default_rng(3)
    SA, SB = _signatures(rng, 45, 38)
    cand_a = np.tile(np.arange(38), (45, 1))
    cand_b = np.tile(np.arange(45), (38, 1))
    dense = ce.csls_mutual_topk(SA, SB, k=4, csls_k=7)
    sparse = ce.kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, k=4, csls_k=7)
    assert np.array_equal(dense[0], sparse[0])
    # the dense kernel sums each dot product in one FMA chain (panel GEMM), the
    # sparse one in SIMD lanes: equal up to float32 rounding
    np.testing.assert_allclose(dense[1], sparse[1], rtol=1e-5, atol=1e-5)


def test_exclusions_threads_and_empty_rows():
    rng = np.random.default_rng(4)
    SA, SB = _signatures(rng, 80, 80)
    cand_a, cand_b = _nearest(SA, SB, 6), _nearest(SB, SA, 6)
    cand_a[5] = -1  # a row with no candidates never pairs
    kw = dict(k=3, csls_k=4, exclude_a=[1, 2], exclude_b=[7])
    p1 = ce.kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, num_threads=1, **kw)
    p2 = ce.kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, num_threads=2, **kw)
    assert np.array_equal(p1[0], p2[0]) and np.array_equal(p1[1], p2[1])
    exp = ref.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, **kw)
    assert np.array_equal(p1[0], exp[0])
    assert not np.isin(p1[0][:, 0], [1, 2, 5]).any() and not (p1[0][:, 1] == 7).any()


def test_bad_candidates_are_refused():
    SA = np.ones((3, 4), np.float32)
    SB = np.ones((2, 4), np.float32)
    good_a, good_b = np.zeros((3, 1), np.int64), np.zeros((2, 1), np.int64)
    with pytest.raises(ValueError, match="cand_a"):
        ce.kernels.csls_mutual_topk_candidates(SA, SB, np.full((3, 1), 2), good_b)
    with pytest.raises(ValueError, match="cand_b"):
        ce.kernels.csls_mutual_topk_candidates(SA, SB, good_a, np.zeros((3, 1), np.int64))
    with pytest.raises(ValueError, match="repeated"):
        ce.kernels.csls_mutual_topk_candidates(SA, SB, np.array([[0, 0], [0, 1], [1, -1]]), good_b)
    with pytest.raises(TypeError, match="cand_a"):
        ce.kernels.csls_mutual_topk_candidates(SA, SB, good_a.astype(float), good_b)
    with pytest.raises(ValueError, match="k"):
        ce.kernels.csls_mutual_topk_candidates(SA, SB, good_a, good_b, k=0)


@pytest.mark.parametrize("d", [16, 37, 256])
def test_candidate_dots_do_not_depend_on_the_list_around_them(d):
    # the kernel computes a row's dots several chains at a time and the rest one by one; a
    # sharded caller lists each pair among other neighbours, so every value must be the same
    # bits whatever its position in the list
    rng = np.random.default_rng(d)
    X = rng.standard_normal((5, d)).astype(np.float32)
    Y = (rng.standard_normal((40, d)) * 10.0 ** rng.uniform(-3, 3, (40, 1))).astype(np.float32)
    cand = np.stack([rng.permutation(40)[:21] for _ in range(5)]).astype(np.int64)
    full = ce.kernels.candidate_dots(X, Y, cand)
    for t in range(cand.shape[1]):
        alone = ce.kernels.candidate_dots(X, Y, cand[:, [t]])
        np.testing.assert_array_equal(alone[:, 0], full[:, t])
    shifted = ce.kernels.candidate_dots(X, Y, np.roll(cand, 3, axis=1))
    np.testing.assert_array_equal(np.roll(shifted, -3, axis=1), full)


def test_candidate_lists_checked_once_give_the_candidates_kernel():
    from crossembed.kernels import CandidateLists, csls_mutual_topk_lists

    rng = np.random.default_rng(8)
    SA, SB = _signatures(rng, 70, 55)
    cand_a, cand_b = _nearest(SA, SB, 9), _nearest(SB, SA, 7)
    cand_a[::5, -2:] = -1
    lists = CandidateLists(cand_a, cand_b)
    assert (lists.n_a, lists.n_b) == (70, 55)
    cand_a[:] = 0  # the lists hold their own checked copy
    kw = dict(k=3, csls_k=6, exclude_a=[4], exclude_b=[9])
    got = csls_mutual_topk_lists(SA, SB, lists, **kw)
    want = ce.kernels.csls_mutual_topk_candidates(SA, SB, lists.cand_a, lists.cand_b, **kw)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_bad_candidate_lists_name_the_argument():
    from crossembed.kernels import CandidateLists, csls_mutual_topk_lists

    SA, SB = np.ones((3, 4), np.float32), np.ones((2, 4), np.float32)
    good_a, good_b = np.zeros((3, 1), np.int64), np.zeros((2, 1), np.int64)
    with pytest.raises(ValueError, match="cand_a"):
        CandidateLists(np.full((3, 1), 2), good_b)  # B has 2 rows
    with pytest.raises(ValueError, match="repeated"):
        CandidateLists(np.array([[0, 0], [0, 1], [1, -1]]), good_b)
    with pytest.raises(ValueError, match="cand_b"):
        CandidateLists(good_a, np.zeros(2, np.int64))  # not 2-D
    with pytest.raises(TypeError, match="cand_a"):
        CandidateLists(None, good_b)
    with pytest.raises(TypeError, match="lists"):
        csls_mutual_topk_lists(SA, SB, (good_a, good_b))
    with pytest.raises(ValueError, match="cand_a has 3 rows but there are 4"):
        csls_mutual_topk_lists(np.ones((4, 4), np.float32), SB, CandidateLists(good_a, good_b))


@pytest.mark.parametrize("m", [8, 64, 256])
def test_tied_similarities_match_the_reference(m):
    # the hubness term takes the csls_k-th largest of a row's candidate similarities; with many
    # equal values (duplicated, coarsely quantised rows) any selection must land on the same value.
    # Small integers, and means over a power of two, keep every score exact in float32 and
    # float64, so both break the ties the same way
    rng = np.random.default_rng(m)
    SA = rng.integers(0, 3, (300, 5)).astype(np.float32)
    SB = np.repeat(rng.integers(0, 3, (150, 5)), 2, axis=0).astype(np.float32)
    cand_a, cand_b = _nearest(SA, SB, m), _nearest(SB, SA, m)
    for csls_k in (1, 2, m // 4, m):
        got = ce.kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, k=2, csls_k=csls_k)
        want = ref.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, k=2, csls_k=csls_k)
        assert np.array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
