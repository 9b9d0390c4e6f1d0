"""Signatures and view anchors: the two per-view choices of GEH.

A *signature* describes every row by its similarity to the view's anchors
on its own side; a *view sampler* picks which pool anchors a view uses. The
defaults are the paper's (kernel signatures, farthest-point views); the
alternatives are the ablations ``docs/linking.md`` measures.
"""

from __future__ import annotations

from typing import Optional, Protocol

import numpy as np

from crossembed import kernels
from crossembed.linking._inputs import unit_rows

__all__ = [
    "FarthestPointViews",
    "RandomViews",
    "ViewSampler",
    "cosine_signatures",
    "farthest_point_sampling",
    "kernel_signatures",
]


def kernel_signatures(X: np.ndarray, anchors: np.ndarray, *, num_threads: Optional[int] = None) -> np.ndarray:
    """The paper's signatures: Gaussian-kernel similarities to the anchors (C++ :func:`anchor_signatures`)."""
    return kernels.anchor_signatures(X, anchors, num_threads=num_threads)


def cosine_signatures(X: np.ndarray, anchors: np.ndarray, *, num_threads: Optional[int] = None) -> np.ndarray:
    """Ablation: raw cosine distances to the anchors, with the same scale-free row normalisation."""
    return unit_rows(1.0 - X @ anchors.T)


def farthest_point_sampling(X: np.ndarray, size: int, start: int) -> np.ndarray:
    """Greedy farthest-point sample of ``size`` rows of unit-norm ``X`` (cosine distance).

    Starts at row ``start``; each step adds the row farthest from everything
    chosen so far (ties: lower index). Returns row indices in pick order.
    """
    n = len(X)
    size = min(size, n)
    chosen = np.empty(size, np.int64)
    chosen[0] = start
    dist = 1.0 - X @ X[start]
    dist[start] = -np.inf
    for t in range(1, size):
        nxt = int(np.argmax(dist))
        chosen[t] = nxt
        np.minimum(dist, 1.0 - X @ X[nxt], out=dist)
        dist[chosen[: t + 1]] = -np.inf
    return chosen


class ViewSampler(Protocol):
    def __call__(
        self, pool_a: np.ndarray, n_seeds: int, size: int, rng: np.random.Generator, subset: Optional[np.ndarray]
    ) -> np.ndarray:
        """Sorted pool positions of one view's ``size`` anchors, drawn from ``subset`` (default: all).

        ``pool_a`` holds the pool's unit A-side vectors; its first ``n_seeds`` rows are the seeds.
        """


class FarthestPointViews:
    """The paper's views: farthest-point sampling (on A's side) from a random seed pair."""

    def __call__(self, pool_a, n_seeds, size, rng, subset=None):
        cand = np.arange(len(pool_a)) if subset is None else np.sort(subset)
        size = min(size, len(cand))
        seeds_in = cand[cand < n_seeds]
        start_pos = int(rng.choice(seeds_in)) if len(seeds_in) else int(rng.choice(cand))
        start = int(np.searchsorted(cand, start_pos))
        return np.sort(cand[farthest_point_sampling(pool_a[cand], size, start)])

    def __repr__(self) -> str:
        return "FarthestPointViews()"


class RandomViews:
    """Ablation: a uniformly random anchor subset per view."""

    def __call__(self, pool_a, n_seeds, size, rng, subset=None):
        cand = np.arange(len(pool_a)) if subset is None else np.sort(subset)
        return np.sort(rng.choice(cand, size=min(size, len(cand)), replace=False))

    def __repr__(self) -> str:
        return "RandomViews()"
