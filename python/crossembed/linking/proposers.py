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
"""

from __future__ import annotations

import copy
from typing import Optional, Tuple

import numpy as np

from crossembed import kernels

__all__ = ["ExactProposer", "PoolProposer", "Proposer", "pool_candidate_lists"]


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
