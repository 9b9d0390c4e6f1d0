"""lorentz_pairwise / lorentz_topk against the long-double reference.

Tolerance (derived): the kernel evaluates d = (2/sqrt c) asinh(sqrt(c q) / 2)
with q = |x - y|^2 - (x_t - y_t)^2. In precision u (2^-24 or 2^-53), with
gamma_n = n u / (1 - n u):

* the cancellation-free form (docs/methods.md) (|x - y|^2 from the coordinate
  differences, x_t - y_t = (x - y).(x + y) / (x_t + y_t), |x + y| <= x_t + y_t)
  puts at most gamma_{D+6} |x - y|^2 absolute error on each of the two terms;
* for well-separated pairs the kernel may take |x - y|^2 = |x|^2 + |y|^2 - 2 x.y
  and x_t - y_t = (|x|^2 - |y|^2) / (x_t + y_t) (one GEMM); that costs
  gamma_{D+6} (|x|^2 + |y|^2) per term, and lorentz.hpp only does it where
  |x|^2 + |y|^2 <= 20 |x - y|^2, so at most 3 * 20 gamma_{D+6} |x - y|^2 in q.

So |dq| <= 62 gamma_{D+6} |x - y|^2 and d, whose relative sensitivity to q is
at most 1/2, is off by at most 31 gamma_{D+6} |x - y|^2 / q + 8u relatively,
plus a subnormal floor (D + 6) * tiny / q. The factor |x - y|^2 / q >= 1 is
the conditioning: large for nearby points far out along one ray, ~1
elsewhere. For nearby points this is still a *relative* bound of a few
hundred u: what the asinh form is for.
"""

import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref

PRECISION = {np.float32: (2.0**-24, 2.0**-149), np.float64: (2.0**-53, 2.0**-1074)}


def gamma(n, u):
    return n * u / (1 - n * u)


def lorentz_tolerance(X, Y, curvature, dtype):
    """Entry-wise relative error bound (see module docstring) and the reference distances."""
    u, tiny = PRECISION[dtype]
    ld = np.longdouble  # q and |x - y|^2 of 1e-160 points underflow in float64
    XL, YL = X.astype(ld), Y.astype(ld)
    expect = ref.lorentz_pairwise(X, Y, curvature=curvature)
    q = (4 / ld(curvature)) * np.sinh(np.sqrt(ld(curvature)) * expect.astype(ld) / 2) ** 2
    diff2 = ((XL[:, None, :] - YL[None, :, :]) ** 2).sum(-1)
    D = X.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = 31 * gamma(D + 6, u) * np.where(q > 0, diff2 / q, 1.0) + 8 * u + np.where(q > 0, (D + 6) * tiny / q, 0.0)
    return expect, rel.astype(np.float64)


def naive_float32(X, Y, curvature):
    """acosh(-c <x, y>_L) / sqrt(c) straight from the definition, in float32 numpy (what the kernel must beat)."""
    X, Y, c = X.astype(np.float32), Y.astype(np.float32), np.float32(curvature)
    xt = np.sqrt(1 / c + (X * X).sum(1))
    yt = np.sqrt(1 / c + (Y * Y).sum(1))
    inner = X @ Y.T - np.outer(xt, yt)
    return np.arccosh(np.maximum(-c * inner, np.float32(1))) / np.sqrt(c)


def assert_distances_close(got, expect, rel):
    err = np.abs(got.astype(np.float64) - expect) - rel * expect
    assert not (err > 0).any(), (
        f"worst entry {np.unravel_index(np.argmax(err), err.shape)}: got {got.flat[np.argmax(err)]!r}, "
        f"expected {expect.flat[np.argmax(err)]!r}, allowed rel {rel.flat[np.argmax(err)]:.3g}"
    )


def spread_points(rng, n, D, dtype):
    """Points with norms from 0.01 to 10: near the origin, mid-range and far out."""
    X = rng.standard_normal((n, D)) / np.sqrt(D) * 10.0 ** rng.uniform(-2, 1, (n, 1))
    return X.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("D", [1, 7, 16, 33, 128])
@pytest.mark.parametrize("curvature", [0.1, 1.0, 7.0])
def test_lorentz_pairwise_matches_reference(rng, dtype, D, curvature):
    X, Y = spread_points(rng, 40, D, dtype), spread_points(rng, 53, D, dtype)
    got = ce.lorentz_pairwise(X, Y, curvature=curvature)
    assert got.dtype == dtype and got.shape == (40, 53)
    expect, rel = lorentz_tolerance(X, Y, curvature, dtype)
    assert_distances_close(got, expect, rel)


def nearby_pairs(rng, n, D, dtype, curvature=1.0):
    """Pairs at hyperbolic distance 1e-4..1e-2, points with norms up to 2, some displaced along the radius."""
    X = rng.standard_normal((n, D)) / np.sqrt(D) * rng.uniform(0.05, 2.0, (n, 1))
    step = rng.standard_normal((n, D))
    step[: n // 3] = X[: n // 3]  # radial displacements: the worst direction for cancellation
    step /= np.linalg.norm(step, axis=1, keepdims=True)
    # a Euclidean step e is a hyperbolic step e tangentially but e / sqrt(1 + c|x|^2) radially: undo that
    step[: n // 3] *= np.sqrt(1 + curvature * (X[: n // 3] ** 2).sum(1, keepdims=True))
    Y = X + step * 10.0 ** rng.uniform(-4, -2, (n, 1))
    return X.astype(dtype), Y.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("curvature", [0.5, 1.0, 4.0])
def test_lorentz_nearby_points_keep_relative_precision(rng, dtype, curvature):
    X, Y = nearby_pairs(rng, 300, 16, dtype, curvature)
    got = np.diagonal(ce.lorentz_pairwise(X, Y, curvature=curvature)).astype(np.float64)
    expect = np.array(
        [ref.lorentz_pairwise(X[i : i + 1], Y[i : i + 1], curvature=curvature)[0, 0] for i in range(len(X))]
    )
    assert expect.min() > 5e-5 and expect.max() < 2e-2  # the regime the asinh form exists for
    rel = np.array([lorentz_tolerance(X[i : i + 1], Y[i : i + 1], curvature, dtype)[1][0, 0] for i in range(len(X))])
    assert_distances_close(got, expect, rel)
    if dtype == np.float32:
        kernel_err = np.abs(got / expect - 1).max()
        naive_err = np.abs(np.diagonal(naive_float32(X, Y, curvature)) / expect - 1).max()
        assert kernel_err < 1e-4 and kernel_err < naive_err / 100, (kernel_err, naive_err)


def test_lorentz_self_distance_is_exactly_zero_and_symmetric(rng):
    for dtype in (np.float32, np.float64):
        X = spread_points(rng, 64, 33, dtype)
        d = ce.lorentz_pairwise(X, X)
        assert (np.diagonal(d) == 0).all()
        _, rel = lorentz_tolerance(X, X, 1.0, dtype)
        np.testing.assert_array_less(np.abs(d - d.T), 2 * rel * np.maximum(d, d.T) + 1e-300)


def test_lorentz_origin_and_d1(rng):
    X = np.zeros((1, 1), np.float64)
    Y = np.array([[0.0], [0.5], [-3.0]])
    got = ce.lorentz_pairwise(X, Y)  # from the origin (c = 1): d = acosh(y_t) = asinh(|y|)
    np.testing.assert_allclose(got[0], np.arcsinh(np.abs(Y[:, 0])), rtol=1e-14)
    Xf, Yf = spread_points(rng, 20, 1, np.float32), spread_points(rng, 30, 1, np.float32)
    e, rel = lorentz_tolerance(Xf, Yf, 1.0, np.float32)
    assert_distances_close(ce.lorentz_pairwise(Xf, Yf), e, rel)


@pytest.mark.parametrize(
    "dtype,scale",
    [(np.float32, 1e6), (np.float32, 1e15), (np.float32, 1e-20), (np.float64, 1e100), (np.float64, 1e-160)],
)
def test_lorentz_extreme_magnitudes(rng, dtype, scale):
    """All below the documented refusal limits (1e17 float32, 1e150 float64): computed, to the derived bound."""
    X = (rng.standard_normal((10, 16)) * scale).astype(dtype)
    Y = (rng.standard_normal((12, 16)) * scale).astype(dtype)
    got = ce.lorentz_pairwise(X, Y)
    assert np.isfinite(got).all()
    expect, rel = lorentz_tolerance(X, Y, 1.0, dtype)
    assert_distances_close(got, expect, rel)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 7])
def test_lorentz_topk_is_valid_topk(rng, check_topk, dtype, k):
    X, Y = spread_points(rng, 30, 17, dtype), spread_points(rng, 500, 17, dtype)
    dist, idx = ce.lorentz_topk(X, Y, k)
    assert dist.dtype == dtype and idx.dtype == np.int64 and dist.shape == idx.shape == (30, k)
    expect, rel = lorentz_tolerance(X, Y, 1.0, dtype)
    check_topk(expect, rel * expect, dist, idx, largest=False)
    full = ce.lorentz_pairwise(X, Y)
    both = 2 * np.take_along_axis(rel * expect, idx, axis=1)  # each within its bound of the reference
    assert (np.abs(dist - np.take_along_axis(full, idx, axis=1)) <= both).all()


def test_lorentz_topk_ties_threads_and_k_equals_n(rng, check_topk):
    X = spread_points(rng, 100, 33, np.float32)  # several row blocks, so two threads share the work
    Y = spread_points(rng, 3000, 33, np.float32)
    pos = [4, 5, 16, 31, 1500, 2999]
    Y[pos] = X[0] * 1.001  # the same point, nearest to X[0], spread over lanes, tiles and thread halves
    results = [ce.lorentz_topk(X, Y, 4, num_threads=t) for t in (1, 2, None)]
    for dist, idx in results:
        assert idx[0].tolist() == pos[:4], f"ties must go to the lower index, got {idx[0]}"
        assert (dist[0] == dist[0, 0]).all()
    for dist, idx in results[1:]:
        np.testing.assert_array_equal(dist, results[0][0])
        np.testing.assert_array_equal(idx, results[0][1])
    np.testing.assert_array_equal(ce.lorentz_pairwise(X, Y, num_threads=1), ce.lorentz_pairwise(X, Y, num_threads=2))
    small = Y[:50]
    dist, idx = ce.lorentz_topk(X, small, 50)
    expect, rel = lorentz_tolerance(X, small, 1.0, np.float32)
    check_topk(expect, rel * expect, dist, idx, largest=False)


def test_lorentz_dtypes_and_shapes(rng):
    X32, Y32 = spread_points(rng, 6, 7, np.float32), spread_points(rng, 9, 7, np.float32)
    assert ce.lorentz_pairwise(X32, Y32.astype(np.float64)).dtype == np.float64  # mixed: computed in float64
    np.testing.assert_array_equal(
        ce.lorentz_pairwise(X32.astype(np.float64), Y32.astype(np.float64)),
        ce.lorentz_pairwise(X32, Y32.astype(np.float64)),
    )
    assert ce.lorentz_pairwise(X32[:0], Y32).shape == (0, 9)
    d, i = ce.lorentz_topk(X32[:0], Y32, 2)
    assert d.shape == i.shape == (0, 2)
    np.testing.assert_array_equal(ce.lorentz_pairwise(np.asfortranarray(X32), Y32[::1]), ce.lorentz_pairwise(X32, Y32))
    ints = np.arange(14).reshape(2, 7) - 5
    np.testing.assert_array_equal(ce.lorentz_pairwise(ints, Y32), ce.lorentz_pairwise(ints.astype(np.float32), Y32))
