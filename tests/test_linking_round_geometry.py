"""The per-round shortcuts of a GEH fit: each must give what the direct computation gives."""

import numpy as np
import pytest

from _linking_data import linking_problem
from crossembed import kernels
from crossembed.linking import GEHLinker, PoolCandidates, RowSample, candidates
from crossembed.linking._fit import _GRAM_MAX_POOL, FitSetup, FitState, PoolGeometry
from crossembed.linking.candidates import lists_still_serve as _lists_still_serve
from crossembed.linking.preprocess import unit_rows
from crossembed.linking.views import FarthestPointViews, KernelSignatures, farthest_point_sampling


def _unit(n, d, seed):
    return unit_rows(np.random.default_rng(seed).standard_normal((n, d)))


def test_farthest_point_sampling_from_the_gram_matrix_matches_the_vectors():
    X = _unit(300, 20, 0)
    gram = X @ X.T
    rows = np.sort(np.random.default_rng(1).choice(300, size=120, replace=False))
    for start in (0, 7, 119):
        direct = farthest_point_sampling(X[rows], 40, start)
        np.testing.assert_array_equal(farthest_point_sampling(None, 40, start, gram=gram, rows=rows), direct)


def test_kernel_widths_equal_the_median_anchor_distance_of_the_view():
    A, B = _unit(200, 16, 2), _unit(200, 24, 3)
    pool = np.stack([np.arange(0, 150), np.arange(50, 200)], axis=1)
    geo = PoolGeometry(pool, A[pool[:, 0]], A[pool[:, 0]] @ A[pool[:, 0]].T, B[pool[:, 1]] @ B[pool[:, 1]].T)
    view = np.sort(np.random.default_rng(4).choice(150, size=37, replace=False))
    wa, wb = geo.kernel_widths(view)
    assert wa == pytest.approx(kernels.median_anchor_distance(A[pool[view, 0]]), rel=1e-5)
    assert wb == pytest.approx(kernels.median_anchor_distance(B[pool[view, 1]]), rel=1e-5)
    assert geo.kernel_widths(view[:1]) == (1.0, 1.0)  # undefined for one anchor, as in the kernel


def _fit_state(A, B, seeds, signatures=None):
    setup = FitSetup(signatures=KernelSignatures() if signatures is None else signatures)
    return FitState(A=unit_rows(A), B=unit_rows(B), seeds=seeds, rng=np.random.default_rng(0), setup=setup)


def test_signatures_with_the_round_geometry_equal_the_direct_ones():
    A, B, split = linking_problem(400, seed=1)
    fit = _fit_state(A, B, split.truth[:60])
    pool = fit.pool()
    geo = fit.geometry(pool)
    view = fit.view(geo, 30)
    SA, SB = fit.signatures(pool[view], geometry=geo, view=view)
    RA, RB = fit.signatures(pool[view])
    np.testing.assert_allclose(SA, RA, atol=1e-5)
    np.testing.assert_allclose(SB, RB, atol=1e-5)


class PlainSignatures:
    """A signature object of one's own: honoured through its methods (it reads no cosines)."""

    reads_cosines = False

    def __init__(self):
        self.sigmas = []

    def __call__(self, X, anchors, *, sigma=None, num_threads=None):
        self.sigmas.append(sigma)
        return unit_rows(X @ anchors.T)

    def from_cosines(self, cosines, cols, *, sigma, num_threads=None):
        raise AssertionError("reads_cosines is False")


def test_a_signature_object_of_ones_own_is_honoured_through_its_methods():
    A, B, split = linking_problem(300, seed=2)
    plain = PlainSignatures()
    fit = _fit_state(A, B, split.truth[:40], signatures=plain)
    geo = fit.geometry(fit.pool())
    assert fit.view_cosines(geo, [np.arange(10)]) is None  # it reads no cosines: none computed
    SA, _ = fit.signatures(fit.pool()[:10], geometry=geo, view=np.arange(10))
    assert SA.shape == (len(A), 10) and plain.sigmas == list(geo.kernel_widths(np.arange(10)))
    res = GEHLinker(signatures=plain, random_state=0, max_iter=2, show_progress_bar=False).link(A, B, split.seeds)
    assert len(res.links) > 0


def test_large_pools_skip_the_gram_matrix():
    n = _GRAM_MAX_POOL + 1
    A, B = _unit(n, 4, 5), _unit(n, 4, 6)
    seeds = np.stack([np.arange(n), np.arange(n)], axis=1)
    geo = _fit_state(A, B, seeds).geometry(seeds)
    assert geo.gram_a is None and geo.kernel_widths(np.arange(5)) is None


def test_candidate_lists_are_reused_only_for_a_mostly_unchanged_pool():
    old = np.stack([np.arange(100), np.arange(100)], axis=1)
    assert _lists_still_serve(old, old, 0, 1000)
    swapped = old.copy()
    swapped[:9, 1] += 500  # 9% of the pairs changed
    assert _lists_still_serve(swapped, old, 5, 1000)
    swapped[:11, 1] += 500
    assert not _lists_still_serve(swapped, old, 0, 1000)
    grown = np.concatenate([old, old[:11] + 200])  # 11% more anchors
    assert not _lists_still_serve(grown, old, 0, 1000)
    # PoolCandidates(refresh=) moves both bounds
    assert _lists_still_serve(swapped, old, 0, 1000, 0.25) and _lists_still_serve(grown, old, 0, 1000, 0.25)
    assert not _lists_still_serve(swapped, old, 0, 1000, 0.05)
    with pytest.raises(ValueError, match="refresh"):
        PoolCandidates(refresh=1.5)


def test_list_reuse_serves_a_swapped_pool_for_that_many_rounds_but_not_a_grown_one():
    old = np.stack([np.arange(100), np.arange(100)], axis=1)
    swapped = old.copy()
    swapped[:40, 1] += 500  # a round's churn: 40% of the pairs changed, no growth
    grown = np.concatenate([old, old[:11] + 200])
    for reuse in (1, 2):
        assert all(_lists_still_serve(swapped, old, age, 1000, 0.1, reuse) for age in range(reuse))
        assert not _lists_still_serve(swapped, old, reuse, 1000, 0.1, reuse)
        assert not _lists_still_serve(grown, old, 0, 1000, 0.1, reuse)
    assert not _lists_still_serve(swapped, old, 0, 1000, 0.1, 0)


class CountingCandidates(PoolCandidates):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = 0

    def candidate_lists(self, SA, SB, m, *, num_threads=None):
        self.calls += 1
        return super().candidate_lists(SA, SB, m, num_threads=num_threads)


def _list_builds(problem, sample=None, **kw):
    A, B, split = problem
    backend = CountingCandidates(**kw)
    GEHLinker(candidates=backend, sample=sample, random_state=0, max_iter=12, show_progress_bar=False).link(
        A, B, split.seeds
    )
    return backend.calls


def test_a_fit_reuses_the_lists_on_every_row_not_on_a_sample(monkeypatch):
    # a weak pair: the pool keeps swapping 15-60 % of its pairs a round, as real 10k pools do
    problem = linking_problem(900, seed=3, noise=0.5)
    sampled = dict(sample=RowSample(rows=400, near_seeds=False))
    reusing, reusing_sampled = _list_builds(problem), _list_builds(problem, **sampled)
    serve = candidates.lists_still_serve
    monkeypatch.setattr(candidates, "lists_still_serve", lambda *args: serve(*args[:5], 0))  # no reuse
    assert reusing < _list_builds(problem)
    assert reusing_sampled == _list_builds(problem, **sampled)


def test_the_default_final_pass_builds_no_candidate_lists():
    A, B, split = linking_problem(900, seed=3)
    backend = CountingCandidates()
    linker = GEHLinker(candidates=backend, random_state=0, max_iter=4, show_progress_bar=False)
    result = linker.link(A, B, split.seeds)
    calls = [1] * backend.calls
    rounds = [h for h in result.history if "final_pass" not in h]
    assert result.history[-1].get("final_pass") == "decoys"
    assert 1 <= len(calls) <= len(rounds)


def test_fps_views_of_a_huge_pool_sample_their_candidates():
    X = _unit(3000, 8, 7)
    views = FarthestPointViews(max_candidates=500)
    rng = np.random.default_rng(0)
    view = views(X, 15, 50, rng, np.arange(3000))
    assert len(view) == 50 and len(np.unique(view)) == 50 and view.max() < 3000
    # below the cap nothing changes: the same draw as a sampler with no cap
    small = np.arange(400)
    a = FarthestPointViews(max_candidates=500)(X, 15, 50, np.random.default_rng(1), small)
    b = FarthestPointViews(max_candidates=10**6)(X, 15, 50, np.random.default_rng(1), small)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="max_candidates"):
        FarthestPointViews(max_candidates=1)
