"""Edge inputs that used to give silent wrong answers or unclear errors (issue 12, item 7)."""

import math

import numpy as np
import pytest

import crossembed as ce
from crossembed import reference as ref


# --------------------------------------------------------------------------- anchor signatures
@pytest.mark.parametrize(
    "rows",
    [
        np.full((2, 4), 1e-42),  # subnormal entries
        np.array([[3e38, 3e38, -3e38, 1.0], [-3e38, 1e-45, 2e38, 0.0]]),  # |x| above float max
        np.array([[1e-30, 0, 0, 2e-30], [1e30, 1e30, 0, 1.0]]),
        np.zeros((1, 4)),
    ],
)
def test_anchor_signatures_finite_and_right_at_extreme_scales(rows):
    rng = np.random.default_rng(0)
    anchors = rng.normal(size=(21, 4)).astype(np.float32)
    X = rows.astype(np.float32)
    got = ce.anchor_signatures(X, anchors)
    assert np.isfinite(got).all()
    expect = ref.anchor_signatures(X, anchors, sigma=ce.kernels.median_anchor_distance(anchors))
    np.testing.assert_allclose(got, expect, atol=2e-6)
    # extreme anchors are just directions too
    got = ce.anchor_signatures(anchors, np.concatenate([X, anchors[:3]]))
    assert np.isfinite(got).all()


@pytest.mark.parametrize("sigma", [1e-10, 1e-30, 1e-40, 1e-300])
def test_anchor_signatures_tiny_sigma_is_one_hot(sigma):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 8)).astype(np.float32)
    anchors = rng.normal(size=(19, 8)).astype(np.float32)  # 19: vector body and scalar tail
    got = ce.anchor_signatures(X, anchors, sigma=sigma)
    assert np.isfinite(got).all()
    expect = ref.anchor_signatures(X, anchors, sigma=sigma)
    np.testing.assert_allclose(got, expect, atol=1e-6)
    assert (got.max(axis=1) == 1.0).all()


def test_median_anchor_distance_extreme_anchors():
    a = np.array([[3e38, 3e38], [1e-42, -1e-42], [1.0, 0.0]], np.float32)
    assert ce.kernels.median_anchor_distance(a) == pytest.approx(ref.median_anchor_distance(a), rel=1e-6)


# --------------------------------------------------------------------------- otsu
@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e-305, 1e-320, 1.4e307])
@pytest.mark.parametrize("sign", [1, -1])
def test_otsu_threshold_is_scale_free(scale, sign):
    rng = np.random.default_rng(2)
    v = sign * np.concatenate([rng.normal(0, 1, 70), rng.normal(5, 1, 30), rng.normal(9, 0.5, 10)])
    base = ce.kernels.otsu_threshold(v)
    rtol = 1e-12 if abs(scale) > 1e-300 else 1e-6  # subnormals carry fewer digits
    assert ce.kernels.otsu_threshold(v * scale) == pytest.approx(base * scale, rel=rtol)
    assert ref.otsu_threshold(v * scale) == pytest.approx(base * scale, rel=rtol)
    assert ce.kernels.otsu_threshold(v * scale) == ref.otsu_threshold(v * scale)


def test_otsu_threshold_on_subnormals_is_exact():
    """0, 1e-310, 2e-310, 5e-310 are 0, m, 2m, 5m units of 2**-1074: 2e-310 starts bin 40 of 100, so the
    threshold is the upper edge of that bin, 41/100 of 5e-310, rounded once (not via a subnormal bin width)."""
    from fractions import Fraction

    v = np.array([0.0, 1e-310, 2e-310, 5e-310])
    exact = float(Fraction(5e-310) * 41 / 100)
    assert ce.kernels.otsu_threshold(v) == exact == ref.otsu_threshold(v)
    for e in (60, 600, 1000):  # thresholds that are normal numbers, divided back: one rounding
        assert ce.kernels.otsu_threshold(v * 2.0**e) / 2.0**e == exact
    v = np.array([0.0, 1e-321])  # 202 units: a width of 2.02 units was rounded to 2 (1% off per bin)
    assert ce.kernels.otsu_threshold(v, bins=3) == float(Fraction(1e-321) / 3) == ref.otsu_threshold(v, bins=3)


def test_otsu_threshold_full_double_range():
    v = np.array([-1.7e308, -1e308, 1e308, 1.7e308])
    t = ce.kernels.otsu_threshold(v)
    assert math.isfinite(t) and -1e308 <= t <= 1e308
    assert t == ref.otsu_threshold(v)


# --------------------------------------------------------------------------- votes and promotion
def test_vote_ids_that_would_alias_are_rejected():
    t = ce.kernels.VoteTable()
    t.add([[1, 2]])
    with pytest.raises(ValueError, match="pairs"):
        t.votes([[1 + 2**32, 2]])  # its key would be (1 << 32 | 2)'s neighbour: aliasing
    with pytest.raises(ValueError, match="pairs"):
        t.votes([[1, 2 + 2**32]])
    with pytest.raises(ValueError, match="pairs"):
        t.add([[2**32, 0]])
    assert list(t.votes([[1, 2], [2, 1]])) == [1, 0]
    assert t.votes(np.zeros((0, 2), np.int64)).shape == (0,)
    from crossembed import _core

    with pytest.raises(ValueError):
        _core.VoteTable().votes(np.array([[2**33, 0]], np.int64))


@pytest.mark.parametrize("threshold", [float("nan"), np.float32("nan"), None, "0.5", True])
def test_promote_threshold_must_be_a_number(threshold):
    t = ce.kernels.VoteTable()
    with pytest.raises((ValueError, TypeError), match="threshold"):
        t.promote([[1, 2]], [0.5], threshold=threshold)
    with pytest.raises((ValueError, TypeError), match="threshold"):
        ce.kernels.greedy_one_to_one([[1, 2]], [0.5], threshold=threshold)


@pytest.mark.parametrize("bad", [[1.7], [np.nan], np.array([2.0]), [-1]])
def test_float_and_negative_exclusions_are_rejected(bad):
    with pytest.raises((ValueError, TypeError), match="exclude_a"):
        ce.kernels.greedy_one_to_one([[1, 2]], [0.5], exclude_a=bad)
    with pytest.raises((ValueError, TypeError), match="exclude_b"):
        ce.kernels.VoteTable().promote([[1, 2]], [0.5], threshold=0.0, exclude_b=bad)


def test_integer_exclusions_still_work():
    got = ce.kernels.greedy_one_to_one([[1, 2], [3, 4]], [0.9, 0.5], exclude_a=np.array([1], np.uint8), exclude_b=[])
    assert got.tolist() == [[3, 4]]


# --------------------------------------------------------------------------- linking and distributed
def test_evaluate_links_counts_a_duplicated_link_once():
    from crossembed.linking import evaluate_links

    res = evaluate_links([[0, 0], [0, 0]], [[0, 0], [1, 1]])
    assert res["recall"] == 0.5 and res["precision"] == 1.0 and res["correct"] == 1
    # huge ids: no key arithmetic that could overflow and alias
    res = evaluate_links([[2**40, 2**40 + 1]], [[2**40, 2**40 + 1], [0, 2**41]])
    assert res["correct"] == 1


@pytest.mark.parametrize("bad", [[np.nan], [-1], [1.5], [10**6]])
def test_sharded_csls_rejects_bad_exclusions(bad):
    from crossembed.distributed import sharded_csls_mutual_topk

    SA = np.random.default_rng(3).random((6, 3))
    with pytest.raises((ValueError, TypeError), match="exclude_a"):
        sharded_csls_mutual_topk(None, SA, SA, exclude_a=bad)
    with pytest.raises((ValueError, TypeError), match="exclude_b"):
        sharded_csls_mutual_topk(None, SA, SA, exclude_b=bad)
    bad_sa = SA.copy()
    bad_sa[0, 0] = np.nan
    with pytest.raises(ValueError, match="SA"):
        sharded_csls_mutual_topk(None, bad_sa, SA)


# --------------------------------------------------------------------------- torch Lorentz ops
def test_torch_maps_at_huge_norms():
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    for dt in (torch.float32, torch.float64):
        v = torch.tensor([[1e20, 0.0, 0.0], [3e38, 3e38, 0.0], [0.0, 0.0, 0.0]], dtype=dt)
        e = L.expmap0(v)
        assert torch.isfinite(e).all()
        assert float(e[0, 0]) == pytest.approx(2.0**15, rel=1e-5)  # on the clamp, not 0
        lg = L.logmap0(v)
        assert torch.isfinite(lg).all()
        assert float(lg[0, 0]) == pytest.approx(math.asinh(1e20), rel=1e-6)
        assert float(lg[1].norm()) == pytest.approx(math.log(2 * 3e38 * math.sqrt(2)), rel=1e-5)
        assert (lg[2] == 0).all() and (e[2] == 0).all()
        x = torch.tensor([[1e20, 1.0], [3e38, -3e38], [1.0, 2.0]], dtype=dt)
        y = torch.tensor([[2e20, 5.0], [3e38, 3e38], [2.0, 2.0]], dtype=dt)
        ang = L.exterior_angle(x, y)
        assert torch.isfinite(ang).all() and ang.dtype == dt
    # nothing changes for ordinary inputs, and gradients stay finite at the origin
    v = torch.randn(5, 4, dtype=torch.float64)
    np.testing.assert_allclose(L.logmap0(L.expmap0(v)).numpy(), v.numpy(), rtol=1e-10)
    z = torch.zeros(2, 3, requires_grad=True)
    (L.expmap0(z).sum() + L.logmap0(z).sum()).backward()
    assert torch.isfinite(z.grad).all()


def test_time_component_does_not_overflow_when_representable():
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    assert float(L.time_component(torch.full((1, 4), 1e20))[0]) == pytest.approx(2e20, rel=1e-6)
    assert float(L.time_component(torch.full((1, 4), 1e200, dtype=torch.float64))[0]) == pytest.approx(2e200, rel=1e-14)
    assert float(L.time_component(torch.tensor([[3e38, 0.0]]), 0.5)[0]) == pytest.approx(3e38, rel=1e-6)
    for x in (torch.full((1, 4), 3e38), torch.full((1, 2), 1.7e308, dtype=torch.float64)):
        with pytest.raises(ValueError, match="time component"):
            L.time_component(x)
    x = torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    xt = L.time_component(x, 0.25)
    assert xt.tolist() == pytest.approx([2.0, math.sqrt(29.0)], rel=1e-15)
    xt.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0], [3 / math.sqrt(29), 4 / math.sqrt(29)]], rtol=1e-14)


@pytest.mark.parametrize("c", [0.0, -1.0, float("nan"), float("inf")])
def test_torch_nonpositive_curvature_raises(c):
    torch = pytest.importorskip("torch")
    from crossembed.hyperbolic import lorentz as L

    x = torch.ones(2, 3)
    for f in (
        lambda cc: L.distance(x, x, cc),
        lambda cc: L.pairwise_distance(x, x, cc),
        lambda cc: L.expmap0(x, cc),
        lambda cc: L.exterior_angle(x, x + 1, cc),
    ):
        with pytest.raises(ValueError, match="curvature"):
            f(c)
        if math.isfinite(c):
            with pytest.raises(ValueError, match="curvature"):
                f(torch.tensor(c))


# --------------------------------------------------------------------------- messages name the argument
def test_messages_name_the_argument():
    A = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="num_threads"):
        ce.lorentz_pairwise(A, A, num_threads=2**31)
    with pytest.raises(ValueError, match="num_threads"):
        ce.probit_scores(A, A, A, A, num_threads=2**40)
    with pytest.raises(ValueError, match="^X must be a rectangular"):
        ce.lorentz_pairwise([[1, 2], [3]], A)
    with pytest.raises(ValueError, match="^pairs must be a rectangular"):
        ce.kernels.greedy_one_to_one([[1, 2], [3]], [0.5, 1.0])
    with pytest.raises(ValueError, match="^candidates must be a rectangular"):
        ce.probit_topk(A, A, A, A, 1, candidates=[[0, 1], [2]])
    with pytest.raises(TypeError, match="^Y must be an array, got None"):
        ce.lorentz_pairwise(A, None)
    with pytest.raises(TypeError, match="^pairs must be an integer array, got None"):
        ce.kernels.VoteTable().votes(None)


@pytest.mark.parametrize("max_pairs,exc", [(-1, ValueError), ("x", TypeError), (1.5, TypeError), (True, TypeError)])
def test_bootstrap_procrustes_max_pairs_is_checked(max_pairs, exc):
    from crossembed.linking.baselines import bootstrap_procrustes_link

    X = np.random.default_rng(5).normal(size=(20, 4))
    seeds = np.stack([np.arange(5), np.arange(5)], axis=1)
    with pytest.raises(exc, match="^max_pairs"):
        bootstrap_procrustes_link(X, X, seeds, max_pairs=max_pairs)
    assert len(bootstrap_procrustes_link(X, X, seeds, max_pairs=2**70, n_iter=1)) > 0  # more than there are: all
