"""csls_mutual_topk against crossembed.reference.

Two regimes:

* exact: small-integer signatures with hubness counts min(csls_k, n) a power
  of two make every similarity, hubness mean and CSLS value exactly
  representable in float32, so the kernel must reproduce the reference bit
  for bit, ties included;
* continuous: planted matchings with well-separated CSLS values; pairs must
  be identical and scores within the derived bound
  (4 gamma_{A+2} + 2 gamma_{csls_k+2} + 12 u) * max|SA_i| max|SB_j|
  (similarity error, the 1-Lipschitz top-m mean, the CSLS combination).
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import crossembed as ce
from crossembed import reference as ref

# CROSSEMBED_HYPOTHESIS_EXAMPLES=600 runs the property tests 10x deeper (default 60: the fast suite)
EXAMPLES = int(os.environ.get("CROSSEMBED_HYPOTHESIS_EXAMPLES", "60"))

U32 = 2.0**-24


def gamma(n, u=U32):
    return n * u / (1 - n * u)


def _is_pow2(n):
    return n > 0 and n & (n - 1) == 0


def assert_same_result(got, expect, *, exact, tol=0.0):
    """Same pairs as the reference, scores equal (exact) or within ``tol``.

    In the continuous regime two pairs whose CSLS values differ by less than
    the float32 error may be listed in either order, so there the order is
    checked against the kernel's own scores (descending, ties by i then j).
    """
    pairs, scores = got
    assert pairs.dtype == np.int64 and pairs.ndim == 2 and pairs.shape[1] == 2
    assert scores.dtype == np.float32 and scores.shape == (pairs.shape[0],)
    if exact:
        if pairs.tolist() != expect[0].tolist():
            first = next((n for n, (a, b) in enumerate(zip(pairs.tolist(), expect[0].tolist())) if a != b), None)
            raise AssertionError(
                f"{len(pairs)} pairs vs {len(expect[0])} expected; first difference at {first}: "
                f"got {pairs[first : first + 3].tolist() if first is not None else pairs[len(expect[0]) :][:3].tolist()}, "
                f"expected {expect[0][first : first + 3].tolist() if first is not None else expect[0][len(pairs) :][:3].tolist()}"
            )
        np.testing.assert_array_equal(scores, expect[1].astype(np.float32))
        return
    got_map = {tuple(p): float(c) for p, c in zip(pairs.tolist(), scores)}
    exp_map = {tuple(p): float(c) for p, c in zip(expect[0].tolist(), expect[1])}
    missing = sorted(set(exp_map) - set(got_map), key=lambda p: -exp_map[p])
    extra = sorted(set(got_map) - set(exp_map), key=lambda p: -got_map[p])
    assert not missing and not extra, (
        f"{len(pairs)} pairs vs {len(expect[0])} expected; missing {[(p, exp_map[p]) for p in missing[:5]]}, "
        f"unexpected {[(p, got_map[p]) for p in extra[:5]]}"
    )
    off = [(p, got_map[p], exp_map[p]) for p in got_map if abs(got_map[p] - exp_map[p]) > tol]
    assert not off, f"scores beyond tol {tol:.3g}: {off[:5]}"
    key = [(-c, i, j) for (i, j), c in zip(pairs.tolist(), scores.tolist())]
    assert key == sorted(key), "pairs not in descending-score order (ties: lower i, then j)"


def continuous_tolerance(SA, SB, csls_k):
    big = np.linalg.norm(SA, axis=1).max() * np.linalg.norm(SB, axis=1).max()
    return (4 * gamma(SA.shape[1] + 2) + 2 * gamma(csls_k + 2) + 12 * U32) * big


def planted(rng, n_common=150, n_extra=60, D=16, A=32, noise=0.05):
    """Signature-like rows (non-negative, unit norm) for two sides sharing n_common objects in shuffled order."""
    anchors = rng.standard_normal((A, D))
    base = rng.standard_normal((n_common + 2 * n_extra, D))
    side_a = np.vstack([base[:n_common], base[n_common : n_common + n_extra]])
    perm = rng.permutation(n_common)
    side_b = np.vstack([base[:n_common][perm], base[n_common + n_extra :]])
    side_a = side_a + noise * rng.standard_normal(side_a.shape)
    side_b = side_b + noise * rng.standard_normal(side_b.shape)
    SA = ref.anchor_signatures(side_a, anchors, sigma=0.3).astype(np.float32)
    SB = ref.anchor_signatures(side_b, anchors, sigma=0.3).astype(np.float32)
    return SA, SB


_small_int = st.integers(-2, 2).map(np.float32)


@settings(max_examples=EXAMPLES * 80 // 60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    NA=st.integers(1, 24),
    NB=st.integers(1, 24),
    D=st.integers(1, 6),
    k=st.integers(1, 8),
    csls_k=st.sampled_from([1, 2, 4, 8, 50]),
)
def test_csls_exact_integer_inputs(data, NA, NB, D, k, csls_k):
    SA = data.draw(hnp.arrays(np.float32, (NA, D), elements=_small_int))
    SB = data.draw(hnp.arrays(np.float32, (NB, D), elements=_small_int))
    ex_a = data.draw(st.lists(st.integers(0, NA - 1), max_size=NA, unique=True))
    ex_b = data.draw(st.lists(st.integers(0, NB - 1), max_size=NB, unique=True))
    act_a, act_b = NA - len(ex_a), NB - len(ex_b)
    assume(act_a == 0 or act_b == 0 or (_is_pow2(min(csls_k, act_b)) and _is_pow2(min(csls_k, act_a))))
    kwargs = dict(k=k, csls_k=csls_k, exclude_a=ex_a or None, exclude_b=ex_b or None)
    got = ce.csls_mutual_topk(SA, SB, num_threads=1, **kwargs)
    assert_same_result(got, ref.csls_mutual_topk(SA, SB, **kwargs), exact=True)
    two = ce.csls_mutual_topk(SA, SB, num_threads=2, **kwargs)
    np.testing.assert_array_equal(got[0], two[0])
    np.testing.assert_array_equal(got[1], two[1])


def test_csls_exact_across_tiles_with_duplicates():
    """Exact regime at a size that crosses the kernel's row blocks and column tiles, with tied duplicates on the seams."""
    rng = np.random.default_rng(11)
    SA = rng.integers(-2, 3, (300, 6)).astype(np.float32)
    SB = rng.integers(-2, 3, (600, 6)).astype(np.float32)
    SB[[255, 256, 511, 512, 599]] = SB[3]  # B duplicates straddling column tiles
    SA[[63, 64, 127, 128, 299]] = SA[5]  # A duplicates straddling row blocks
    ex_a, ex_b = [0, 64, 200], [256, 300, 301]
    for kwargs in (dict(k=3, csls_k=4), dict(k=1, csls_k=8, exclude_a=ex_a, exclude_b=ex_b), dict(k=6, csls_k=2)):
        expect = ref.csls_mutual_topk(SA, SB, **kwargs)
        assert len(expect[0]) > 50  # plenty of pairs, many of them decided by ties
        one = ce.csls_mutual_topk(SA, SB, num_threads=1, **kwargs)
        assert_same_result(one, expect, exact=True)
        two = ce.csls_mutual_topk(SA, SB, num_threads=2, **kwargs)
        np.testing.assert_array_equal(one[0], two[0])
        np.testing.assert_array_equal(one[1], two[1])


def test_csls_exclusion_equals_removal():
    """Excluded rows take no part at all: the result is that of the smaller problem, re-indexed."""
    rng = np.random.default_rng(7)
    SA = rng.integers(-2, 3, (40, 5)).astype(np.float32)
    SB = rng.integers(-2, 3, (30, 5)).astype(np.float32)
    SB[0] = 2  # a hub: it would dominate r_A if it took part
    ex_a, ex_b = [1, 5, 6, 39], [0, 7, 8, 9, 29, 28]  # leaves 36 and 24 rows: counts 4 are powers of two
    got = ce.csls_mutual_topk(SA, SB, k=3, csls_k=4, exclude_a=ex_a, exclude_b=ex_b)
    keep_a, keep_b = np.setdiff1d(np.arange(40), ex_a), np.setdiff1d(np.arange(30), ex_b)
    small = ce.csls_mutual_topk(SA[keep_a], SB[keep_b], k=3, csls_k=4)
    remapped = np.stack([keep_a[small[0][:, 0]], keep_b[small[0][:, 1]]], axis=1)
    assert got[0].tolist() == remapped.tolist()
    np.testing.assert_array_equal(got[1], small[1])
    assert_same_result(got, ref.csls_mutual_topk(SA, SB, k=3, csls_k=4, exclude_a=ex_a, exclude_b=ex_b), exact=True)


def test_csls_duplicate_rows_tie_to_lower_index():
    SA = np.eye(4, dtype=np.float32)
    SB = np.eye(4, dtype=np.float32)[[0, 1, 1, 2, 3, 0]]  # B rows 1 = 2 and 0 = 5
    pairs, scores = ce.csls_mutual_topk(SA, SB, k=1, csls_k=1)
    assert pairs.tolist() == [[0, 0], [1, 1], [2, 3], [3, 4]]
    assert (scores == 0).all()
    pairs, _ = ce.csls_mutual_topk(SB, SA, k=1, csls_k=1)  # the same from the other side
    assert pairs.tolist() == [[0, 0], [1, 1], [3, 2], [4, 3]]


@pytest.mark.parametrize("k,csls_k", [(1, 10), (5, 50), (10, 3)])
def test_csls_planted_matching_matches_reference(rng, k, csls_k):
    SA, SB = planted(rng)
    got = ce.csls_mutual_topk(SA, SB, k=k, csls_k=csls_k)
    expect = ref.csls_mutual_topk(SA, SB, k=k, csls_k=csls_k)
    assert_same_result(got, expect, exact=False, tol=continuous_tolerance(SA, SB, csls_k))
    assert len(got[0]) > 50  # the planted pairs are found: the test exercises real output
    assert len(set(got[0][:, 0])) == len(got[0]) == len(set(got[0][:, 1]))  # one-to-one
    assert (np.diff(got[1]) <= 0).all()  # by descending score


def test_csls_planted_with_exclusions(rng):
    SA, SB = planted(rng)
    ex_a, ex_b = rng.choice(len(SA), 40, replace=False), rng.choice(len(SB), 25, replace=False)
    got = ce.csls_mutual_topk(SA, SB, k=5, csls_k=20, exclude_a=ex_a, exclude_b=ex_b)
    assert_same_result(
        got,
        ref.csls_mutual_topk(SA, SB, k=5, csls_k=20, exclude_a=ex_a, exclude_b=ex_b),
        exact=False,
        tol=continuous_tolerance(SA, SB, 20),
    )
    assert not np.isin(got[0][:, 0], ex_a).any() and not np.isin(got[0][:, 1], ex_b).any()


@pytest.mark.parametrize("A", [1, 7, 15, 17, 33, 384])
def test_csls_signature_widths(rng, A):
    SA = rng.random((120, A)).astype(np.float32)
    SB = np.vstack(
        [
            SA[rng.permutation(120)[:80]] + 0.01 * rng.random((80, A)).astype(np.float32),
            rng.random((30, A)).astype(np.float32),
        ]
    )
    got = ce.csls_mutual_topk(SA, SB, k=5, csls_k=10)
    assert_same_result(
        got, ref.csls_mutual_topk(SA, SB, k=5, csls_k=10), exact=False, tol=continuous_tolerance(SA, SB, 10)
    )


@pytest.mark.parametrize("scale", [1e-15, 1e6, 1e12])
def test_csls_extreme_magnitudes(rng, scale):
    SA, SB = planted(rng, n_common=60, n_extra=20)
    SA, SB = (SA * np.float32(scale)), (SB * np.float32(scale))
    got = ce.csls_mutual_topk(SA, SB, k=3, csls_k=10)
    assert_same_result(
        got, ref.csls_mutual_topk(SA, SB, k=3, csls_k=10), exact=False, tol=continuous_tolerance(SA, SB, 10)
    )


def test_csls_edge_cases(rng):
    SA, SB = rng.random((5, 4)).astype(np.float32), rng.random((3, 4)).astype(np.float32)
    for pairs, scores in (
        ce.csls_mutual_topk(SA[:0], SB),
        ce.csls_mutual_topk(SA, SB[:0]),
        ce.csls_mutual_topk(SA, SB, exclude_a=np.arange(5)),
    ):
        assert pairs.shape == (0, 2) and scores.shape == (0,)
    pairs, scores = ce.csls_mutual_topk(SA[:1], SB[:1])  # 1 x 1: the only pair, CSLS 2s - s - s = 0
    assert pairs.tolist() == [[0, 0]] and scores.tolist() == [0.0]
    # k and csls_k larger than either side are clipped, not refused
    big = ce.csls_mutual_topk(SA, SB, k=100, csls_k=1000)
    assert_same_result(
        big, ref.csls_mutual_topk(SA, SB, k=100, csls_k=1000), exact=False, tol=continuous_tolerance(SA, SB, 1000)
    )


def test_csls_threads_bitwise_identical(rng):
    SA, SB = planted(rng, n_common=1200, n_extra=300, A=64)
    one = ce.csls_mutual_topk(SA, SB, k=5, csls_k=50, num_threads=1)
    two = ce.csls_mutual_topk(SA, SB, k=5, csls_k=50, num_threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
    assert_same_result(
        one, ref.csls_mutual_topk(SA, SB, k=5, csls_k=50), exact=False, tol=continuous_tolerance(SA, SB, 50)
    )


@pytest.mark.parametrize("seed", range(4))
def test_csls_exact_when_lists_cannot_certify(seed):
    """Exact regime where a row's csls_k list rarely proves its CSLS top-k: coarse integer similarities tie
    at the list's end, hubs and outliers spread r, so the kernel scores the rows of least r, then whole rows again."""
    rng = np.random.default_rng(seed)
    SA = rng.integers(-2, 3, (520, 3)).astype(np.float32)
    SB = rng.integers(-2, 3, (610, 3)).astype(np.float32)
    SB[rng.choice(610, 40, replace=False)] *= 2  # hubs: high r_B
    SA[rng.choice(520, 40, replace=False)] = rng.integers(-1, 2, (40, 3))  # near-zero rows: low r_A
    for kwargs in (dict(k=5, csls_k=4), dict(k=8, csls_k=2), dict(k=2, csls_k=1), dict(k=20, csls_k=16)):
        expect = ref.csls_mutual_topk(SA, SB, **kwargs)
        one = ce.csls_mutual_topk(SA, SB, num_threads=1, **kwargs)
        assert_same_result(one, expect, exact=True)
        for threads in (2, 3):
            other = ce.csls_mutual_topk(SA, SB, num_threads=threads, **kwargs)
            np.testing.assert_array_equal(one[0], other[0])
            np.testing.assert_array_equal(one[1], other[1])
