"""GEHLinker on small generated problems: recovery, rules, determinism, validation."""

import numpy as np
import pytest

from _linking_data import linking_problem
from crossembed.linking import ExactCandidates, PoolCandidates, RowSample, Schedule
from crossembed.linking.candidates import CellCandidates
from crossembed.linking.geh import GEHLinker
from crossembed.linking.promotion import ValidatedPromotion
from crossembed.linking.protocol import evaluate_links
from crossembed.linking.result import LinkResult
from crossembed.linking.views import farthest_point_sampling
from experiments.linking_rules import AnnCandidates, CappedPromotion, CosineSignatures, PaperPromotion, RandomViews


def candidate_reference(SA, SB, cand_a, cand_b, *, k=5, csls_k=50, exclude_a=None, exclude_b=None, num_threads=None):
    """float64 numpy reference of kernels.csls_mutual_topk_candidates (same arguments and results)."""
    SA, SB = np.asarray(SA, np.float64), np.asarray(SB, np.float64)
    ex_a, ex_b = np.zeros(len(SA), bool), np.zeros(len(SB), bool)
    if exclude_a is not None:
        ex_a[np.asarray(exclude_a, np.int64)] = True
    if exclude_b is not None:
        ex_b[np.asarray(exclude_b, np.int64)] = True

    def side(S_own, S_other, cand, ex_own, ex_other):
        cand = np.asarray(cand, np.int64)
        c = np.maximum(cand, 0)
        valid = (cand >= 0) & ~ex_other[c] & ~ex_own[:, None]
        s = np.einsum("id,imd->im", S_own, S_other[c])
        top = -np.sort(-np.where(valid, s, -np.inf), axis=1)[:, :csls_k]
        n = np.minimum(valid.sum(axis=1), csls_k)
        r = np.where(np.arange(top.shape[1]) < n[:, None], top, 0.0).sum(axis=1) / np.maximum(n, 1)
        return c, s, valid, r

    ca, sa, va, ra = side(SA, SB, cand_a, ex_a, ex_b)
    cb, sb, vb, rb = side(SB, SA, cand_b, ex_b, ex_a)

    def topk_keys(cols, s, valid, r_row, r_col, a_side):
        csls = np.where(valid, 2 * s - r_row[:, None] - r_col[cols], -np.inf)
        keys, score = [], {}
        for i in range(len(cols)):
            idx = [m for m in np.lexsort((cols[i], -csls[i])) if valid[i, m]][:k]
            for m in idx:
                a, b = (i, cols[i, m]) if a_side else (cols[i, m], i)
                keys.append((a, b))
                score[(a, b)] = csls[i, m]
        return set(keys), score

    top_a, score = topk_keys(ca, sa, va, ra, rb, True)
    top_b, _ = topk_keys(cb, sb, vb, rb, ra, False)
    mutual = sorted(top_a & top_b, key=lambda p: (-score[p], p[0], p[1]))
    used_a, used_b, pairs = set(), set(), []
    for a, b in mutual:
        if a not in used_a and b not in used_b:
            used_a.add(a), used_b.add(b), pairs.append((a, b))
    return np.array(pairs, np.int64).reshape(-1, 2), np.array([score[p] for p in pairs], np.float32)


@pytest.fixture(scope="module")
def problem():
    return linking_problem(500, noise=0.05, seed=0)


@pytest.fixture(scope="module")
def validated(problem):
    A, B, split = problem
    return GEHLinker(random_state=0, max_iter=10, show_progress_bar=False).link(A, B, split.seeds)


def _fit(problem, *, min_views=None, **kw):
    A, B, split = problem
    kw.setdefault("random_state", 0)
    kw.setdefault("max_iter", 12)
    if min_views is not None:
        kw["promotion"] = ValidatedPromotion(min_views=min_views, **kw.pop("rule", {}))
    return GEHLinker(show_progress_bar=False, **kw).link(A, B, split.seeds)


def test_validated_recovers_most_links(problem, validated):
    res = validated
    m = evaluate_links(res.links, problem[2].truth)
    assert m["recall"] > 0.85, m
    assert m["precision"] > 0.85, m
    assert isinstance(res, LinkResult)
    assert res.links.dtype == np.int64 and res.links.shape[1] == 2
    assert np.all((res.posterior >= 0) & (res.posterior <= 1))
    assert res.history[-1].get("final_pass")


@pytest.mark.parametrize("promotion", [PaperPromotion(), CappedPromotion()])
def test_paper_and_capped_rules_find_the_overlap(problem, promotion):
    res = _fit(problem, promotion=promotion, max_iter=8)
    m = evaluate_links(res.links, problem[2].truth)
    # without a score filter rows missing on the other side still get partners, so only recall is high
    assert m["recall"] > 0.8, m


def test_links_are_one_to_one_and_exclude_seeds(problem, validated):
    res = validated
    seeds = problem[2].seeds
    assert len(np.unique(res.links[:, 0])) == len(res.links)
    assert len(np.unique(res.links[:, 1])) == len(res.links)
    assert not np.isin(res.links[:, 0], seeds[:, 0]).any()
    assert not np.isin(res.links[:, 1], seeds[:, 1]).any()
    for h in res.history:
        assert {"round", "pool", "views", "anchors", "proposals", "promoted", "threshold", "links"} <= set(h)


def test_paper_rule_promotes_every_proposal_in_round_zero(problem):
    # the failure mode the method description warns of: while the pool has < 50 anchors every view is identical,
    # every proposal gets the same votes, and Otsu cannot separate them
    res = _fit(problem, promotion=PaperPromotion(), max_iter=1)
    h = res.history[0]
    assert h["pool"] == 15 and h["anchors"] == 15
    assert h["promoted"] == h["proposals"] == len(res.links)


def test_capped_rule_limits_growth(problem):
    res = _fit(problem, promotion=CappedPromotion(), max_iter=2)
    for before, h in zip([0] + [r["links"] for r in res.history], res.history):
        assert h["links"] <= before + h["pool"]


def test_deterministic_across_thread_counts(problem):
    a = _fit(problem, max_iter=3, min_views=6, num_threads=1)
    b = _fit(problem, max_iter=3, min_views=6, num_threads=2)
    np.testing.assert_array_equal(a.links, b.links)
    np.testing.assert_array_equal(a.votes, b.votes)
    c = _fit(problem, max_iter=3, min_views=6, random_state=1)
    assert not np.array_equal(a.links, c.links) or len(a.links) == 0


def test_views_side_by_side_give_the_sequential_links(problem, monkeypatch):
    # over the pool lists, two threads run two views at once (one kernel thread each)
    from crossembed.linking import promotion

    calls = []
    run = promotion._propose_views
    monkeypatch.setattr(promotion, "_propose_views", lambda fit, *a: calls.append(fit.num_threads) or run(fit, *a))
    a = _fit(problem, max_iter=3, min_views=6, candidates=PoolCandidates(), num_threads=1)
    b = _fit(problem, max_iter=3, min_views=6, candidates=PoolCandidates(), num_threads=2)
    assert calls and set(calls) == {1, 2}
    assert len(a.links) > 0
    np.testing.assert_array_equal(a.links, b.links)
    np.testing.assert_array_equal(a.votes, b.votes)


@pytest.mark.parametrize(
    "kw", [dict(signatures=CosineSignatures()), dict(views=RandomViews()), dict(rule=dict(posterior=False))]
)
def test_ablations_run(problem, kw):
    res = _fit(problem, max_iter=3, min_views=6, **kw)
    assert evaluate_links(res.links, problem[2].truth)["recall"] > 0.3


def test_ann_candidates_match_the_exact_kernel(problem):
    from crossembed import kernels
    from experiments.linking_rules import AnnProposer

    A, B, split = problem
    anchors = split.seeds
    SA = kernels.anchor_signatures(A, A[anchors[:, 0]])
    SB = kernels.anchor_signatures(B, B[anchors[:, 1]])
    exact, _ = kernels.csls_mutual_topk(SA, SB, k=5, csls_k=20, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1])
    # with every row a candidate the ANN path is exact
    ann, _ = AnnProposer(ann_k=400, num_threads=1)(
        SA, SB, k=5, csls_k=20, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1]
    )
    same = len(set(map(tuple, exact.tolist())) & set(map(tuple, ann.tolist())))
    assert same >= 0.98 * len(exact)
    res = _fit(problem, max_iter=2, min_views=4, candidates=AnnCandidates(), num_threads=1)
    assert len(res.links) > 0


def test_candidate_kernel_matches_the_reference(problem):
    from crossembed import kernels
    from crossembed.linking.proposers import pool_candidate_lists

    A, B, split = problem
    anchors = split.seeds
    SA = kernels.anchor_signatures(A, A[anchors[:, 0]])
    SB = kernels.anchor_signatures(B, B[anchors[:, 1]])
    cand_a, cand_b = pool_candidate_lists(SA, SB, 30)
    np.testing.assert_allclose(
        np.take_along_axis(SA @ SB.T, cand_a, axis=1).min(axis=1),
        np.sort(SA @ SB.T, axis=1)[:, -30],
        rtol=1e-5,
        atol=1e-6,
    )
    cand_a[::7, -3:] = -1  # padding
    kw = dict(k=5, csls_k=20, exclude_a=anchors[:, 0], exclude_b=anchors[:, 1])
    got, got_s = kernels.csls_mutual_topk_candidates(SA, SB, cand_a, cand_b, **kw)
    ref, ref_s = candidate_reference(SA, SB, cand_a, cand_b, **kw)
    assert len(ref) > 50
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got_s, ref_s, rtol=1e-4, atol=1e-5)
    # with every row listed on both sides the candidate path is the exact kernel
    full_a = np.tile(np.arange(len(B)), (len(A), 1))
    full_b = np.tile(np.arange(len(A)), (len(B), 1))
    exact, _ = kernels.csls_mutual_topk(SA, SB, **kw)
    every, _ = kernels.csls_mutual_topk_candidates(SA, SB, full_a, full_b, **kw)
    same = len(set(map(tuple, exact.tolist())) & set(map(tuple, every.tolist())))
    assert same >= 0.99 * len(exact)


@pytest.mark.parametrize("pool_k", [128, 32])
def test_pool_candidates_keep_the_exact_f1(problem, pool_k):
    truth = problem[2].truth
    exact = evaluate_links(_fit(problem, max_iter=10, candidates=ExactCandidates()).links, truth)["f1"]
    pool = evaluate_links(_fit(problem, max_iter=10, candidates=PoolCandidates(k=pool_k)).links, truth)["f1"]
    assert pool > 0.85 and pool >= exact - 0.03, (pool, exact)


def test_pool_candidate_lists_leave_out_the_own_anchor():
    from crossembed.linking.candidates import without_own_anchor

    # rows 1 and 2 are anchors 0 and 1: their own column goes, the rest is re-normalised
    S = np.array([[0.6, 0.8, 0.0], [0.6, 0.0, 0.8], [0.0, 0.6, 0.8]], np.float32)
    out = without_own_anchor(S, np.array([1, 2]))
    np.testing.assert_allclose(out, [[0.6, 0.8, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    assert S[1, 0] == np.float32(0.6)  # input untouched


def _fit_state(A, B, seeds, *, cells):
    """A fit's state with the default signatures and views, for the candidate-list tests."""
    from crossembed.linking._fit import FitSetup, FitState

    return FitState(A=A, B=B, seeds=seeds, rng=np.random.default_rng(1), setup=FitSetup(cells=cells))


@pytest.mark.parametrize("cells", [False, True])
def test_pool_lists_do_not_leak_the_anchor_pairing(cells):
    # two unrelated clouds: no pairing is recoverable, so an anchor's partner may appear in its
    # candidate list only by chance (pool_k / N_B = 3 %). Zeroing the own column alone left a
    # shared hole at that column on both rows, and every anchor listed its partner first.

    rng = np.random.default_rng(0)
    A = rng.standard_normal((2000, 32)).astype(np.float32)
    B = rng.standard_normal((2000, 32)).astype(np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    pool = np.stack([rng.permutation(2000)[:30], rng.permutation(2000)[:30]], axis=1)
    fit = _fit_state(A, B, pool[:15], cells=cells)
    fit.set_links(pool[15:], np.ones(15), np.ones(15, np.int64))
    source = CellCandidates(k=64) if cells else PoolCandidates(k=64)
    lists = source.for_fit(fit, every_row=True)(fit).lists
    listed_a = np.mean([b in lists.cand_a[a] for a, b in pool])
    listed_b = np.mean([a in lists.cand_b[b] for a, b in pool])
    assert listed_a < 0.15 and listed_b < 0.15, (listed_a, listed_b)


def test_cells_fit_with_fewer_rows_than_pool_k(monkeypatch):
    # the cell lists are -1 padded to pool_k; relisted anchor rows must keep that width
    from crossembed.linking import cells

    monkeypatch.setattr(cells, "_CELL_PAIR_SHARE", np.inf)  # cells even where they cover every pair

    rng = np.random.default_rng(0)
    A = rng.standard_normal((40, 16)).astype(np.float32)
    B = A + 0.01 * rng.standard_normal((40, 16)).astype(np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    seeds = np.stack([np.arange(10), np.arange(10)], axis=1)
    GEHLinker(candidates=CellCandidates(), random_state=0, max_iter=3, show_progress_bar=False).link(A, B, seeds)
    fit = _fit_state(A, B, seeds, cells=True)
    lists = CellCandidates(k=64).for_fit(fit, every_row=True)(fit).lists
    assert lists.cand_a.shape == (40, 64) and lists.cand_b.shape == (40, 64)
    # an anchor row lists at most the 40 rows of the other side, the rest is padding
    assert (lists.cand_a[seeds[:, 0], 40:] == -1).all() and (lists.cand_a[seeds[:, 0], :40] >= 0).all()


def test_farthest_point_sampling_spreads_out():
    X = np.array([[1, 0], [0.99, 0.141], [0, 1], [-1, 0]], np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_array_equal(farthest_point_sampling(X, 3, 0), [0, 3, 2])


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(promotion="validated"), "promotion"),
        (dict(promotion=3), "promotion"),
        (dict(stop="best"), "stop"),
        (dict(candidates="pool"), "candidates"),
        (dict(candidates=PoolCandidates), "candidates"),  # the class, not an object
        (dict(sample=20_000), "sample"),
        (dict(schedule=dict(k=5)), "schedule"),
        (dict(views="grid"), "views"),
        (dict(signatures=None), "signatures"),
        (dict(signatures=lambda X, anchors, **kw: X), "signatures"),  # no from_cosines()
        (dict(center="center"), "center"),
    ],
)
def test_bad_objects_are_a_type_error_naming_the_argument(kw, name):
    with pytest.raises(TypeError, match=f"^{name} must be"):
        GEHLinker(**kw)


@pytest.mark.parametrize(
    "build, exc, name",
    [
        (lambda: Schedule(k=0), ValueError, "k"),
        (lambda: Schedule(k=2.5), TypeError, "k"),
        (lambda: Schedule(rho0=1.5), ValueError, "rho0"),
        (lambda: PoolCandidates(k=0), ValueError, "k"),
        (lambda: PoolCandidates(anchors=1), ValueError, "anchors"),
        (lambda: RowSample(rows=1), ValueError, "rows"),
        (lambda: ValidatedPromotion(final_pass="map"), TypeError, "final_pass"),
        (lambda: GEHLinker(max_iter=0), ValueError, "max_iter"),
    ],
)
def test_bad_settings_name_the_argument(build, exc, name):
    with pytest.raises(exc, match=name):
        build()


def test_bad_inputs():
    A = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    B = A[:, :3].copy()
    geh = GEHLinker(show_progress_bar=False)
    with pytest.raises(ValueError, match="at least 2"):
        geh.fit(A, B, np.array([[0, 0]]))
    with pytest.raises(ValueError, match="one-to-one"):
        geh.fit(A, B, np.array([[0, 0], [1, 0]]))
    with pytest.raises(ValueError, match="B index"):
        geh.fit(A, B, np.array([[0, 0], [1, 25]]))
    with pytest.raises(ValueError, match="B must be 2-dimensional"):
        geh.fit(A, B[0], np.array([[0, 0], [1, 1]]))
    with pytest.raises(TypeError, match="A must hold real numbers"):
        geh.fit(A.astype(str), B, np.array([[0, 0], [1, 1]]))


@pytest.mark.parametrize("near_seeds", [True, False])
def test_sampled_rounds_link_every_row_through_the_final_pass(near_seeds):
    A, B, split = linking_problem(3000, alpha=0.6, noise=0.05, seed=4)
    kw = dict(random_state=0, max_iter=15, show_progress_bar=False)
    full = GEHLinker(sample=None, **kw).link(A, B, split.seeds)
    sampled = GEHLinker(sample=RowSample(rows=800, near_seeds=near_seeds), **kw).link(A, B, split.seeds)
    f_full, f_sampled = evaluate_links(full.links, split.truth), evaluate_links(sampled.links, split.truth)
    assert f_full["f1"] > 0.9 and f_sampled["f1"] > f_full["f1"] - 0.03, (f_full, f_sampled)
    # the rounds saw 800 rows a side, the links cover far more
    assert len(np.unique(sampled.links[:, 0])) > 1200
    assert sampled.history[-1]["final_pass"] == "decoys"
    assert all(h["pool"] <= 800 for h in sampled.history[:-1])


def test_sampling_applies_only_to_rules_whose_final_pass_links_every_row():
    A, B, split = linking_problem(900, seed=5)
    kw = dict(random_state=0, max_iter=4, show_progress_bar=False)
    for rule in (PaperPromotion(), ValidatedPromotion(final_pass=None)):
        few = GEHLinker(promotion=rule, sample=RowSample(rows=100), **kw).link(A, B, split.seeds)
        every = GEHLinker(promotion=rule, sample=None, **kw).link(A, B, split.seeds)
        np.testing.assert_array_equal(few.links, every.links)
    # a sample as large as a side is no sample: the same fit as none
    big = GEHLinker(sample=RowSample(rows=10_000), **kw).link(A, B, split.seeds)
    none = GEHLinker(sample=None, **kw).link(A, B, split.seeds)
    np.testing.assert_array_equal(big.links, none.links)
    with pytest.raises(ValueError, match="rows"):
        RowSample(rows=1)


def test_seed_sample_holds_the_rows_nearest_the_seeds():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    keep = np.array([3, 17])
    rows = RowSample(rows=10).draw(X, keep, rng)
    assert np.isin(keep, rows).all() and len(rows) == 10 and (np.diff(rows) > 0).all()
    near = np.max(X @ X[keep].T, axis=1)
    outside = np.setdiff1d(np.arange(50), rows)
    assert near[np.setdiff1d(rows, keep)].min() >= near[outside].max()
    assert RowSample(rows=50).draw(X, keep, rng) is None  # the whole side: no sample


def test_seed_sampled_fit_links_rows_outside_its_sample():
    A, B, split = linking_problem(3000, alpha=0.6, noise=0.05, seed=4)
    kw = dict(random_state=0, max_iter=15, show_progress_bar=False, sample=RowSample(rows=800))
    res = GEHLinker(**kw).link(A, B, split.seeds)
    assert GEHLinker().sample.near_seeds and GEHLinker().sample.rows == 20_000
    assert evaluate_links(res.links, split.truth)["f1"] > 0.85
    assert len(np.unique(res.links[:, 0])) > 1200


def test_round_cosines_give_the_per_view_signature_links(monkeypatch):
    from crossembed.linking import _fit

    A, B, split = linking_problem(1500, alpha=0.5, noise=0.05, seed=6)
    kw = dict(random_state=0, max_iter=8, show_progress_bar=False)
    shared = GEHLinker(**kw).link(A, B, split.seeds)
    calls = []
    monkeypatch.setattr(_fit, "_COSINES_MAX", 0)  # every view computes its own signatures again
    real = _fit.kernels.anchor_signatures
    monkeypatch.setattr(_fit.kernels, "anchor_signatures", lambda *a, **k: calls.append(1) or real(*a, **k))
    per_view = GEHLinker(**kw).link(A, B, split.seeds)
    assert len(calls) > 40  # the per-view path really ran
    a, b = {tuple(p) for p in shared.links.tolist()}, {tuple(p) for p in per_view.links.tolist()}
    assert len(a & b) >= 0.98 * max(len(a), len(b))
    f_shared, f_view = evaluate_links(shared.links, split.truth), evaluate_links(per_view.links, split.truth)
    assert f_shared["f1"] > 0.9 and abs(f_shared["f1"] - f_view["f1"]) < 0.01


def test_round_cosines_only_for_signatures_that_read_them():
    from crossembed.linking.preprocess import unit_rows

    A, B, split = linking_problem(300, seed=1)
    A, B = unit_rows(A), unit_rows(B)  # as a fit holds them
    geh = GEHLinker(signatures=CosineSignatures(), random_state=0, show_progress_bar=False)
    fit = geh._state(A, B, split.seeds, np.random.default_rng(0))
    geo = fit.geometry(fit.pool())
    assert fit.view_cosines(geo, [np.arange(3)]) is None
    fit = GEHLinker(random_state=0)._state(A, B, split.seeds, np.random.default_rng(0))
    cos = fit.view_cosines(fit.geometry(fit.pool()), [np.array([0, 2]), np.array([2, 5])])
    np.testing.assert_array_equal(cos.cols, [0, 2, 5])
    assert cos.a.shape == (len(A), 3) and cos.b.shape == (len(B), 3)
