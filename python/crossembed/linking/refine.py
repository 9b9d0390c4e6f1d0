"""GEH's map pass: fit a linear map on the pool, then link every row through it.

Signatures see each object only through its similarities to a few hundred
anchors; once the pool holds hundreds of (mostly right) links, a ridge map
``W = argmin ||A_pool W - B_pool||^2 + lam ||W||^2`` from A's space to B's
uses every coordinate instead. Rows are then linked by mutual nearest
neighbours under CSLS between ``A W`` and ``B``, and links whose CSLS score
falls in the lower Otsu class are dropped: rows whose object is absent on
the other side still find a mutual neighbour, with lower scores. The map is
refitted once on the links it kept (a cleaner pool) and applied again.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed.linking._inputs import ROW_CHUNK
from crossembed.linking.mapcells import CellIndex, cell_lists, mapped_rows, mutual_best
from crossembed.linking.preprocess import unit_rows

__all__ = ["map_links", "map_propose", "ridge_map_rows"]


def ridge_map_rows(A: np.ndarray, B: np.ndarray, pairs: np.ndarray, *, lam: float = 1.0) -> np.ndarray:
    """``(D_A, D_B)`` float32 ridge solution of ``A[pairs[:, 0]] W ~ B[pairs[:, 1]]``: the float64 normal
    equations ``(X'X + lam I) W = X'Y``, summed over chunks of pairs."""
    gram = np.zeros((A.shape[1], A.shape[1]))
    cross = np.zeros((A.shape[1], B.shape[1]))
    for s in range(0, len(pairs), ROW_CHUNK):
        X = np.asarray(A[pairs[s : s + ROW_CHUNK, 0]], np.float64)
        gram += X.T @ X
        cross += X.T @ np.asarray(B[pairs[s : s + ROW_CHUNK, 1]], np.float64)
    return _ridge_solve(gram, cross, lam)


def _ridge_solve(gram: np.ndarray, cross: np.ndarray, lam: float) -> np.ndarray:
    """float32 ``W`` of the normal equations ``(gram + lam I) W = cross`` (``gram`` is changed)."""
    gram[np.diag_indices_from(gram)] += lam
    return np.linalg.solve(gram, cross).astype(np.float32)


# the cells of a large map pass: candidates per row, cells each mapped A row probes, and rows of the
# larger side per cell centre (a pass scores probes N_A N_B / centres pairs)
_CELL_CANDIDATES = 32
_ROWS_PER_CENTRE = 512
# a pass whose links only refit the map scores every 4th A row: the refit needs a clean sample of
# links, not all of them
_REFIT_EVERY = 4


def map_propose(
    A,
    B,
    W,
    *,
    exclude_a,
    exclude_b,
    csls_k: int = 10,
    num_threads=None,
    cells: Optional[CellIndex] = None,
    probes: int = 8,
    every: int = 1,
):
    """Mutual CSLS pairs ``(P, 2)`` and scores between ``A W`` (unit rows) and ``B``; with ``cells``
    (:class:`~crossembed.linking.mapcells.CellIndex` of B) only the pairs its cells score."""
    if cells is None:
        return kernels.csls_mutual_topk(
            unit_rows(A @ W), B, k=1, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=num_threads
        )
    # only every ``every``-th A row takes part (a pass that only refits the map): only those are mapped
    FA = mapped_rows(A[::every], W, B.dtype)
    near = cells.nearest(FA, probes, num_threads=num_threads).astype(np.int32)
    excluded = np.asarray(exclude_a, np.int64)
    near[excluded[excluded % every == 0] // every] = -1
    lists = cell_lists(FA, B, near, cells, max(_CELL_CANDIDATES, csls_k), num_threads=num_threads)
    del FA
    pairs, scores = mutual_best(*lists, csls_k=csls_k)
    pairs[:, 0] *= every  # rows of the mapped part are A's rows 0, every, 2 every, ...
    return pairs, scores


def _cell_index(B, exclude_b, n_rows: int, copies: int, margin: float, num_threads) -> CellIndex:
    return CellIndex(
        B,
        exclude_b,
        rows_per_centre=_ROWS_PER_CENTRE,
        n_rows=n_rows,
        copies=copies,
        margin=margin,
        num_threads=num_threads,
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
    probes: int = 8,
    copies: int = 1,
    margin: float = 0.0,
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
        Score only the pairs of an inverted file in B's space instead of all
        N_A x N_B pairs: a cell per 512 rows of the larger side, its centre
        trained by spherical k-means on a sample of B's rows; each mapped A
        row is scored in its ``probes`` nearest cells, and a pass that only
        refits the map scores every 4th A row
        (:mod:`crossembed.linking.mapcells`; large fits, float16 inputs).
    probes, copies, margin : int, int, float
        With ``cells``: cells per mapped A row; most cells a B row sits in, and the cosine
        margin of its next ones (:class:`~crossembed.linking.mapcells.CellIndex`).
    """
    fixed = np.stack([exclude_a, exclude_b], axis=1) if len(exclude_a) else np.zeros((0, 2), np.int64)
    fit_on = anchors
    pairs = np.zeros((0, 2), np.int64)
    scores = np.zeros(0, np.float32)
    thr = -np.inf
    # B's cells do not depend on the map: one index serves every refit
    index = _cell_index(B, exclude_b, max(len(A), len(B)), copies, margin, num_threads) if cells else None
    kw = dict(csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=num_threads, cells=index)
    for t in range(refits + 1):
        W = ridge_map_rows(A, B, fit_on, lam=lam)
        every = _REFIT_EVERY if index is not None and t < refits else 1
        pairs, scores = map_propose(A, B, W, probes=probes, every=every, **kw)
        if score_filter and len(pairs) > 1:
            thr = kernels.otsu_threshold(scores.astype(np.float64))
            keep = scores > thr
            pairs, scores = pairs[keep], scores[keep]
        if len(pairs) == 0:
            break
        fit_on = np.concatenate([fixed, pairs])
    return pairs, scores, float(thr)
