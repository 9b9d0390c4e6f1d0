"""signatures_from_cosines against crossembed.reference (and against anchor_signatures).

Tolerance (derived as in test_kernels_signatures.py, without the GEMM): the
cosines are exact inputs, so an entry's exponent (c - c_max) / sigma is off
by at most 2 u (2 / sigma) + u |arg| <= (4 / sigma) u + (2 / sigma) u, exp
adds 2 u, and the row normalisation gamma_{V+2}; an entry is within
2 eps + gamma_{V+2} of the reference relatively, eps = (6 / sigma + 4) u,
plus the underflow floor of 4 * 2^-126 (a vectorised exp clamps there).
"""

import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref

U32 = 2.0**-24


def gamma(n):
    return n * U32 / (1 - n * U32)


def assert_close(got, C, cols, sigma):
    want = ref.signatures_from_cosines(C, cols, sigma=sigma)
    assert got.dtype == np.float32 and got.shape == want.shape
    rel = 2 * (6 / sigma + 4) * U32 + gamma(len(cols) + 2)
    err = np.abs(got - want) - (rel * want + 4 * 2.0**-126)
    assert err.size == 0 or err.max() <= 0, float(err.max())


def cosines(n, p, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 24))
    Y = rng.normal(size=(p, 24))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    return np.clip(X @ Y.T, -1, 1).astype(np.float32)


@pytest.mark.parametrize("n,p,v", [(40, 30, 1), (33, 50, 7), (9, 70, 17), (1, 5, 33), (64, 64, 64)])
@pytest.mark.parametrize("sigma", [0.05, 0.5, 3.0])
def test_equals_the_float64_reference(n, p, v, sigma):
    C = cosines(n, p, n + p + v)
    cols = np.random.default_rng(v).integers(0, p, v)  # repeats allowed
    assert_close(ce.kernels.signatures_from_cosines(C, cols, sigma=sigma), C, cols, sigma)


def test_matches_anchor_signatures_on_the_same_anchors():
    rng = np.random.default_rng(1)
    X, P = rng.normal(size=(50, 19)).astype(np.float32), rng.normal(size=(40, 19)).astype(np.float32)
    unit = lambda M: M / np.linalg.norm(M, axis=1, keepdims=True)  # noqa: E731
    C = (unit(X.astype(np.float64)) @ unit(P.astype(np.float64)).T).astype(np.float32)
    cols = np.array([3, 17, 5, 39, 0, 22, 8])
    got = ce.kernels.signatures_from_cosines(C, cols, sigma=0.4)
    np.testing.assert_allclose(got, ce.anchor_signatures(X, P[cols], sigma=0.4), atol=2e-6)


def test_ties_zeros_and_extreme_widths():
    flat = np.full((3, 10), 0.25, np.float32)  # every anchor ties: a uniform row
    np.testing.assert_allclose(
        ce.kernels.signatures_from_cosines(flat, np.arange(10), sigma=0.3), 1 / np.sqrt(10), rtol=1e-6
    )
    zeros = np.zeros((2, 4), np.float32)
    np.testing.assert_allclose(
        ce.kernels.signatures_from_cosines(zeros, [0, 1, 2], sigma=1.0), 1 / np.sqrt(3), rtol=1e-6
    )
    C = np.array([[0.9, 0.1, 0.9, -1.0]], np.float32)
    for sigma in (1e-30, 1e-3):  # the nearest anchors (a tie) take the whole row
        got = ce.kernels.signatures_from_cosines(C, np.arange(4), sigma=sigma)
        assert_close(got, C, np.arange(4), sigma)
        np.testing.assert_allclose(got[0, [0, 2]], 1 / np.sqrt(2), rtol=1e-6)
    big = ce.kernels.signatures_from_cosines(C, np.arange(4), sigma=1e30)  # nearly flat, still finite
    assert np.isfinite(big).all()


def test_empty_rows_or_columns_and_thread_independence():
    C = cosines(0, 6, 0)
    assert ce.kernels.signatures_from_cosines(C, [1, 2], sigma=1.0).shape == (0, 2)
    assert ce.kernels.signatures_from_cosines(cosines(4, 6, 0), np.zeros(0, np.int64), sigma=1.0).shape == (4, 0)
    C, cols = cosines(300, 90, 5), np.arange(0, 90, 3)
    one = ce.kernels.signatures_from_cosines(C, cols, sigma=0.5, num_threads=1)
    np.testing.assert_array_equal(one, ce.kernels.signatures_from_cosines(C, cols, sigma=0.5, num_threads=2))


def test_bad_input_names_the_argument():
    C = cosines(5, 4, 0)
    with pytest.raises(ValueError, match="cols"):
        ce.kernels.signatures_from_cosines(C, [0, 4], sigma=1.0)
    with pytest.raises(ValueError, match="cols"):
        ce.kernels.signatures_from_cosines(C, [-1], sigma=1.0)
    with pytest.raises(TypeError, match="cols"):
        ce.kernels.signatures_from_cosines(C, [0.5], sigma=1.0)
    with pytest.raises(ValueError, match="sigma"):
        ce.kernels.signatures_from_cosines(C, [0], sigma=0.0)
    with pytest.raises(ValueError, match="C must be 2-dimensional"):
        ce.kernels.signatures_from_cosines(C[0], [0], sigma=1.0)
    with pytest.raises(ValueError, match="cosines"):
        ce.kernels.signatures_from_cosines(C * 3, [0], sigma=1.0)
    for value in (np.nan, np.inf):
        bad = C.copy()
        bad[1, 2] = value
        with pytest.raises(ValueError, match="finite cosines"):
            ce.kernels.signatures_from_cosines(bad, [0], sigma=1.0)


def test_anchor_cosines_are_checked_once_and_give_the_function_s_signatures():
    from crossembed.kernels import AnchorCosines

    C, cols = cosines(120, 40, 3), np.array([3, 0, 17, 17, 39])
    checked = AnchorCosines(C)
    assert checked.shape == (120, 40)
    np.testing.assert_array_equal(
        checked.signatures(cols, sigma=0.4), ce.kernels.signatures_from_cosines(C, cols, sigma=0.4)
    )
    with pytest.raises(ValueError, match="finite cosines"):
        AnchorCosines(C * 3)
    with pytest.raises(ValueError, match="cols"):
        checked.signatures([40], sigma=1.0)
    with pytest.raises(ValueError, match="sigma"):
        checked.signatures([0], sigma=-1.0)
