"""GEH's map pass: fit a linear map on the pool, then link every row through it.

Signatures see each object only through its similarities to a few hundred
anchors; once the pool holds hundreds of (mostly right) links, a ridge map
``W = argmin ||A_pool W - B_pool||^2 + lam ||W||^2`` from A's space to B's
uses every coordinate instead. Rows are then linked by mutual nearest
neighbours under CSLS between ``A W`` and ``B``, and links whose CSLS score
falls in the lower Otsu class are dropped: rows whose object is absent on
the other side still find a mutual neighbour, with lower scores. The map is
refitted once on the links it kept (a cleaner pool) and applied again
(docs/linking.md compares it with the pool alone and the fold pass).
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed.linking._inputs import unit_rows
from crossembed.linking.cells import CELLS_PER_ROW, cell_candidate_lists, nearest_cells

__all__ = ["ridge_map", "map_links", "map_propose"]


def ridge_map(X: np.ndarray, Y: np.ndarray, *, lam: float = 1.0) -> np.ndarray:
    """``(D_X, D_Y)`` float32 ridge solution of ``X W ~ Y`` (float64 normal equations)."""
    X64, Y64 = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    gram = X64.T @ X64
    gram[np.diag_indices_from(gram)] += lam
    return np.linalg.solve(gram, X64.T @ Y64).astype(np.float32)


# the cell lists of a large map pass: candidates per row, and cell centres (anchors' B rows)
_CELL_CANDIDATES = 32
_CELL_CENTRES = 512
# ... and at most this many rows of the larger side a cell: a pass's cost grows as N^2 / centres, so
# where the anchors' centres would make huge cells evenly spaced B rows are added as centres (both
# sides live in B's space, so any B row can centre a cell)
_ROWS_PER_CENTRE = 256


def _cell_centres(fit_on: np.ndarray, n_b: int, n_rows: int) -> np.ndarray:
    """Sorted B rows centring the cells: up to 512 of the anchors', then evenly spaced rows of B
    up to ``n_rows / 256`` centres in all."""
    pick = np.unique(np.linspace(0, len(fit_on) - 1, min(_CELL_CENTRES, len(fit_on))).astype(np.int64))
    centres = np.unique(fit_on[pick, 1])
    want = min(n_b, -(-n_rows // _ROWS_PER_CENTRE))
    if want > len(centres):
        rest = np.setdiff1d(np.arange(n_b), centres)
        centres = np.union1d(centres, rest[np.linspace(0, len(rest) - 1, want - len(centres)).astype(np.int64)])
    return centres


def map_propose(A, B, W, *, exclude_a, exclude_b, csls_k: int = 10, num_threads=None, cells_of=None):
    """Mutual CSLS pairs ``(P, 2)`` and scores between ``A W`` (unit rows) and ``B``; with ``cells_of``
    (B rows centring cells) only pairs sharing a cell are scored."""
    FA = unit_rows(A @ W)
    if cells_of is None:
        return kernels.csls_mutual_topk(
            FA, B, k=1, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=num_threads
        )
    # both sides now live in B's space: the cells are the nearest centre rows of B, and only
    # pairs sharing a cell are scored (crossembed.linking.cells)
    centres = B[cells_of]
    cand_a, cand_b = cell_candidate_lists(
        FA,
        B,
        nearest_cells(FA, centres, CELLS_PER_ROW, num_threads=num_threads),
        nearest_cells(B, centres, CELLS_PER_ROW, num_threads=num_threads),
        max(_CELL_CANDIDATES, csls_k),
        n_cells=len(centres),
        num_threads=num_threads,
    )
    return kernels.csls_mutual_topk_candidates(
        FA, B, cand_a, cand_b, k=1, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=num_threads
    )


def map_links(
    A: np.ndarray,
    B: np.ndarray,
    anchors: np.ndarray,
    *,
    exclude_a: np.ndarray,
    exclude_b: np.ndarray,
    lam: float = 1.0,
    csls_k: int = 10,
    refits: int = 1,
    score_filter: bool = True,
    cells: bool = False,
    num_threads: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray, float]:
    """One-to-one links ``(L, 2)``, their CSLS scores and the score threshold (-inf: none)
    from a ridge map fitted on ``anchors``.

    Parameters
    ----------
    A, B : ndarray
        Unit rows of both sides (dimensions may differ).
    anchors : ndarray, shape (P, 2)
        Pairs the first map is fitted on (seeds and pool links).
    exclude_a, exclude_b : ndarray of int
        Rows that take no part (the seeds).
    lam : float
        Ridge penalty.
    csls_k : int
        Neighbours of the CSLS hubness terms.
    refits : int
        Times the map is refitted on ``fixed anchors + kept links`` and reapplied.
    score_filter : bool
        Drop links in the lower Otsu class of scores.
    cells : bool
        Score only pairs that share one of their 4 nearest cell centres
        (up to 512 of the anchors' B rows, evenly spaced, and more B rows
        where the larger side has over 256 rows a centre) instead of all
        N_A x N_B pairs (:mod:`crossembed.linking.cells`; large fits).
    """
    fixed = np.stack([exclude_a, exclude_b], axis=1) if len(exclude_a) else np.zeros((0, 2), np.int64)
    fit_on = anchors
    pairs = np.zeros((0, 2), np.int64)
    scores = np.zeros(0, np.float32)
    thr = -np.inf
    for _ in range(refits + 1):
        W = ridge_map(A[fit_on[:, 0]], B[fit_on[:, 1]], lam=lam)
        centres = _cell_centres(fit_on, len(B), max(len(A), len(B))) if cells else None
        pairs, scores = map_propose(
            A, B, W, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=num_threads, cells_of=centres
        )
        if score_filter and len(pairs) > 1:
            thr = kernels.otsu_threshold(scores.astype(np.float64))
            keep = scores > thr
            pairs, scores = pairs[keep], scores[keep]
        if len(pairs) == 0:
            break
        fit_on = np.concatenate([fixed, pairs])
    return pairs, scores, float(thr)
