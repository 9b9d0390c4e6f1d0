"""Anchor cells: GEH's candidate lists without scoring all N_A x N_B pairs.

The exact lists (:func:`~crossembed.linking.proposers.pool_candidate_lists`)
cost 2 N_A N_B A multiply-adds per round (A list anchors). The pool anchors already are a coarse quantiser of both sides,
matched across them: row i of A falls in the cells of its ``r`` most
similar anchors (its ``r`` largest signature entries), row j of B in the
cells of its ``r`` most similar anchors on B's side, and (i, j) is a
candidate only if they share a cell - an inverted file whose centroids
correspond by construction. Each cell's block of rows is scored by the
fused top-k of :func:`crossembed.kernels.topk_rows_and_columns`; each row
keeps its ``m`` best partners over its ``r`` cells. With
cells of ~N r / A rows a side the work is 2 N_A N_B r^2, a factor A / r^2
less; the quadratic term remains.

The map pass has cells of its own, in B's space (:mod:`crossembed.linking.mapcells`).
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from crossembed import kernels

__all__ = ["CELLS_PER_ROW", "cell_candidate_lists", "cell_members", "cell_pairs", "top_cells"]

CELLS_PER_ROW = 4
# a pair scored in a cell costs several times one scored by the exact lists (small blocks, where
# the top-k bookkeeping dominates, and the merge), so the cells pay only where they score a small
# share of the pairs; few anchors make few, huge cells
_CELL_PAIR_SHARE = 0.125


def top_cells(S: np.ndarray, r: int) -> np.ndarray:
    """``(N, min(r, C))`` int64: each row's ``r`` largest columns of ``S`` (N x C), any order."""
    S = np.asarray(S)
    r = min(int(r), S.shape[1])
    if r == S.shape[1]:
        return np.broadcast_to(np.arange(r, dtype=np.int64), (S.shape[0], r)).copy()
    return np.argpartition(-S, r - 1, axis=1)[:, :r].astype(np.int64)


def cell_members(cells: np.ndarray, n_cells: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(order, bounds)``: the flat positions ``row * r + slot`` of ``cells`` (n, r) sorted by cell (stably,
    so in row order within a cell; entries < 0, in no cell, first), cell c's at ``order[bounds[c]:bounds[c + 1]]``."""
    flat = cells.reshape(-1)
    order = np.argsort(flat, kind="stable")
    return order, np.searchsorted(flat[order], np.arange(n_cells + 1))


def cell_pairs(cells_a: np.ndarray, cells_b: np.ndarray, n_cells: int) -> float:
    """How many (row, row) entries the cell blocks score: the sum over cells of ``|A_c| |B_c|``."""
    size_a = np.bincount(cells_a.reshape(-1), minlength=n_cells).astype(np.float64)
    size_b = np.bincount(cells_b.reshape(-1), minlength=n_cells).astype(np.float64)
    return float(size_a @ size_b)


def pad_lists(cand: np.ndarray, m: int) -> np.ndarray:
    """``cand`` widened to ``m`` columns with ``-1``."""
    if cand.shape[1] >= m:
        return cand
    out = np.full((cand.shape[0], m), -1, np.int64)
    out[:, : cand.shape[1]] = cand
    return out


def _put(scores, idx, rows, slots, best_score, best_local, members) -> None:
    """Write one cell's per-row best candidates (local to the cell) into the rows' slot arrays."""
    kk = best_local.shape[1]
    scores[rows, slots, :kk] = best_score
    idx[rows, slots, :kk] = members[best_local]


def _merge(scores: np.ndarray, idx: np.ndarray, m: int, *, chunk: int = 1 << 16) -> np.ndarray:
    """Each row's ``m`` best distinct candidates (score descending, ties to the lower row), -1 padded.

    Rows go in chunks: the sorts below copy the ``(N, r m)`` slots several times."""
    n = scores.shape[0]
    out = np.empty((n, m), np.int64)
    for s in range(0, n, chunk):
        out[s : s + chunk] = _merge_rows(scores[s : s + chunk].reshape(-1, scores[0].size), idx[s : s + chunk], m)
    return out


def _merge_rows(scores: np.ndarray, idx: np.ndarray, m: int) -> np.ndarray:
    n = scores.shape[0]
    idx = idx.reshape(n, -1)
    by_idx = np.argsort(idx, axis=1, kind="stable")
    idx = np.take_along_axis(idx, by_idx, axis=1)
    scores = np.take_along_axis(scores, by_idx, axis=1)
    dup = np.zeros_like(idx, dtype=bool)
    dup[:, 1:] = idx[:, 1:] == idx[:, :-1]  # a pair sharing several cells is listed once
    scores[dup | (idx < 0)] = -np.inf
    order = np.lexsort((idx, -scores), axis=1)[:, :m]
    best, best_score = np.take_along_axis(idx, order, axis=1), np.take_along_axis(scores, order, axis=1)
    best[~np.isfinite(best_score)] = -1
    return best


def cell_candidate_lists(
    FA: np.ndarray,
    FB: np.ndarray,
    cells_a: np.ndarray,
    cells_b: np.ndarray,
    m: int,
    *,
    n_cells: int,
    num_threads: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's ``m`` best rows on the other side among those sharing one of its cells.

    Parameters
    ----------
    FA : ndarray, shape (N_A, F)
    FB : ndarray, shape (N_B, F)
        Features scored by dot product (signatures, or mapped embeddings).
    cells_a : ndarray of int, shape (N_A, r)
    cells_b : ndarray of int, shape (N_B, r)
        Each row's cells, in ``[0, n_cells)``, distinct within a row.
    m : int
        Candidates kept per row.
    n_cells : int
    num_threads : int, optional
        Threads of each cell's fused top-k.

    Returns
    -------
    cand_a : ndarray, shape (N_A, m), int64
    cand_b : ndarray, shape (N_B, m), int64
        Best first (ties to the lower row), ``-1`` where a row has fewer
        than ``m`` candidates. Where the cells would score more than an
        eighth of all pairs, every pair is a candidate (the exact lists).
    """
    FA = np.ascontiguousarray(FA, dtype=np.float32)
    FB = np.ascontiguousarray(FB, dtype=np.float32)
    if cell_pairs(cells_a, cells_b, n_cells) > _CELL_PAIR_SHARE * len(FA) * len(FB):
        # a GEH fit starts from a few seed anchors, whose cells cover every pair: there the
        # exact lists are cheaper, and a superset
        _, cand_a, _, cand_b = kernels.topk_rows_and_columns(FA, FB, m, m, num_threads=num_threads)
        return pad_lists(cand_a, m), pad_lists(cand_b, m)
    order_a, ba = cell_members(cells_a, n_cells)
    order_b, bb = cell_members(cells_b, n_cells)
    ra_all, sa_all = order_a // cells_a.shape[1], order_a % cells_a.shape[1]
    rb_all, sb_all = order_b // cells_b.shape[1], order_b % cells_b.shape[1]
    out = []
    for n, r in ((len(FA), cells_a.shape[1]), (len(FB), cells_b.shape[1])):
        out.append((np.full((n, r, m), -np.inf, np.float32), np.full((n, r, m), -1, np.int64)))
    (score_a, idx_a), (score_b, idx_b) = out
    for c in range(n_cells):
        ra, sa = ra_all[ba[c] : ba[c + 1]], sa_all[ba[c] : ba[c + 1]]
        rb, sb = rb_all[bb[c] : bb[c + 1]], sb_all[bb[c] : bb[c + 1]]
        if len(ra) == 0 or len(rb) == 0:
            continue
        # the fused C++ top-k never holds the cell's block (a hub cell can be huge); members are in row order, so its ties to the lower local index
        # are ties to the lower row
        best = kernels.topk_rows_and_columns(FA[ra], FB[rb], m, m, num_threads=num_threads)
        _put(score_a, idx_a, ra, sa, best[0], best[1], rb)
        _put(score_b, idx_b, rb, sb, best[2], best[3], ra)
    return _merge(score_a, idx_a, m), _merge(score_b, idx_b, m)
