"""Per-side centring / whitening before GEH (crossembed.linking.preprocess)."""

import numpy as np
import pytest

from crossembed.linking import Center, GEHLinker
from crossembed.linking.preprocess import unit_rows
from experiments.linking_rules import Whiten


def _anisotropic(n=400, d=16, seed=0):
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(d) * 4.0  # a large shared component, like e5's
    return rng.standard_normal((n, d)) + common


def test_center_is_unit_rows_of_centred_unit_rows():
    X = _anisotropic()
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = U - U.mean(axis=0)
    ref = C / np.linalg.norm(C, axis=1, keepdims=True)
    np.testing.assert_allclose(Center().apply(X), ref, atol=1e-6)


def test_center_removes_the_common_direction():
    X = _anisotropic()
    raw = unit_rows(X)
    cen = Center().apply(X)
    # unrelated rows: mean cosine near 1 before, near 0 after
    assert (raw @ raw.T).mean() > 0.8
    assert abs((cen @ cen.T).mean()) < 0.05


def test_whiten_gives_isotropic_covariance():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 8)) * np.array([10, 5, 3, 1, 1, 1, 0.5, 0.2]) + 3.0
    W = Whiten(shrinkage=0.0).apply(X).astype(np.float64)
    evals = np.linalg.eigvalsh(np.cov(W.T))
    assert evals.max() / evals.min() < 2.0  # raw spectrum spans a factor of ~2500


def test_none_is_the_paper_unit_rows():
    X = _anisotropic()
    A, B = X[:200], X[200:]
    seeds = np.stack([np.arange(5), np.arange(5)], axis=1)
    kw = dict(random_state=0, max_iter=2, show_progress_bar=False)
    unit = lambda Y: Y / np.linalg.norm(Y, axis=1, keepdims=True)  # noqa: E731
    # center=None links the unit rows as given: the same fit as on unit rows with no centring at all
    none = GEHLinker(center=None, **kw).link(A, B, seeds)
    pre = GEHLinker(center=None, **kw).link(unit(A), unit(B), seeds)
    np.testing.assert_array_equal(none.links, pre.links)


def test_single_row_and_zero_rows_stay_finite():
    assert np.isfinite(Center().apply(np.ones((1, 4)))).all()
    out = Whiten().apply(np.zeros((3, 4)))
    assert np.isfinite(out).all() and not out.any()


def test_bad_settings_name_the_argument():
    with pytest.raises(ValueError, match="shrinkage"):
        Whiten(shrinkage=1.5)
    with pytest.raises(TypeError, match="center"):
        GEHLinker(center="zscore")


def test_linker_centres_each_side_on_its_own_rows():
    # B = A + a constant offset: the offset breaks raw cosine geometry, centring restores it
    rng = np.random.default_rng(3)
    A = rng.standard_normal((300, 12)).astype(np.float32)
    B = (A @ np.linalg.qr(rng.standard_normal((12, 12)))[0] + 10.0).astype(np.float32)
    seeds = np.stack([np.arange(15), np.arange(15)], axis=1)
    kw = dict(random_state=0, max_iter=8, show_progress_bar=False)
    truth = set(range(15, 300))
    hits = {}
    for mode, center in (("none", None), ("center", Center())):
        links = GEHLinker(center=center, **kw).link(A, B, seeds).links
        hits[mode] = sum(1 for a, b in links.tolist() if a == b and a in truth)
    assert hits["center"] > 150 and hits["center"] >= hits["none"] + 100, hits
