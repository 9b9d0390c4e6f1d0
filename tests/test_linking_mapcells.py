"""The map pass at scale (crossembed.linking.mapcells): B-space cells, streamed lists, mutual CSLS best."""

import numpy as np
import pytest

from _cell_lists import best_sharing
from _linking_data import linking_problem
from crossembed import kernels
from crossembed.linking import (
    Center,
    GEHLinker,
    MapPass,
    RowSample,
    ValidatedPromotion,
    evaluate_links,
    mapcells,
    refine,
)
from crossembed.linking.candidates import CellCandidates
from crossembed.linking.mapcells import CellIndex, _keys, _unkey, cell_lists, mapped_rows, mutual_best
from crossembed.linking.refine import map_links, ridge_map_rows


def _integer_rows(rng, n, d):
    """Small-integer features: every dot product is exact in float32, whatever the kernel's order."""
    return rng.integers(-3, 4, size=(n, d)).astype(np.float32)


def test_keys_order_by_score_then_lower_row_and_round_trip():
    scores = np.array([[0.5, -0.25, 0.5, -np.inf, 0.0, -0.0, 3.0]], np.float32)
    rows = np.array([[7, 2, 3, 9, 4, 5, 1]])
    keys = _keys(scores, rows)
    want = np.lexsort((rows[0], -scores[0].astype(np.float64)))
    assert [rows[0][i] for i in np.argsort(-keys[0], kind="stable")][:3] == [1, 3, 7]
    assert list(np.argsort(-keys[0], kind="stable"))[:5] == list(want)[:5]
    back_scores, back_rows = _unkey(keys)
    np.testing.assert_array_equal(back_rows, rows)
    np.testing.assert_array_equal(back_scores, scores)


def _brute_force(FA, B, probes, cells_of_b, m):
    S = FA.astype(np.float64) @ B.astype(np.float64).T
    same = probes[:, :, None, None] == cells_of_b[None, None, :, :]
    share = (same & (cells_of_b >= 0)[None, None]).any(axis=(1, 3))
    return best_sharing(S, share, m), best_sharing(S.T, share.T, m)


@pytest.mark.parametrize(
    "n_a,n_b,d,per,r,m,copies,margin",
    [
        (120, 90, 9, 10, 3, 6, 1, 0.0),
        (40, 70, 5, 20, 1, 30, 1, 0.0),
        (3, 50, 4, 7, 2, 4, 1, 0.0),
        (120, 90, 9, 10, 3, 6, 3, np.inf),  # every B row in 3 cells: most pairs scored 2-3 times
        (80, 150, 6, 8, 4, 5, 2, 0.1),
        (60, 200, 5, 10, 2, 40, 3, 0.2),  # lists longer than some cells
    ],
)
def test_cell_lists_equal_the_float64_brute_force(n_a, n_b, d, per, r, m, copies, margin):
    rng = np.random.default_rng(n_a)
    FA, B = _integer_rows(rng, n_a, d), _integer_rows(rng, n_b, d)
    index = CellIndex(B, np.array([0, 5]), rows_per_centre=per, n_rows=max(n_a, n_b), copies=copies, margin=margin)
    assert (index.cells_of_b[:, 1:] >= 0).any() == (copies > 1)
    probes = index.nearest(FA, r)
    probes[1] = -1  # a row in no cell (a seed)
    cand_a, dots_a, cand_b, dots_b, own_b = cell_lists(FA, B, probes, index, m)
    want_a, want_b = _brute_force(FA, B, probes, index.cells_of_b, m)
    np.testing.assert_array_equal(cand_a, want_a)  # each pair once, however many cells score it
    np.testing.assert_array_equal(cand_b, want_b)
    assert (cand_a[1] == -1).all() and (cand_b[[0, 5]] == -1).all()
    listed = cand_a >= 0
    np.testing.assert_array_equal(dots_a[listed], (FA[np.nonzero(listed)[0]] * B[cand_a[listed]]).sum(1))
    assert np.isneginf(dots_a[~listed]).all() and np.isneginf(dots_b[cand_b < 0]).all()
    # the hubness values: each B row's over the A rows probing its nearest cell only
    S = FA.astype(np.float64) @ B.astype(np.float64).T
    nearest = (probes[:, :, None] == index.cells_of_b[None, :, 0]).any(axis=1) & (index.cells_of_b[:, 0] >= 0)
    for j in range(n_b):
        want = np.sort(S[nearest[:, j], j])[::-1][:m]
        np.testing.assert_array_equal(own_b[j, : len(want)], want.astype(np.float32))
        assert np.isneginf(own_b[j, len(want) :]).all()
    if copies == 1:
        np.testing.assert_array_equal(own_b, dots_b)


def test_b_rows_sit_in_their_next_cells_within_the_margin():
    rng = np.random.default_rng(4)
    B = rng.normal(size=(600, 12)).astype(np.float32)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    one = CellIndex(B, np.array([7]), rows_per_centre=20, n_rows=600)
    every = CellIndex(B, np.array([7]), rows_per_centre=20, n_rows=600, copies=3, margin=np.inf)
    some = CellIndex(B, np.array([7]), rows_per_centre=20, n_rows=600, copies=3, margin=0.05)
    near = one.nearest(B, 3)
    assert one.cells_of_b.shape == (600, 1) and every.cells_of_b.shape == (600, 3)
    kept = np.arange(600) != 7
    np.testing.assert_array_equal(every.cells_of_b[kept], near[kept])
    np.testing.assert_array_equal(some.cells_of_b[:, 0], one.cells_of_b[:, 0])  # the nearest cell always
    assert (every.cells_of_b[7] == -1).all() and (some.cells_of_b[7] == -1).all()
    cos = np.take_along_axis(B @ one.projected.T, near, axis=1)  # 12 dimensions: no projection
    within = cos >= cos[:, :1] - 0.05
    np.testing.assert_array_equal(some.cells_of_b[kept] >= 0, within[kept])
    assert 0 < (some.cells_of_b[:, 1] >= 0).mean() < 1


def test_cell_index_starts_at_evenly_spaced_rows_of_b_and_the_nearest_are_best_first(monkeypatch):
    rng = np.random.default_rng(1)
    B = rng.normal(size=(1000, 8)).astype(np.float32)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    monkeypatch.setattr(mapcells, "_LLOYD_ITERATIONS", 0)  # untrained: the centres are the starting rows
    index = CellIndex(B, np.array([0, 999]), rows_per_centre=100, n_rows=2_000)
    assert index.n_cells == 20 and index.projection is None  # 8 dimensions: no projection
    start = np.flatnonzero(np.isin(np.arange(1000), [0, 999], invert=True))[np.linspace(0, 997, 20).astype(int)]
    np.testing.assert_allclose(index.projected, B[start], atol=1e-6)
    assert index.cells_of_b[0, 0] == -1 and index.cells_of_b[999, 0] == -1
    X = rng.normal(size=(50, 8)).astype(np.float32)
    got = index.nearest(X, 3)
    S = X.astype(np.float64) @ index.projected.astype(np.float64).T
    np.testing.assert_array_equal(got, np.stack([np.lexsort((np.arange(20), -row))[:3] for row in S]))


def _clustered_rows(rng, n, d):
    """Unit rows from 20 clusters of very different sizes and spreads in 16 dimensions, embedded in
    ``d``, stored cluster by cluster."""
    sizes = rng.pareto(1.0, 20) + 1
    sizes = (sizes / sizes.sum() * n).astype(int) + 5
    spreads = rng.uniform(0.05, 0.6, 20)
    parts = [c + s * rng.normal(size=(k, 16)) for c, s, k in zip(rng.normal(size=(20, 16)), spreads, sizes)]
    B = np.concatenate(parts) @ np.linalg.qr(rng.normal(size=(d, 16)))[0].T
    return (B / np.linalg.norm(B, axis=1, keepdims=True)).astype(np.float32)


def test_trained_centres_even_out_the_cells_and_the_index_is_deterministic(monkeypatch):
    B = _clustered_rows(np.random.default_rng(0), 6000, 200)  # more dimensions than the quantiser's axes
    monkeypatch.setattr(mapcells, "_SAMPLE_PER_CENTRE", 16)  # a sample of a third of the rows
    index = CellIndex(B, np.array([4, 17]), rows_per_centre=50, n_rows=len(B), num_threads=1)
    assert index.projection.shape == (200, mapcells._PROJECTED_DIMS) and index.n_cells == len(B) // 50 + 1
    sizes = np.bincount(index.cells_of_b[:, 0][index.cells_of_b[:, 0] >= 0], minlength=index.n_cells)
    again = CellIndex(B, np.array([4, 17]), rows_per_centre=50, n_rows=len(B), num_threads=2)
    np.testing.assert_array_equal(again.projected, index.projected)
    np.testing.assert_array_equal(again.cells_of_b, index.cells_of_b)
    other = CellIndex(B, np.array([4, 17]), rows_per_centre=50, n_rows=len(B), random_state=1)
    assert not np.array_equal(other.projected, index.projected)  # the seed picks the training sample
    monkeypatch.setattr(mapcells, "_LLOYD_ITERATIONS", 0)
    untrained = CellIndex(B, np.array([4, 17]), rows_per_centre=50, n_rows=len(B))
    before = np.bincount(untrained.cells_of_b[untrained.cells_of_b >= 0], minlength=untrained.n_cells)
    assert sizes.max() <= 3 * sizes.mean() and sizes.max() < 0.6 * before.max(), (sizes.max(), before.max())
    np.testing.assert_allclose(np.linalg.norm(index.projected, axis=1), 1.0, atol=1e-6)


def test_lists_do_not_depend_on_threads_or_chunks(monkeypatch):
    rng = np.random.default_rng(2)
    FA, B = rng.normal(size=(700, 16)).astype(np.float16), rng.normal(size=(600, 16)).astype(np.float16)
    index = CellIndex(B, np.array([3]), rows_per_centre=40, n_rows=700, num_threads=1)
    np.testing.assert_array_equal(
        CellIndex(B, np.array([3]), rows_per_centre=40, n_rows=700, num_threads=2).cells_of_b, index.cells_of_b
    )
    probes = index.nearest(FA, 4)
    one = cell_lists(FA, B, probes, index, 12, num_threads=1)
    two = cell_lists(FA, B, probes, index, 12, num_threads=2)
    monkeypatch.setattr(mapcells, "CHUNK", 64)
    small = cell_lists(FA, B, index.nearest(FA, 4), index, 12, num_threads=2)
    for x, y, z in zip(one, two, small):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)


def test_mutual_best_is_the_kernels_k1_csls_on_the_same_lists():
    rng = np.random.default_rng(3)
    FA, B = _integer_rows(rng, 300, 12), _integer_rows(rng, 260, 12)
    index = CellIndex(B, np.zeros(0, np.int64), rows_per_centre=20, n_rows=300)
    cand_a, dots_a, cand_b, dots_b, _ = cell_lists(FA, B, index.nearest(FA, 3), index, 16)
    pairs, scores = mutual_best(cand_a, dots_a, cand_b, dots_b, csls_k=5)
    want, want_scores = kernels.csls_mutual_topk_candidates(FA, B, cand_a, cand_b, k=1, csls_k=5)
    assert len(pairs) > 50
    # the same pairs and scores; within a tied score the kernel's greedy order may differ
    key = lambda p, s: sorted(zip(s.tolist(), p[:, 0].tolist(), p[:, 1].tolist()))  # noqa: E731
    assert key(pairs, scores) == key(want, want_scores)


def test_mapped_rows_and_the_chunked_ridge_map():
    rng = np.random.default_rng(4)
    A, B = rng.normal(size=(500, 6)).astype(np.float32), rng.normal(size=(500, 5)).astype(np.float32)
    pairs = np.stack([rng.permutation(500)[:300], rng.permutation(500)[:300]], 1)
    W = ridge_map_rows(A, B, pairs)
    X, Y = A[pairs[:, 0]].astype(np.float64), B[pairs[:, 1]].astype(np.float64)
    np.testing.assert_allclose(W, np.linalg.solve(X.T @ X + np.eye(6), X.T @ Y), rtol=1e-5, atol=1e-6)
    FA = mapped_rows(A, W, np.float16)
    assert FA.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(FA.astype(np.float64), axis=1), 1.0, atol=2e-3)


def test_a_refit_pass_maps_only_its_rows_and_gives_the_links_of_all_rows_with_the_others_left_out():
    A, B, split = linking_problem(900, noise=0.05, seed=8)
    A, B = Center().apply(A), Center().apply(B)
    W = ridge_map_rows(A, B, split.truth[:300])
    index = CellIndex(B, split.seeds[:, 1], rows_per_centre=40, n_rows=len(B))
    pairs, scores = refine.map_propose(
        A, B, W, exclude_a=split.seeds[:, 0], exclude_b=split.seeds[:, 1], cells=index, probes=3, every=4
    )
    FA = mapped_rows(A, W, B.dtype)
    near = index.nearest(FA, 3)
    near[split.seeds[:, 0]] = -1
    near[np.arange(len(A)) % 4 != 0] = -1  # the other rows in no cell: the pass before it mapped only these rows
    want, want_scores = mutual_best(*cell_lists(FA, B, near, index, 32), csls_k=10)
    assert len(want) > 100 and (pairs[:, 0] % 4 == 0).all()
    np.testing.assert_array_equal(pairs, want)
    # the mapped rows come from a GEMM over other rows (A[::4] against A), which BLAS may round differently
    np.testing.assert_allclose(scores, want_scores, rtol=1e-6, atol=1e-6)


def test_map_pass_over_cells_keeps_the_exact_links(monkeypatch):
    monkeypatch.setattr(refine, "_ROWS_PER_CENTRE", 50)  # 40 cells of 2,000 rows: the cells restrict
    A, B, split = linking_problem(2000, noise=0.05, seed=2)
    A, B = Center().apply(A), Center().apply(B)
    anchors = np.concatenate([split.seeds, split.truth[:200]])
    kw = dict(exclude_a=split.seeds[:, 0], exclude_b=split.seeds[:, 1])
    exact, _, _ = map_links(A, B, anchors, **kw)
    fast, _, _ = map_links(A, B, anchors, cells=True, **kw)
    e, f = evaluate_links(exact, split.truth), evaluate_links(fast, split.truth)
    assert e["f1"] > 0.9 and f["f1"] > e["f1"] - 0.02, (e, f)
    shared = len({tuple(p) for p in exact.tolist()} & {tuple(p) for p in fast.tolist()})
    assert shared >= 0.95 * len(exact)


def test_b_rows_in_two_cells_find_partners_their_nearest_cell_misses(monkeypatch):
    monkeypatch.setattr(refine, "_ROWS_PER_CENTRE", 50)
    A, B, split = linking_problem(2000, noise=0.2, seed=2)  # a noisy map: partners across cell borders
    A, B = Center().apply(A), Center().apply(B)
    anchors = np.concatenate([split.seeds, split.truth[:200]])
    kw = dict(exclude_a=split.seeds[:, 0], exclude_b=split.seeds[:, 1], cells=True, probes=1)
    recall = [
        evaluate_links(map_links(A, B, anchors, copies=c, margin=m, **kw)[0], split.truth)["recall"]
        for c, m in ((1, 0.0), (2, 0.05), (2, 2.0))
    ]
    assert recall[0] + 0.03 < recall[1] and recall[1] + 0.05 < recall[2], recall


def _fit(A, B, seeds, **kw):
    linker = GEHLinker(
        candidates=CellCandidates(),
        sample=RowSample(rows=600),
        random_state=0,
        max_iter=6,
        show_progress_bar=False,
        **kw,
    )
    return linker.link(A, B, seeds)


def test_float16_memory_mapped_and_in_place_inputs_give_the_in_memory_links(tmp_path, monkeypatch):
    monkeypatch.setattr(refine, "_ROWS_PER_CENTRE", 60)
    A, B, split = linking_problem(2400, noise=0.05, seed=5)
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    base = _fit(A16, B16, split.seeds)
    assert evaluate_links(base.links, split.truth)["f1"] > 0.8
    np.save(tmp_path / "a.npy", A16)
    np.save(tmp_path / "b.npy", B16)
    mapped = _fit(np.load(tmp_path / "a.npy", mmap_mode="r"), np.load(tmp_path / "b.npy", mmap_mode="r"), split.seeds)
    np.testing.assert_array_equal(mapped.links, base.links)
    own_a, own_b = A16.copy(), B16.copy()
    in_place = _fit(own_a, own_b, split.seeds, center=Center(copy=False))
    np.testing.assert_array_equal(in_place.links, base.links)
    assert not np.array_equal(own_a, A16)  # centred where it lay: no copy held
    np.testing.assert_array_equal(own_a, Center().apply(A16))
    f32 = _fit(A, B, split.seeds)
    assert abs(evaluate_links(f32.links, split.truth)["f1"] - evaluate_links(base.links, split.truth)["f1"]) < 0.02


def test_center_in_chunks_is_the_whole_array_computation(monkeypatch):
    rng = np.random.default_rng(6)
    X = (rng.normal(size=(300, 7)) + 2.0).astype(np.float32)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = U.astype(np.float64) - U.astype(np.float64).mean(axis=0)
    want = (C / np.linalg.norm(C, axis=1, keepdims=True)).astype(np.float32)
    np.testing.assert_array_equal(Center().apply(X), want)  # one chunk: the same bits as before
    monkeypatch.setattr("crossembed.linking.preprocess.ROW_CHUNK", 64)
    np.testing.assert_allclose(Center().apply(X), want, atol=1e-6)  # the mean's sum order moves last bits
    Y = X.copy()
    assert Center(copy=False).apply(Y) is Y and Center().apply(X) is not X
    assert Center(copy=False).apply(X.astype(np.float64)).dtype == np.float32  # float64: a new float32 array
    # float16 rows are widened to float32 for the arithmetic, then stored as float16
    X16 = X.astype(np.float16)
    np.testing.assert_array_equal(Center().apply(X16), Center().apply(X16.astype(np.float32)).astype(np.float16))


def test_map_pass_probes_and_copies_reach_the_cells_and_are_checked(monkeypatch):
    monkeypatch.setattr(refine, "_ROWS_PER_CENTRE", 50)  # ~16 cells: 3 probes are not clipped
    seen = []
    real = refine.cell_lists
    monkeypatch.setattr(
        refine, "cell_lists", lambda FA, B, near, *a, **k: seen.append(near.shape[1]) or real(FA, B, near, *a, **k)
    )
    A, B, split = linking_problem(1200, noise=0.05, seed=7)
    built = []
    index = refine.CellIndex
    monkeypatch.setattr(refine, "CellIndex", lambda *a, **k: built.append(k) or index(*a, **k))
    promotion = ValidatedPromotion(final_pass=MapPass(probes=3, copies=3, margin=0.5))
    GEHLinker(
        candidates=CellCandidates(), promotion=promotion, random_state=0, max_iter=4, show_progress_bar=False
    ).link(A, B, split.seeds)
    assert seen and set(seen) == {3}
    assert built and all(k["copies"] == 3 and k["margin"] == 0.5 for k in built)
    with pytest.raises(ValueError, match="probes"):
        MapPass(probes=0)
    with pytest.raises(TypeError, match="probes"):
        MapPass(probes=2.5)
