"""anchor_signatures / median_anchor_distance against crossembed.reference.

Tolerance (derived): in float32 (u = 2^-24, gamma_n = n u / (1 - n u)) a
cosine from a D-term dot product and two D-term norms is off by at most
delta = gamma_{2D+8} in absolute terms (|x.a| <= |x||a|), and so is
d = 1 - cos. An entry exp(-(d - d_min) / sigma) then has relative error at
most eps = 2 delta / sigma + (2 / sigma + 4) u (two perturbed distances, the
rounding of the argument, exp), and after dividing by the row norm (relative
error <= eps + gamma_{A+2}) an entry is within (2 eps + gamma_{A+2}) of the
reference, relatively, plus an underflow floor of 4 * 2^-126: below the
smallest normal float32 a (vectorised) exp has no relative accuracy left and
may clamp to ~FLT_MIN instead of returning a subnormal or 0.
"""

import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref

U32 = 2.0**-24


def gamma(n, u=U32):
    return n * u / (1 - n * u)


def signature_tolerance(D, A, sigma):
    delta = gamma(2 * D + 8)
    eps = 2 * delta / sigma + (2 / sigma + 4) * U32
    return 2 * eps + gamma(A + 2)


def assert_signatures_close(got, X, anchors, sigma=None):
    expect = ref.anchor_signatures(X, anchors, sigma=sigma)
    sigma = ref.median_anchor_distance(anchors) if sigma is None else sigma
    rel = signature_tolerance(X.shape[1], anchors.shape[0], sigma)
    assert got.dtype == np.float32 and got.shape == expect.shape
    err = np.abs(got - expect) - (rel * expect + 4 * 2.0**-126)
    worst = np.unravel_index(np.argmax(err), err.shape) if err.size else None
    assert not (err > 0).any(), f"entry {worst}: got {got[worst]!r}, expected {expect[worst]!r} (rel tol {rel:.3g})"


def points(rng, n, d, scale=1.0):
    return (rng.standard_normal((n, d)) * scale).astype(np.float32)


@pytest.mark.parametrize("D", [1, 7, 15, 17, 33, 384])
def test_signatures_match_reference_default_sigma(rng, D):
    X, anchors = points(rng, 400, D), points(rng, 37, D)
    assert_signatures_close(ce.anchor_signatures(X, anchors), X, anchors)


@pytest.mark.parametrize("sigma", [0.01, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("A", [1, 2, 64])
def test_signatures_match_reference_explicit_sigma(rng, sigma, A):
    X, anchors = points(rng, 300, 33), points(rng, A, 33)
    got = ce.anchor_signatures(X, anchors, sigma=sigma)
    assert_signatures_close(got, X, anchors, sigma)
    np.testing.assert_allclose(np.linalg.norm(got.astype(np.float64), axis=1), 1.0, rtol=gamma(A + 8))


def test_signatures_tiny_sigma_do_not_underflow(rng):
    X, anchors = points(rng, 200, 17), points(rng, 20, 17)
    got = ce.anchor_signatures(X, anchors, sigma=1e-4)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got.astype(np.float64), axis=1), 1.0, rtol=1e-5)
    assert_signatures_close(got, X, anchors, 1e-4)


def test_median_anchor_distance_does_not_depend_on_threads(rng):
    anchors = rng.standard_normal((97, 19)).astype(np.float32)
    one = ce.kernels.median_anchor_distance(anchors, num_threads=1)
    assert ce.kernels.median_anchor_distance(anchors, num_threads=2) == one
    assert ce.kernels.median_anchor_distance(anchors, num_threads=5) == one


@pytest.mark.parametrize("D", [1, 7, 33, 384])
def test_median_anchor_distance_matches_reference(rng, D):
    for A in (2, 3, 10, 11, 64):  # even and odd pair counts
        anchors = points(rng, A, D)
        assert ce.kernels.median_anchor_distance(anchors) == pytest.approx(
            ref.median_anchor_distance(anchors), abs=gamma(2 * D + 8)
        )


def test_median_anchor_distance_fallbacks(rng):
    a = points(rng, 1, 9)
    assert ce.kernels.median_anchor_distance(a) == 1.0  # one anchor
    assert ce.kernels.median_anchor_distance(np.repeat(a, 5, axis=0)) == 1.0, "coinciding anchors must fall back to 1.0"
    assert ce.kernels.median_anchor_distance(np.zeros((4, 9), np.float32)) == 1.0  # zero rows: cosine 0, distance 1
    b = np.vstack([np.repeat(a, 3, axis=0), points(rng, 1, 9)])  # 3 zero and 3 equal distances
    assert ce.kernels.median_anchor_distance(b) == pytest.approx(ref.median_anchor_distance(b), abs=gamma(26))


def test_signatures_zero_rows_and_zero_anchors(rng):
    X, anchors = points(rng, 50, 15), points(rng, 8, 15)
    X[[0, 17, 49]] = 0
    anchors[3] = 0
    got = ce.anchor_signatures(X, anchors, sigma=0.5)
    assert_signatures_close(got, X, anchors, 0.5)
    np.testing.assert_allclose(got[[0, 17, 49]], 1 / np.sqrt(8), rtol=gamma(10))  # cosine 0 everywhere: uniform


def test_signatures_duplicates_are_identical(rng):
    X, anchors = points(rng, 100, 33), points(rng, 40, 33)
    X[[3, 8, 16, 31, 64, 99]] = X[3]
    anchors[[0, 9, 17, 33]] = anchors[0]
    got = ce.anchor_signatures(X, anchors, sigma=0.3)
    assert (got[[8, 16, 31, 64, 99]] == got[3]).all(), "identical rows must get bitwise-identical signatures"
    assert_signatures_close(got, X, anchors, 0.3)
    np.testing.assert_allclose(
        got[:, [9, 17, 33]], np.repeat(got[:, :1], 3, axis=1), rtol=signature_tolerance(33, 40, 0.3)
    )


@pytest.mark.parametrize("scale", [1e-20, 1e-10, 1e6, 1e15, 1e25, 1e35])
def test_signatures_are_scale_free_at_extreme_magnitudes(rng, scale):
    """Cosine ignores scale: any finite float32 rows, huge or tiny, give their unit-scale signature."""
    X, anchors = points(rng, 60, 33), points(rng, 12, 33)
    big = (X.astype(np.float64) * scale).astype(np.float32)
    got = ce.anchor_signatures(big, anchors, sigma=0.5)
    assert np.isfinite(got).all()
    assert_signatures_close(got, big, anchors, 0.5)


def test_signatures_edge_shapes(rng):
    anchors = points(rng, 5, 7)
    assert ce.anchor_signatures(np.zeros((0, 7), np.float32), anchors).shape == (0, 5)
    one = ce.anchor_signatures(points(rng, 3, 7), anchors[:1])
    np.testing.assert_array_equal(one, np.ones((3, 1), np.float32))
    X1, A1 = points(rng, 20, 1), points(rng, 4, 1)  # D = 1: cosines are +-1
    assert_signatures_close(ce.anchor_signatures(X1, A1, sigma=0.7), X1, A1, 0.7)


def test_signatures_threads_and_conversions(rng):
    X, anchors = points(rng, 3000, 17), points(rng, 64, 17)
    one = ce.anchor_signatures(X, anchors, num_threads=1)
    np.testing.assert_array_equal(one, ce.anchor_signatures(X, anchors, num_threads=2))
    np.testing.assert_array_equal(one, ce.anchor_signatures(X.astype(np.float64), np.asfortranarray(anchors)))
    np.testing.assert_array_equal(one[::3], ce.anchor_signatures(X[::3], anchors, num_threads=2))
    ints = np.round(X * 4).astype(np.int64)
    np.testing.assert_array_equal(
        ce.anchor_signatures(ints, anchors), ce.anchor_signatures(ints.astype(np.float32), anchors)
    )
