"""Anchor-cell candidate lists (crossembed.linking.cells) and the "cells" path of GEH."""

import numpy as np
import pytest

from _cell_lists import best_sharing
from _linking_data import linking_problem
from crossembed import reference
from crossembed.linking import (
    AutoCandidates,
    ExactCandidates,
    GEHLinker,
    PoolCandidates,
    evaluate_links,
)
from crossembed.linking import cells as cells_module
from crossembed.linking.candidates import CellCandidates
from crossembed.linking.cells import cell_candidate_lists, cell_pairs, top_cells
from crossembed.linking.proposers import pool_candidate_lists


@pytest.fixture
def always_cells(monkeypatch):
    """The cell path even where the cells cover most pairs (small test inputs)."""
    monkeypatch.setattr(cells_module, "_CELL_PAIR_SHARE", np.inf)


def _brute_force(FA, FB, cells_a, cells_b, m):
    """float64: each row's m best rows among those sharing a cell (score desc, then lower row), -1 padded."""
    S = FA.astype(np.float64) @ FB.astype(np.float64).T
    share = (cells_a[:, :, None, None] == cells_b[None, None, :, :]).any(axis=(1, 3))

    return best_sharing(S, share, m), best_sharing(S.T, share.T, m)


@pytest.mark.parametrize("n_a,n_b,f,n_cells,r,m", [(90, 70, 12, 9, 3, 8), (40, 55, 7, 5, 1, 30), (1, 6, 3, 4, 2, 3)])
def test_lists_equal_the_float64_brute_force(n_a, n_b, f, n_cells, r, m, always_cells):
    rng = np.random.default_rng(n_a)
    FA, FB = rng.random((n_a, f), dtype=np.float32), rng.random((n_b, f), dtype=np.float32)
    ca = np.stack([rng.permutation(n_cells)[:r] for _ in range(n_a)])
    cb = np.stack([rng.permutation(n_cells)[:r] for _ in range(n_b)])
    got_a, got_b = cell_candidate_lists(FA, FB, ca, cb, m, n_cells=n_cells)
    want_a, want_b = _brute_force(FA, FB, ca, cb, m)
    np.testing.assert_array_equal(got_a, want_a)
    np.testing.assert_array_equal(got_b, want_b)


def test_ties_go_to_the_lower_row_and_a_pair_sharing_many_cells_is_listed_once(always_cells):
    FA = np.ones((5, 3), np.float32)  # every score ties
    FB = np.ones((8, 3), np.float32)
    every = np.tile(np.arange(4), (5, 1)), np.tile(np.arange(4), (8, 1))
    cand_a, cand_b = cell_candidate_lists(FA, FB, *every, 6, n_cells=4)
    np.testing.assert_array_equal(cand_a, np.tile(np.arange(6), (5, 1)))
    np.testing.assert_array_equal(cand_b[:, :5], np.tile(np.arange(5), (8, 1)))
    assert (cand_b[:, 5] == -1).all()  # only five rows of A exist: padded


def test_every_cell_per_row_gives_the_exact_lists(always_cells):
    rng = np.random.default_rng(3)
    SA, SB = rng.random((200, 16), dtype=np.float32), rng.random((150, 16), dtype=np.float32)
    got = cell_candidate_lists(SA, SB, top_cells(SA, 16), top_cells(SB, 16), 10, n_cells=16)
    _, want_a, _, want_b = reference.topk_rows_and_columns(SA, SB, 10)
    np.testing.assert_array_equal(got[0], want_a)
    np.testing.assert_array_equal(got[1], want_b)


def test_lists_do_not_depend_on_threads(always_cells):
    rng = np.random.default_rng(4)
    SA, SB = rng.random((300, 8), dtype=np.float32), rng.random((260, 8), dtype=np.float32)
    args = (SA, SB, top_cells(SA, 2), top_cells(SB, 2), 12)
    one = cell_candidate_lists(*args, n_cells=8, num_threads=1)
    two = cell_candidate_lists(*args, n_cells=8, num_threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


def test_top_cells_are_the_largest_columns():
    S = np.array([[0.1, 0.9, 0.5, 0.7], [4.0, 3.0, 2.0, 1.0]], np.float32)
    assert [set(row) for row in top_cells(S, 2)] == [{1, 3}, {0, 1}]
    assert top_cells(S, 9).shape == (2, 4)


def test_merging_in_row_chunks_changes_nothing(always_cells):
    rng = np.random.default_rng(11)
    scores = rng.integers(0, 4, size=(37, 3, 5)).astype(np.float32)  # many ties
    idx = rng.integers(-1, 9, size=(37, 3, 5))
    whole = cells_module._merge(scores, idx, 6)
    np.testing.assert_array_equal(cells_module._merge(scores, idx, 6, chunk=4), whole)
    np.testing.assert_array_equal(cells_module._merge(scores, idx, 6, chunk=1), whole)


def test_the_cells_path_links_like_the_pool_path():
    A, B, split = linking_problem(1500, noise=0.05, seed=1)
    kw = dict(random_state=0, max_iter=15, show_progress_bar=False)
    pool = evaluate_links(GEHLinker(candidates=PoolCandidates(), **kw).link(A, B, split.seeds).links, split.truth)
    cells = evaluate_links(GEHLinker(candidates=CellCandidates(), **kw).link(A, B, split.seeds).links, split.truth)
    assert pool["f1"] > 0.9
    assert cells["f1"] > pool["f1"] - 0.03, (cells, pool)


def test_auto_switches_to_cells_only_for_large_fits():
    auto = GEHLinker().candidates
    assert isinstance(auto, AutoCandidates)
    assert isinstance(auto.choose(1000, 1000), ExactCandidates)
    assert type(auto.choose(10_000, 10_000)) is PoolCandidates
    assert isinstance(auto.choose(40_000, 40_000), CellCandidates)
    # the map pass links within cells where the source chosen for its size does
    assert auto.map_cells(40_000, 40_000) and not auto.map_cells(10_000, 10_000)
    assert not PoolCandidates().map_cells(40_000, 40_000) and CellCandidates().map_cells(100, 100)
    with pytest.raises(TypeError, match="candidates"):
        GEHLinker(candidates="cell")
    with pytest.raises(TypeError, match="pool"):
        AutoCandidates(pool="pool")


def test_cell_backend_lists_only_pairs_with_a_shared_nearest_anchor():
    rng = np.random.default_rng(5)
    SA, SB = rng.random((120, 64), dtype=np.float32), rng.random((100, 64), dtype=np.float32)
    cand_a, _ = CellCandidates(cells_per_row=2).candidate_lists(SA, SB, 20)
    ca, cb = top_cells(SA, 2), top_cells(SB, 2)
    assert (cand_a == -1).any()  # cells of ~4 rows a side cannot fill 20 slots: the cell path ran
    for i, row in enumerate(cand_a):
        for j in row[row >= 0]:
            assert set(ca[i]) & set(cb[j])


def test_few_huge_cells_give_the_exact_lists_padded():
    # 15 seed anchors, 4 cells a row: the cells would score every pair (round 0 of a 100k fit)
    rng = np.random.default_rng(6)
    SA, SB = rng.random((300, 15), dtype=np.float32), rng.random((10, 15), dtype=np.float32)
    ca, cb = top_cells(SA, 4), top_cells(SB, 4)
    assert cell_pairs(ca, cb, 15) > 0.125 * 300 * 10
    got_a, got_b = CellCandidates().candidate_lists(SA, SB, 12)
    want_a, want_b = pool_candidate_lists(SA, SB, 12)
    np.testing.assert_array_equal(got_a[:, :10], want_a)
    assert (got_a[:, 10:] == -1).all() and got_a.shape == (300, 12)  # B has 10 rows: padded to m
    np.testing.assert_array_equal(got_b, want_b)


def test_cell_pairs_counts_the_scored_entries():
    ca = np.array([[0, 1], [1, 2]])  # cell 0: A row 0; cell 1: A rows 0, 1; cell 2: A row 1
    cb = np.array([[1, 2], [0, 1], [2, 0]])  # cell 0: B rows 1, 2; cell 1: B rows 0, 1; cell 2: B rows 0, 2
    assert cell_pairs(ca, cb, 3) == 1 * 2 + 2 * 2 + 1 * 2
