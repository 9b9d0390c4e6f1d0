"""Lorentz distances against mpmath (issue 12, item 2).

The C++ kernel (float32 and float64), the long-double numpy reference and the
torch ``distance`` must all be right for every input: radii from 1e-6 to 3e4,
random directions, nearly parallel points at different radii (where
``|x-y|^2 - (x_t-y_t)^2`` evaluated directly cancels to 0), exactly equal
points (0) and nearly antipodal ones. The expected values are computed with
80 significant digits from the very floats the implementations see.
"""

import mpmath
import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref

mpmath.mp.dps = 80


def mp_distance(x, y, c):
    c = mpmath.mpf(float(c))
    xs = [mpmath.mpf(float(v)) for v in x]
    ys = [mpmath.mpf(float(v)) for v in y]
    xt = mpmath.sqrt(1 / c + sum(v * v for v in xs))
    yt = mpmath.sqrt(1 / c + sum(v * v for v in ys))
    q = sum((a - b) ** 2 for a, b in zip(xs, ys)) - (xt - yt) ** 2
    q = max(q, mpmath.mpf(0))
    return float(2 / mpmath.sqrt(c) * mpmath.asinh(mpmath.sqrt(c * q) / 2))


def float32_conditioning(x, y, c):
    """``min(|x-y|^2, 2 sqrt(|x||y| Q_tan)) / q``: how much float32 rounding of the two forms of
    the tangential part ``Q_tan`` (see hyperbolic/lorentz.py ``_chord_sq``) is amplified."""
    c = mpmath.mpf(float(c))
    xs = [mpmath.mpf(float(v)) for v in x]
    ys = [mpmath.mpf(float(v)) for v in y]
    rx, ry = mpmath.sqrt(sum(v * v for v in xs)), mpmath.sqrt(sum(v * v for v in ys))
    xt, yt = mpmath.sqrt(1 / c + rx * rx), mpmath.sqrt(1 / c + ry * ry)
    sq = sum((a - b) ** 2 for a, b in zip(xs, ys))
    q = sq - (xt - yt) ** 2
    if q <= 0:
        return 0.0
    q_tan = max(sq - (rx - ry) ** 2, mpmath.mpf(0))
    return float(min(sq, 2 * mpmath.sqrt(rx * ry * q_tan)) / q)


def mp_matrix(X, Y, c):
    return np.array([[mp_distance(x, y, c) for y in Y] for x in X])


def hard_pairs(rng, dim, n):
    """Rows of X and Y (paired: X[i] vs Y[i]) covering the difficult geometries."""
    xs, ys = [], []
    for t in range(n):
        u = rng.standard_normal(dim)
        u /= np.linalg.norm(u)
        r = 10.0 ** rng.uniform(-6, np.log10(3e4))
        kind = t % 6
        if kind == 0:  # one direction, different radii
            s = 10.0 ** rng.uniform(-6, np.log10(3e4))
            x, y = r * u, s * u
        elif kind == 1:  # nearly one direction, radii a factor up to 10 apart
            w = rng.standard_normal(dim)
            x, y = r * u, r * 10.0 ** rng.uniform(-1, 1) * (u + 10.0 ** rng.uniform(-7, -1) * w)
        elif kind == 2:  # nearby points (tiny displacement)
            x = r * u
            y = x + r * 10.0 ** rng.uniform(-6, -1) * rng.standard_normal(dim)
        elif kind == 3:  # exactly equal
            x = y = r * u
        elif kind == 4:  # nearly antipodal
            x, y = r * u, -(10.0 ** rng.uniform(-6, np.log10(3e4))) * (u + 1e-4 * rng.standard_normal(dim))
        else:  # random directions and radii
            v = rng.standard_normal(dim)
            x, y = r * u, 10.0 ** rng.uniform(-6, np.log10(3e4)) * v / np.linalg.norm(v)
        xs.append(x)
        ys.append(y)
    return np.array(xs), np.array(ys)


@pytest.mark.parametrize("dim", [2, 7, 33])
@pytest.mark.parametrize("curvature", [0.3, 1.0, 4.0])
def test_lorentz_all_implementations_match_mpmath(dim, curvature):
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    rng = np.random.default_rng(dim * 100 + int(curvature * 10))
    X, Y = hard_pairs(rng, dim, 60)
    for dtype, rtol in ((np.float64, 1e-11), (np.float32, 2e-5)):
        Xd, Yd = X.astype(dtype), Y.astype(dtype)
        expect = np.array([mp_distance(x, y, curvature) for x, y in zip(Xd, Yd)])
        got = {
            "kernel": np.diagonal(ce.lorentz_pairwise(Xd, Yd, curvature=curvature)).astype(np.float64),
            "reference": np.diagonal(ref.lorentz_pairwise(Xd, Yd, curvature=curvature)),
            "torch": L.distance(torch.from_numpy(Xd), torch.from_numpy(Yd), curvature).numpy().astype(np.float64),
        }
        # The kernel computes in double internally and the reference in long double:
        # plain relative tolerances. torch float32 works in float32: its bound is
        # float32 rounding of the better form of Q_tan, amplified by the conditioning.
        cond = np.array([float32_conditioning(x, y, curvature) for x, y in zip(Xd, Yd)])
        tol = {
            "kernel": rtol,
            "reference": 1e-13,
            "torch": rtol if dtype == np.float64 else 1e-5 + 16 * 2.0**-24 * cond,
        }
        for name, val in got.items():
            bad = ~(np.abs(val - expect) <= tol[name] * expect + 1e-300)
            assert not bad.any(), (
                f"{name} {dtype.__name__}: pair {np.flatnonzero(bad)[0]} x={Xd[bad][0]!r} y={Yd[bad][0]!r}: "
                f"got {val[bad][0]!r}, expected {expect[bad][0]!r}"
            )
        equal = np.all(Xd == Yd, axis=1)
        for val in got.values():
            assert (val[equal] == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_issue_example_far_out_along_one_ray(dtype):
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    for r in (1e3, 1e4, 3e4) + ((1e8,) if dtype == np.float64 else ()):
        X, Y = np.array([[r, 0]], dtype), np.array([[2 * r, 0]], dtype)
        expect = mp_distance(X[0], Y[0], 1.0)
        assert expect == pytest.approx(np.log(2), rel=1e-6)
        assert float(ce.lorentz_pairwise(X, Y)[0, 0]) == pytest.approx(expect, rel=1e-6)
        assert float(ce.lorentz_topk(X, Y, 1)[0][0, 0]) == pytest.approx(expect, rel=1e-6)
        assert float(ref.lorentz_pairwise(X, Y)[0, 0]) == pytest.approx(expect, rel=1e-12)
        assert float(L.distance(torch.from_numpy(X), torch.from_numpy(Y))[0]) == pytest.approx(expect, rel=1e-5)
        assert float(L.pairwise_distance(torch.from_numpy(X), torch.from_numpy(Y))[0, 0]) == pytest.approx(
            expect, rel=1e-5
        )


def test_dense_matrix_of_hard_points_matches_mpmath():
    # the tiled kernel with the fast (Gram) path and the exact path mixed in one matrix
    rng = np.random.default_rng(7)
    X, Y = hard_pairs(rng, 5, 24)
    P = np.concatenate([X, Y])
    for dtype, rtol in ((np.float64, 1e-11), (np.float32, 2e-5)):
        Pd = P.astype(dtype)
        expect = mp_matrix(Pd, Pd, 1.0)
        got = ce.lorentz_pairwise(Pd, Pd).astype(np.float64)
        np.testing.assert_allclose(got, expect, rtol=rtol, atol=0)
        assert (np.diagonal(got) == 0).all()
