"""Proposers: the step of a GEH view that turns two signature matrices into one-to-one pairs.

Every proposer is a :class:`Proposer`: ``proposer(SA, SB, *, k, csls_k,
exclude_a, exclude_b) -> (pairs, scores)``. A fit gets them from its
candidate source (:mod:`crossembed.linking.candidates`), once per fit or
once per round.

:class:`ExactProposer` is the C++ tiled :func:`crossembed.kernels.csls_mutual_topk`
over all N_A x N_B pairs.

:class:`PoolProposer` scores only fixed candidate lists with the C++
:func:`crossembed.kernels.csls_mutual_topk_lists`. The lists come from
:func:`pool_candidate_lists` (or the anchor cells of
:mod:`crossembed.linking.cells`), once per round: each row's ``M`` nearest
rows on the other side by the dot product of signatures against the whole
pool (a superset of every view's anchors, so the lists are what the views
would mostly pick anyway). A view then costs O((N_A + N_B) M anchors)
instead of O(N_A N_B anchors).

:class:`AnnProposer` builds one HNSW index (inner product) per side over
the view's signatures and keeps each row's ``ann_k`` approximate
neighbours. The hubness terms ``r_A``/``r_B`` are the means of the best
``csls_k`` retrieved similarities, CSLS is computed on the candidate edges
only, and a pair is proposed when each end is in the other's CSLS top-``k``
among its candidates. With ``ann_k >= csls_k`` and a good recall it matches
the exact kernel (see tests/test_linking_geh.py).
"""

from __future__ import annotations

import copy
from typing import Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed.ann import MeanGraph
from crossembed.linking._inputs import active_rows as _active
from crossembed.linking.pairs import greedy_one_to_one, positions

__all__ = ["AnnProposer", "ExactProposer", "PoolProposer", "Proposer", "pool_candidate_lists"]


class Proposer:
    """The interface of a view's proposal step (subclass it and implement :meth:`__call__`)."""

    def __call__(
        self, SA: np.ndarray, SB: np.ndarray, *, k: int, csls_k: int, exclude_a=None, exclude_b=None
    ) -> Tuple[np.ndarray, np.ndarray]:
        """One-to-one CSLS mutual top-``k`` pairs ``(P, 2)`` int64 of two signature matrices and their scores.

        ``exclude_a``/``exclude_b``: rows that take no part (a view's anchors, the seeds).
        """
        raise NotImplementedError

    def one_thread(self) -> Optional[Proposer]:
        """This proposer on one kernel thread, safe to call from several threads at once, or None
        (the default) when a round's views must run one after another."""
        return None


class ExactProposer(Proposer):
    """Every N_A x N_B pair scored by the C++ tiled CSLS mutual top-k (results do not depend on threads)."""

    def __init__(self, *, num_threads: Optional[int] = None):
        self.num_threads = num_threads

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        return kernels.csls_mutual_topk(
            SA, SB, k=k, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, num_threads=self.num_threads
        )

    def __repr__(self) -> str:
        return "ExactProposer()"


def _knn(data: np.ndarray, queries: np.ndarray, k: int, *, M: int, ef: int, num_threads: Optional[int]):
    """The ``k`` rows of ``data`` of largest inner product with each query, by an HNSW graph: labels and
    inner products. A query the graph finds fewer than ``k`` rows for gets its list by brute force."""
    graph = MeanGraph(data.shape[1], max_elements=len(data), M=M, ef_construction=max(ef, k), random_seed=0)
    graph.add(data, np.arange(len(data)), num_threads=num_threads)
    labels, dist = graph.knn(queries, k, ef=max(ef, k), num_threads=num_threads)
    sim = 1.0 - dist.astype(np.float64)  # the graph's distance is 1 - <x, y>
    for i in np.flatnonzero((labels < 0).any(axis=1)):
        ip = data @ queries[i]
        labels[i] = np.lexsort((np.arange(len(data)), -ip))[:k]
        sim[i] = ip[labels[i]]
    return labels, sim


def _top_per_group(group: np.ndarray, score: np.ndarray, other: np.ndarray, k: int) -> np.ndarray:
    """Mask of each group's ``k`` best edges (score descending, then lower ``other``)."""
    order = np.lexsort((other, -score, group))
    g = group[order]
    starts = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    mask = np.zeros(len(group), bool)
    mask[order[rank < k]] = True
    return mask


class AnnProposer(Proposer):
    """Approximate CSLS mutual top-``k`` over HNSW candidate lists (:class:`crossembed.ann.MeanGraph`).

    Parameters
    ----------
    ann_k : int
        Candidates retrieved per row on each side.
    M, ef : int
        HNSW graph degree and search breadth.
    num_threads : int, optional
        Graph threads (default: all cores). HNSW insertion order depends on
        threads, so results are reproducible only with ``num_threads=1``.
    """

    def __init__(self, *, ann_k: int = 64, M: int = 16, ef: int = 128, num_threads: Optional[int] = None):
        self.ann_k, self.M, self.ef = int(ann_k), int(M), int(ef)
        self.num_threads = num_threads

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


class PoolProposer(Proposer):
    """CSLS mutual top-``k`` restricted to fixed candidate lists (see :func:`pool_candidate_lists`).

    Parameters
    ----------
    cand_a : ndarray, shape (N_A, M)
    cand_b : ndarray, shape (N_B, M)
        Candidate rows per row of each side; ``-1`` pads. Checked once, here
        (:class:`crossembed.kernels.CandidateLists`): a round's views share them.
    num_threads : int, optional
        Kernel threads (default: all cores).
    """

    def __init__(self, cand_a: np.ndarray, cand_b: np.ndarray, *, num_threads: Optional[int] = None):
        self.lists = kernels.CandidateLists(cand_a, cand_b)
        self.num_threads = num_threads

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        return kernels.csls_mutual_topk_lists(
            SA,
            SB,
            self.lists,
            k=k,
            csls_k=csls_k,
            exclude_a=exclude_a,
            exclude_b=exclude_b,
            num_threads=self.num_threads,
        )

    def one_thread(self) -> PoolProposer:
        """The same lists on one kernel thread: a view's list kernels are bound by memory and scale
        poorly, so a round runs its views side by side instead."""
        other = copy.copy(self)  # shares the checked lists
        other.num_threads = 1
        return other

    def __repr__(self) -> str:
        return f"PoolProposer({self.lists!r})"
