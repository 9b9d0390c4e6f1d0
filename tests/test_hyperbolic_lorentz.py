"""Lorentz ops: values against float64 closed forms, gradients at the edges, C++ agreement."""

import math

import numpy as np
import pytest
import torch

from crossembed.hyperbolic import lorentz as L

torch.set_num_threads(1)


def _acosh_distance(x, y, c):
    """Textbook (cancelling) form in float64 numpy: acosh(-c <x,y>_L)/sqrt(c)."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    xt = np.sqrt(1 / c + (x * x).sum(-1))
    yt = np.sqrt(1 / c + (y * y).sum(-1))
    ip = (x * y).sum(-1) - xt * yt
    return np.arccosh(np.maximum(-c * ip, 1.0)) / np.sqrt(c)


@pytest.mark.parametrize("c", [0.1, 1.0, 3.7])
def test_distance_matches_acosh_form(c):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 6, generator=g, dtype=torch.float64) * 2
    y = torch.randn(50, 6, generator=g, dtype=torch.float64) * 2
    d = L.distance(x, y, c).numpy()
    np.testing.assert_allclose(d, _acosh_distance(x.numpy(), y.numpy(), c), rtol=1e-10)
    pw = L.pairwise_distance(x, y, c).numpy()
    np.testing.assert_allclose(pw, _acosh_distance(x.numpy()[:, None], y.numpy()[None], c), rtol=1e-10)
    fast = L.pairwise_distance(x, y, c, stable=False).numpy()
    np.testing.assert_allclose(fast, pw, rtol=1e-7)


def test_origin_distance_is_radius():
    # d(0, x) = asinh(sqrt(c)|x|)/sqrt(c): a closed form independent of the code path
    x = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    o = torch.zeros_like(x)
    for c in (0.5, 2.0):
        assert L.distance(o, x, c).item() == pytest.approx(math.asinh(math.sqrt(c) * 5.0) / math.sqrt(c), rel=1e-12)


def test_small_distances_keep_relative_precision_in_float32():
    x = torch.tensor([[100.0, -50.0, 20.0]], dtype=torch.float32)
    delta = torch.tensor([[1e-3, 0.0, 0.0]], dtype=torch.float32)
    d32 = L.distance(x, x + delta).item()
    d64 = L.distance(x.double(), (x + delta).double()).item()
    assert d32 == pytest.approx(d64, rel=1e-3)
    assert L.distance(x, x).item() == 0.0


def test_expmap_logmap_roundtrip_and_series():
    g = torch.Generator().manual_seed(1)
    for scale in (1e-9, 1e-4, 1e-2, 1.0, 5.0):
        v = torch.randn(20, 5, generator=g, dtype=torch.float64) * scale
        for c in (0.1, 1.0, 10.0):
            w = v[math.sqrt(c) * v.norm(dim=-1) < L._MAX_ARG]  # beyond the clamp expmap0 saturates
            x = L.expmap0(w, c)
            torch.testing.assert_close(L.logmap0(x, c), w, rtol=1e-9, atol=1e-300)
            # the geodesic radius of expmap0(w) is |w|
            torch.testing.assert_close(L.distance(torch.zeros_like(x), x, c), w.norm(dim=-1), rtol=1e-9, atol=1e-12)


def test_expmap_clamp_keeps_float32_finite():
    v = torch.full((2, 4), 1e6, dtype=torch.float32, requires_grad=True)
    x = L.expmap0(v)
    assert torch.isfinite(x).all()
    assert x.norm(dim=-1).max().item() <= 2.0**15 * 1.001
    x.sum().backward()
    assert torch.isfinite(v.grad).all()


def test_inner_of_point_with_itself_is_minus_inverse_curvature():
    x = torch.randn(10, 3, dtype=torch.float64)
    torch.testing.assert_close(L.inner(x, x, 2.5), torch.full((10,), -1 / 2.5, dtype=torch.float64))
    pw = L.pairwise_inner(x, x, 2.5)
    torch.testing.assert_close(torch.diagonal(pw), torch.full((10,), -1 / 2.5, dtype=torch.float64))


def test_half_aperture_values_and_clamp():
    x = torch.tensor([[0.0, 0.0], [0.1, 0.0], [1.0, 0.0], [40.0, 0.0]], dtype=torch.float64)
    w = L.half_aperture(x, 1.0)
    assert w[0].item() == pytest.approx(math.asin(1 - 1e-6))  # origin: widest cone
    assert w[1].item() == pytest.approx(math.asin(1 - 1e-6))  # 2K/|x| = 2 > 1 clamps
    assert w[2].item() == pytest.approx(math.asin(0.2))
    assert w[3].item() == pytest.approx(math.asin(0.2 / 40))


def test_exterior_angle_geometry():
    # y on the geodesic ray from the origin through x (beyond x): angle 0; y on the
    # origin side of x: angle pi; y off to the side: in between
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    beyond = torch.tensor([[3.0, 0.0]], dtype=torch.float64)
    before = torch.tensor([[0.2, 0.0]], dtype=torch.float64)
    side = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    assert L.exterior_angle(x, beyond).item() == pytest.approx(0.0, abs=2e-3)
    assert L.exterior_angle(x, before).item() == pytest.approx(math.pi, abs=2e-3)
    a = L.exterior_angle(x, side).item()
    assert 0.1 < a < math.pi - 0.1


def test_exterior_angle_matches_textbook_formula():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, 4, generator=g, dtype=torch.float64)
    y = torch.randn(30, 4, generator=g, dtype=torch.float64) * 3
    c = 0.7
    xt, yt = L.time_component(x, c), L.time_component(y, c)
    ip = c * ((x * y).sum(-1) - xt * yt)
    ref = torch.acos(((yt + xt * ip) / (x.norm(dim=-1) * torch.sqrt(ip**2 - 1))).clamp(-1, 1))
    torch.testing.assert_close(L.exterior_angle(x, y, c), ref, rtol=1e-8, atol=1e-8)


def test_uncertainty_range_and_monotone():
    r = torch.tensor([0.0, 0.5, 2.0, 50.0], dtype=torch.float64)
    x = torch.stack([r, torch.zeros_like(r)], -1)
    u = L.uncertainty(x)
    assert u[0].item() == pytest.approx(math.log(2))
    assert (u[1:] < u[:-1]).all() and (u > 0).all()


# ----------------------------------------------------------------------------- gradients
def _gradcheck(fn, *inputs):
    return torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_gradcheck_float64_generic_points():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda a, b, k: L.distance(a, b, k), x, y, c)
    assert _gradcheck(lambda a, b, k: L.pairwise_distance(a, b, k), x, y, c)
    assert _gradcheck(lambda a, b, k: L.pairwise_distance(a, b, k, stable=False), x, y, c)
    assert _gradcheck(lambda a, k: L.expmap0(a, k), x, c)
    assert _gradcheck(lambda a, k: L.logmap0(a, k), x, c)
    assert _gradcheck(lambda a, k: L.half_aperture(a * 0.05, k), x, c)  # inside the unclamped range
    assert _gradcheck(lambda a, b, k: L.exterior_angle(a, b, k), x, y, c)
    assert _gradcheck(L.uncertainty, x)


def test_gradcheck_near_origin_uses_series():
    x = (torch.randn(3, 3, dtype=torch.float64) * 1e-5).requires_grad_()
    assert _gradcheck(lambda a: L.expmap0(a, 1.3), x)
    assert _gradcheck(lambda a: L.logmap0(a, 1.3), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_finite_at_extremes(dtype):
    pts = torch.tensor(
        [[0.0, 0.0, 0.0], [1e-20, 0.0, 0.0], [0.05, 0.0, 0.0], [1e4, -1e4, 3e3], [2.0, 1.0, -1.0]], dtype=dtype
    )
    for a_idx in range(len(pts)):
        for b_idx in range(len(pts)):
            x = pts[a_idx : a_idx + 1].clone().requires_grad_()
            y = pts[b_idx : b_idx + 1].clone().requires_grad_()
            c = torch.tensor(1.0, dtype=dtype, requires_grad=True)
            total = (
                L.distance(x, y, c).sum()
                + L.pairwise_distance(x, y, c).sum()
                + L.pairwise_distance(x, y, c, stable=False).sum()
                + L.exterior_angle(x, y, c).sum()
                + L.half_aperture(x, c).sum()
                + L.uncertainty(x).sum()
                + L.expmap0(x * 1e-2, c).sum()
                + L.logmap0(x, c).sum()
            )
            assert torch.isfinite(total), (a_idx, b_idx)
            total.backward()
            for t in (x, y, c):
                assert torch.isfinite(t.grad).all(), (a_idx, b_idx)


# ----------------------------------------------------------------------------- C++ agreement
def _cpp():
    import crossembed

    try:
        crossembed.lorentz_pairwise(np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32))
    except (AttributeError, ImportError) as exc:  # the extension without the Lorentz kernels yet
        pytest.skip(f"C++ Lorentz kernels not built: {exc}")
    return crossembed


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("c", [0.3, 1.0, 4.0])
def test_cpp_lorentz_kernels_agree_with_torch(dtype, c):
    ce = _cpp()
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((37, 9)) * 2).astype(dtype)
    Y = (rng.standard_normal((53, 9)) * 2).astype(dtype)
    Y[3] = X[0]  # an exact duplicate: distance 0
    Y[4] = X[1] + 1e-4  # a near duplicate: the stable form matters
    ref = L.pairwise_distance(torch.from_numpy(X).double(), torch.from_numpy(Y).double(), c).numpy()
    got = ce.lorentz_pairwise(X, Y, curvature=c)
    assert got.dtype == dtype and got.shape == (37, 53)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    dist, idx = ce.lorentz_topk(X, Y, 5, curvature=c)
    order = np.argsort(ref, axis=1, kind="stable")[:, :5]
    np.testing.assert_allclose(dist, np.take_along_axis(ref, idx, 1), rtol=tol, atol=tol)
    np.testing.assert_allclose(dist, np.take_along_axis(ref, order, 1), rtol=tol, atol=tol)
    assert (np.diff(dist, axis=1) >= 0).all()


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_lorentz_class_methods_are_the_functions_bit_for_bit(c):
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    for curvature in (c, torch.tensor(c)):
        m = L.Lorentz(curvature)
        pairs = [
            (m.time_component(x), L.time_component(x, c)),
            (m.inner(x, y), L.inner(x, y, c)),
            (m.pairwise_inner(x, y), L.pairwise_inner(x, y, c)),
            (m.distance(x, y), L.distance(x, y, c)),
            (m.pairwise_distance(x, y), L.pairwise_distance(x, y, c)),
            (m.pairwise_distance(x, y, stable=False), L.pairwise_distance(x, y, c, stable=False)),
            (m.expmap0(x), L.expmap0(x, c)),
            (m.logmap0(x), L.logmap0(x, c)),
            (m.half_aperture(x, k=0.2), L.half_aperture(x, c, k=0.2)),
            (m.exterior_angle(x, y), L.exterior_angle(x, y, c)),
        ]
        for got, want in pairs:
            assert torch.equal(got, want)


def test_lorentz_class_learnable_curvature_and_checks():
    log_c = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    m = L.Lorentz(log_c.exp())
    x = torch.randn(4, 3, dtype=torch.float64)
    m.pairwise_distance(m.expmap0(x), m.expmap0(x + 1)).sum().backward()
    assert log_c.grad is not None and torch.isfinite(log_c.grad)
    assert repr(L.Lorentz(2)) == "Lorentz(curvature=2)" and L.Lorentz(2).curvature == 2.0
    with pytest.raises(ValueError, match="curvature"):
        L.Lorentz(0.0)
    with pytest.raises(TypeError, match="curvature"):
        L.Lorentz("1")
    with pytest.raises(ValueError, match="0-d"):
        L.Lorentz(torch.ones(2))
    from crossembed.hyperbolic.losses import entailment_loss

    with pytest.raises(TypeError, match="Lorentz"):
        entailment_loss(x, x, 1.0, eta=1.0, alpha=0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exterior_angle_has_a_finite_gradient_at_coincident_points(dtype):
    # an UNCHA part equal to its scene: the old formula's gradient was ~1e9-1e10 here
    x = torch.tensor([[0.3, -1.2, 0.5]], dtype=dtype, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    angle = L.exterior_angle(x, y)
    angle.sum().backward()
    assert torch.isfinite(angle).all()
    assert x.grad.abs().max() < 1e3 and y.grad.abs().max() < 1e3
    # away from coincidence the gradient is untouched (the formula above, checked by gradcheck)
    far = torch.tensor([[0.3, -1.2, 0.9]], dtype=dtype)
    assert L.exterior_angle(x.detach(), far).item() != pytest.approx(math.pi / 2)


@pytest.mark.parametrize("stable", [True, False])
def test_distances_far_from_the_origin_do_not_overflow_to_zero(stable):
    # |x| ~ 1e20 in float32: the time components fit, the squared chord does not (it used to give 0)
    x = torch.tensor([[1e20, 0.0]], dtype=torch.float32)
    y = torch.tensor([[0.0, 1e20], [2e20, 0.0]], dtype=torch.float32)
    expected = L.pairwise_distance(x.double(), y.double()).float()
    got = L.pairwise_distance(x, y, stable=stable)
    assert got.dtype == torch.float32
    assert torch.allclose(got[0, 0], expected[0, 0], rtol=1e-6)  # orthogonal: no cancellation either way
    if stable:
        assert torch.allclose(got, expected, rtol=1e-6)
        assert torch.allclose(L.distance(x.expand(2, 2), y), expected[0], rtol=1e-6)
    with pytest.raises(ValueError, match="too far from the origin"):
        L.distance(torch.tensor([[1e200, 0.0]], dtype=torch.float64), torch.tensor([[0.0, 1e200]], dtype=torch.float64))
