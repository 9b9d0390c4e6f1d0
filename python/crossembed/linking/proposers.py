"""Proposers: the step of a GEH view that turns two signature matrices into one-to-one pairs.

Every proposer is a callable ``proposer(SA, SB, *, k, csls_k, exclude_a,
exclude_b) -> (pairs, scores)`` (:class:`Proposer`), so the exhaustive
kernel, the candidate-list paths below and
:class:`crossembed.distributed.DaskProposer` swap freely (as hnswlib's brute
force and HNSW indexes share one interface).

:class:`ExactProposer` (``GEHLinker(candidates="exact")``) is the C++ tiled
:func:`crossembed.kernels.csls_mutual_topk` over all N_A x N_B pairs.

:class:`PoolProposer` (``GEHLinker(candidates="pool")``, the fast path)
scores only fixed candidate lists with the C++
:func:`crossembed.kernels.csls_mutual_topk_candidates`. The lists come from
:func:`pool_candidate_lists`, once per round: each row's ``M`` nearest rows
on the other side by the dot product of signatures against the whole pool
(a superset of every view's anchors, so the lists are what the views would
mostly pick anyway). A view then costs O((N_A + N_B) M anchors) instead of
O(N_A N_B anchors).

:class:`CellCandidates` (``GEHLinker(candidates="cells")``, the default above
30,000 rows a side) builds the same kind of lists from anchor cells
(:mod:`crossembed.linking.cells`): a pair is scored only if both rows have
one of the list anchors among their ``r`` nearest, 32x less work than
the exact lists at 512 anchors.

:class:`AnnProposer` (``GEHLinker(candidates="ann")``) builds one HNSW index
(inner product) per side over the view's signatures and keeps each row's
``ann_k`` approximate neighbours. The hubness terms ``r_A``/``r_B`` are the
means of the best ``csls_k`` retrieved similarities, CSLS is computed on the
candidate edges only, and a pair is proposed when each end is in the other's
CSLS top-``k`` among its candidates. Memory is O((N_A + N_B) * ann_k) plus
the indexes; with ``ann_k >= csls_k`` and a good recall it matches the exact
kernel (see tests/test_linking_geh.py).
"""

from __future__ import annotations

from typing import Optional, Protocol, Tuple

import numpy as np

from crossembed import kernels
from crossembed.linking._inputs import active_rows as _active
from crossembed.linking.cells import CELLS_PER_ROW, cell_candidate_lists, top_cells
from crossembed.linking.pairs import greedy_one_to_one, positions

__all__ = [
    "AnnProposer",
    "CandidateBackend",
    "CellCandidates",
    "ExactProposer",
    "LocalCandidates",
    "PoolProposer",
    "Proposer",
    "pool_candidate_lists",
]


class Proposer(Protocol):
    def __call__(
        self, SA: np.ndarray, SB: np.ndarray, *, k: int, csls_k: int, exclude_a=None, exclude_b=None
    ) -> Tuple[np.ndarray, np.ndarray]:
        """One-to-one CSLS mutual top-``k`` pairs ``(P, 2)`` int64 of two signature matrices and their scores."""


class ExactProposer:
    """Every N_A x N_B pair scored by the C++ tiled CSLS mutual top-k (results do not depend on threads)."""

    def __init__(self, *, num_threads: Optional[int] = None):
        self.num_threads = num_threads

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        return kernels.csls_mutual_topk(
            SA, SB, k=k, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=self.num_threads
        )

    def __repr__(self) -> str:
        return "ExactProposer()"


def _knn(data: np.ndarray, queries: np.ndarray, k: int, *, M: int, ef: int, num_threads: int):
    import hnswlib

    index = hnswlib.Index(space="ip", dim=data.shape[1])
    index.init_index(max_elements=len(data), ef_construction=max(ef, k), M=M, random_seed=0)
    index.add_items(data, np.arange(len(data)), num_threads=num_threads)
    index.set_ef(max(ef, k))
    labels, dist = index.knn_query(queries, k=k, num_threads=num_threads)
    return labels.astype(np.int64), (1.0 - dist).astype(np.float64)  # hnswlib "ip" distance is 1 - <x, y>


def _top_per_group(group: np.ndarray, score: np.ndarray, other: np.ndarray, k: int) -> np.ndarray:
    """Mask of each group's ``k`` best edges (score descending, then lower ``other``)."""
    order = np.lexsort((other, -score, group))
    g = group[order]
    starts = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    mask = np.zeros(len(group), bool)
    mask[order[rank < k]] = True
    return mask


class AnnProposer:
    """Approximate CSLS mutual top-``k`` over hnswlib candidate lists.

    Parameters
    ----------
    ann_k : int
        Candidates retrieved per row on each side.
    M, ef : int
        HNSW graph degree and search breadth.
    num_threads : int, optional
        hnswlib threads (default: all cores). HNSW insertion order depends on
        threads, so results are reproducible only with ``num_threads=1``.
    """

    def __init__(self, *, ann_k: int = 64, M: int = 16, ef: int = 128, num_threads: Optional[int] = None):
        self.ann_k, self.M, self.ef = int(ann_k), int(M), int(ef)
        self.num_threads = -1 if num_threads is None else int(num_threads)

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        SA = np.ascontiguousarray(SA, dtype=np.float32)
        SB = np.ascontiguousarray(SB, dtype=np.float32)
        rows, cols = _active(exclude_a, len(SA)), _active(exclude_b, len(SB))
        if rows.size == 0 or cols.size == 0:
            return np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
        ka = min(max(self.ann_k, csls_k, k), cols.size)
        kb = min(max(self.ann_k, csls_k, k), rows.size)
        lab_ab, sim_ab = _knn(SB[cols], SA[rows], ka, M=self.M, ef=self.ef, num_threads=self.num_threads)
        lab_ba, sim_ba = _knn(SA[rows], SB[cols], kb, M=self.M, ef=self.ef, num_threads=self.num_threads)
        r_a = sim_ab[:, : min(csls_k, ka)].mean(axis=1)
        r_b = sim_ba[:, : min(csls_k, kb)].mean(axis=1)
        # candidate edges from both directions, deduplicated, scored exactly
        ei = np.concatenate([np.repeat(np.arange(rows.size), ka), lab_ba.reshape(-1)])
        ej = np.concatenate([lab_ab.reshape(-1), np.repeat(np.arange(cols.size), kb)])
        key = np.unique(ei * cols.size + ej)
        ei, ej = key // cols.size, key % cols.size
        sim = np.einsum("ij,ij->i", SA[rows[ei]].astype(np.float64), SB[cols[ej]].astype(np.float64))
        csls = 2.0 * sim - r_a[ei] - r_b[ej]
        mutual = _top_per_group(ei, csls, ej, k) & _top_per_group(ej, csls, ei, k)
        pairs = np.stack([rows[ei[mutual]], cols[ej[mutual]]], axis=1)
        scores = csls[mutual]
        if len(pairs) == 0:
            return pairs.reshape(0, 2), scores.astype(np.float32)
        chosen = greedy_one_to_one(pairs, scores)
        return chosen, scores[positions(pairs, chosen, len(SB))].astype(np.float32)


def pool_candidate_lists(SA, SB, m: int, *, num_threads: Optional[int] = None):
    """Each row's ``m`` best rows on the other side by signature dot product.

    Both directions come from one sweep of the C++
    :func:`crossembed.kernels.topk_rows_and_columns`, so every similarity is
    computed once.

    Parameters
    ----------
    SA : ndarray, shape (N_A, A)
    SB : ndarray, shape (N_B, A)
        Signatures of both sides against the same anchors.
    m : int
        Candidates per row (clipped to the other side's size).

    Returns
    -------
    cand_a : ndarray, shape (N_A, min(m, N_B)), int64
    cand_b : ndarray, shape (N_B, min(m, N_A)), int64
    """
    _, cand_a, _, cand_b = kernels.topk_rows_and_columns(SA, SB, m, num_threads=num_threads)
    return cand_a, cand_b


class PoolProposer:
    """CSLS mutual top-``k`` restricted to fixed candidate lists (see :func:`pool_candidate_lists`).

    Parameters
    ----------
    cand_a : ndarray, shape (N_A, M)
    cand_b : ndarray, shape (N_B, M)
        Candidate rows per row of each side; ``-1`` pads.
    num_threads : int, optional
    """

    def __init__(self, cand_a: np.ndarray, cand_b: np.ndarray, *, num_threads: Optional[int] = None):
        self.cand_a, self.cand_b = cand_a, cand_b
        self.num_threads = num_threads
        self._checked = None  # private checked copies, made on the first call (the rows of SA/SB)

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        cand_a, cand_b = self.checked_lists(np.shape(SA)[0], np.shape(SB)[0])
        return kernels._csls_over_checked_lists(
            SA, SB, cand_a, cand_b, k, csls_k, exclude_a, exclude_b, self.num_threads
        )

    def checked_lists(self, n_a: int, n_b: int) -> Tuple[np.ndarray, np.ndarray]:
        """The lists checked against ``n_a`` x ``n_b`` rows (once; a round's views share them)."""
        if self._checked is None or self._checked[0] != (n_a, n_b):
            lists = (
                kernels._candidate_lists(self.cand_a, n_a, n_b, "cand_a"),
                kernels._candidate_lists(self.cand_b, n_b, n_a, "cand_b"),
            )
            self._checked = ((n_a, n_b), lists)
        return self._checked[1]

    def with_threads(self, num_threads: Optional[int]) -> PoolProposer:
        """The same proposer (and checked lists) on ``num_threads`` kernel threads."""
        other = PoolProposer(self.cand_a, self.cand_b, num_threads=num_threads)
        other._checked = self._checked
        return other


class CandidateBackend(Protocol):
    """Where the ``"pool"`` path runs: the round's candidate lists and the per-view proposer over them.

    :class:`LocalCandidates` (this process) and
    :class:`crossembed.distributed.DaskCandidates` (B sharded over Dask
    workers) give identical links.
    """

    def candidate_lists(
        self, SA: np.ndarray, SB: np.ndarray, m: int, *, num_threads: Optional[int] = None
    ) -> Tuple[np.ndarray, np.ndarray]:
        """``(cand_a, cand_b)`` as :func:`pool_candidate_lists` returns them."""

    def proposer(self, cand_a: np.ndarray, cand_b: np.ndarray, *, num_threads: Optional[int] = None) -> Proposer:
        """A :class:`Proposer` restricted to the lists, as :class:`PoolProposer`."""


class LocalCandidates:
    """The ``"pool"`` path in this process: :func:`pool_candidate_lists` and :class:`PoolProposer`."""

    def candidate_lists(self, SA, SB, m, *, num_threads=None):
        return pool_candidate_lists(SA, SB, m, num_threads=num_threads)

    def proposer(self, cand_a, cand_b, *, num_threads=None):
        return PoolProposer(cand_a, cand_b, num_threads=num_threads)

    def __repr__(self) -> str:
        return "LocalCandidates()"


class CellCandidates(LocalCandidates):
    """The ``"cells"`` path: lists among rows sharing one of their ``r`` nearest anchors, then :class:`PoolProposer`.

    A row's nearest anchors are its largest signature entries (the
    signature is a decreasing function of the distance to each anchor), so
    the cells cost nothing beyond the signatures the lists use anyway. While
    the anchors are few (the first rounds) the exact lists are built instead
    (see :func:`~crossembed.linking.cells.cell_candidate_lists`).

    Parameters
    ----------
    cells_per_row : int
        ``r``, the cells each row belongs to (default 4).
    """

    def __init__(self, *, cells_per_row: int = CELLS_PER_ROW):
        self.cells_per_row = int(cells_per_row)

    def candidate_lists(self, SA, SB, m, *, num_threads=None):
        r, n_cells = self.cells_per_row, np.shape(SA)[1]
        return cell_candidate_lists(
            SA, SB, top_cells(SA, r), top_cells(SB, r), m, n_cells=n_cells, num_threads=num_threads
        )

    def __repr__(self) -> str:
        return f"CellCandidates(cells_per_row={self.cells_per_row})"
