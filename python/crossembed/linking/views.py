"""Signatures and view anchors: the two per-view choices of GEH.

A *signature* describes every row by its similarity to the view's anchors
on its own side; a *view sampler* picks which pool anchors a view uses. Both
are the paper's (kernel signatures, farthest-point views). Another signature
is an object with ``__call__(X, anchors, *, sigma, num_threads)``,
``from_cosines(cosines, cols, *, sigma, num_threads)`` and ``reads_cosines``
(whether a round may compute the cosines once for all its views); another
sampler follows :class:`ViewSampler`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

import numpy as np

from crossembed import kernels
from crossembed._config import Configured, set_checked
from crossembed._validation import check_int

__all__ = ["FarthestPointViews", "KernelSignatures", "ViewSampler", "farthest_point_sampling"]


@dataclass(frozen=True)
class KernelSignatures(Configured):
    """The paper's signatures: Gaussian-kernel similarities to the anchors (:func:`~crossembed.kernels.anchor_signatures`).

    ``signatures(X, anchors, sigma=, num_threads=) -> S``: ``sigma`` is the
    kernel width, None for the anchors' median cosine distance; a fit passes
    the value it read from the pool's Gram matrix. A round may compute each
    side's cosines to its pool once and read each view's signatures off them
    (:meth:`from_cosines`): the same values, one GEMM per round.
    """

    kind = "kernel"
    #: whether :meth:`from_cosines` gives this object's signatures (a round then computes the cosines)
    reads_cosines = True

    def __call__(self, X: np.ndarray, anchors: np.ndarray, *, sigma: Optional[float] = None, num_threads=None):
        return kernels.anchor_signatures(X, anchors, sigma=sigma, num_threads=num_threads)

    def from_cosines(self, cosines: kernels.AnchorCosines, cols: np.ndarray, *, sigma: float, num_threads=None):
        """The signatures against the anchors in columns ``cols`` of ``cosines``."""
        return cosines.signatures(cols, sigma=sigma, num_threads=num_threads)


def farthest_point_sampling(
    X: Optional[np.ndarray],
    size: int,
    start: int,
    *,
    gram: Optional[np.ndarray] = None,
    rows: Optional[np.ndarray] = None,
) -> np.ndarray:
    """Greedy farthest-point sample of ``size`` rows of unit-norm ``X`` (cosine distance).

    Starts at row ``start``; each step adds the row farthest from everything
    chosen so far (ties: lower index). Returns row indices in pick order.
    Alternatively ``gram`` (the cosines of a larger set) and ``rows`` (the
    sampled rows' positions in it) replace ``X`` (pass None): cosines are read,
    not recomputed.
    """
    if gram is None:
        n = len(X)

        def cos_to(j: int) -> np.ndarray:
            return X @ X[j]
    else:
        rows = np.arange(len(gram)) if rows is None else np.asarray(rows)
        n = len(rows)

        def cos_to(j: int) -> np.ndarray:
            return gram[rows[j], rows]

    size = min(size, n)
    chosen = np.empty(size, np.int64)
    chosen[0] = start
    dist = 1.0 - cos_to(start)
    dist[start] = -np.inf
    for t in range(1, size):
        nxt = int(np.argmax(dist))
        chosen[t] = nxt
        np.minimum(dist, 1.0 - cos_to(nxt), out=dist)
        dist[chosen[: t + 1]] = -np.inf
    return chosen


class ViewSampler(Protocol):
    def __call__(
        self,
        pool_a: np.ndarray,
        n_seeds: int,
        size: int,
        rng: np.random.Generator,
        subset: Optional[np.ndarray],
        *,
        gram: Optional[np.ndarray] = None,
    ) -> np.ndarray:
        """Sorted pool positions of one view's ``size`` anchors, drawn from ``subset`` (default: all).

        ``pool_a`` holds the pool's unit A-side vectors; its first ``n_seeds``
        rows are the seeds. ``gram`` is ``pool_a @ pool_a.T`` when the round
        computed it (None for large pools); a sampler may read cosines from it.
        """


@dataclass(frozen=True, kw_only=True)
class FarthestPointViews(Configured):
    """The paper's views: farthest-point sampling (on A's side) from a random seed pair.

    Parameters
    ----------
    max_candidates : int
        FPS runs over at most this many pool anchors (a random subset, the
        seeds kept; default 8192): each step is a pass over the candidates,
        so a huge pool would make one view cost minutes.
    """

    kind = "farthest-point"
    max_candidates: int = 8192

    def __post_init__(self):
        set_checked(self, max_candidates=check_int(self.max_candidates, "max_candidates", low=2))

    def __call__(self, pool_a, n_seeds, size, rng, subset=None, *, gram=None):
        cand = np.arange(len(pool_a)) if subset is None else np.sort(subset)
        if len(cand) > self.max_candidates:
            seeds = cand[cand < n_seeds]
            rest = cand[cand >= n_seeds]
            keep = rng.choice(len(rest), size=max(0, self.max_candidates - len(seeds)), replace=False)
            cand = np.concatenate([seeds, np.sort(rest[keep])])
        size = min(size, len(cand))
        seeds_in = cand[cand < n_seeds]
        start_pos = int(rng.choice(seeds_in)) if len(seeds_in) else int(rng.choice(cand))
        start = int(np.searchsorted(cand, start_pos))
        if gram is None:
            return np.sort(cand[farthest_point_sampling(pool_a[cand], size, start)])
        return np.sort(cand[farthest_point_sampling(None, size, start, gram=gram, rows=cand)])
