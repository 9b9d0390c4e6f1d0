"""Seeds from the two collections' shapes alone: ``GEHLinker(...).link(A, B)`` with no seed pairs.

:class:`SeedSearch` finds starting pairs the way mini-vec2vec (Dar 2025)
aligns two embedding spaces without paired data, then says how sure it is
(formulas: docs/methods.md#geh-seedless):

1. **Cluster matching.** Each side (centred unit rows, a random sample of
   ``rows`` rows) is clustered by spherical k-means into ``clusters``
   centres; the centres' cosine matrices are matched as a quadratic
   assignment problem (which centre of B plays which centre of A, judged by
   how the centres sit relative to each other), from ``runs`` clusterings
   and random starts, keeping the matching whose two cosine matrices agree
   best.
2. **Pseudo-pairs.** Every row becomes its standardised cosines to its
   side's matched centres (a relative representation in a space both sides
   share); mutual CSLS nearest neighbours of those rows are the first
   dictionary.
3. **Self-learning.** ``refine`` times: regularised CCA
   (:class:`~crossembed.linking.maps.CCAMap`) fitted on the dictionary, the
   mutual CSLS pairs of its scores the next dictionary.
4. **Seeds and confidence.** The ``n_seeds`` best-scored pairs are the
   seeds. Self-learning always converges to *some* self-consistent map, so
   a pair re-found by maps fitted on the others proves nothing; instead the
   whole search runs a second time on the same rows from new clusterings and
   starts, and the confidence is the share of the seeds it finds too. Two
   searches that found the true alignment agree; two that converged to
   wrong maps land on different ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import numpy as np

from crossembed import kernels
from crossembed._config import Configured, set_checked
from crossembed._validation import check_fraction, check_int
from crossembed.linking.maps import CCAMap
from crossembed.linking.pairs import contains
from crossembed.linking.preprocess import unit_rows

__all__ = ["SeedSearch", "match_centres", "relative_rows", "spherical_kmeans"]

# Lloyd steps of each clustering
_KMEANS_STEPS = 25


def spherical_kmeans(X: np.ndarray, k: int, rng: np.random.Generator, *, steps: int = _KMEANS_STEPS):
    """``(centres (k, D) unit rows, labels (N,))`` of spherical k-means on the unit rows ``X``, started
    from ``k`` random rows; an emptied centre restarts at a random row."""
    centres = X[rng.choice(len(X), size=k, replace=False)].astype(np.float64)
    for _ in range(steps):
        labels = np.argmax(X @ centres.T.astype(np.float32), axis=1)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, X)
        empty = ~np.isin(np.arange(k), labels)
        sums[empty] = X[rng.choice(len(X), size=int(empty.sum()), replace=False)]
        centres = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    centres = centres.astype(np.float32)
    return centres, np.argmax(X @ centres.T, axis=1)


def match_centres(GA: np.ndarray, GB: np.ndarray, rng: np.random.Generator, *, starts: int = 10):
    """``(perm, disagreement)``: centre ``i`` of A matched to centre ``perm[i]`` of B, the permutation
    minimising ``|GA - GB[perm][:, perm]|_F^2`` found by FAQ (scipy's quadratic assignment) from
    ``starts`` random starts, and that squared distance."""
    from scipy.optimize import quadratic_assignment

    best, best_cost = np.arange(len(GA)), np.inf
    for _ in range(starts):
        seed = int(rng.integers(2**31))
        res = quadratic_assignment(
            GA, GB, method="faq", options={"maximize": True, "P0": "randomized", "rng": np.random.default_rng(seed)}
        )
        perm = np.asarray(res.col_ind)
        cost = float(((GA - GB[np.ix_(perm, perm)]) ** 2).sum())
        if cost < best_cost:
            best, best_cost = perm, cost
    return best, best_cost


def relative_rows(X: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Unit rows of each row's cosines to ``anchors``, every column standardised over the rows (a
    representation two sides share once their anchors correspond)."""
    R = X @ anchors.T
    return unit_rows((R - R.mean(axis=0)) / np.maximum(R.std(axis=0), 1e-12))


def mutual_pairs(XA: np.ndarray, XB: np.ndarray, *, csls_k: int = 10, num_threads=None):
    """One-to-one mutual CSLS nearest neighbours of two row sets of one width, best score first."""
    return kernels.csls_mutual_topk(XA, XB, k=1, csls_k=csls_k, num_threads=num_threads)


@dataclass(frozen=True, kw_only=True)
class SeedSearch(Configured):
    """How :class:`~crossembed.linking.geh.GEHLinker` finds its seeds when none are given (module docstring).

    Parameters
    ----------
    n_seeds : int
        Seed pairs handed to the rounds, ``>= 2`` (default 15, the table's seeded setting).
    clusters : int
        k-means centres a side, ``>= 3`` (default 24).
    runs : int
        Clusterings a side tried, each matched from several starts; the best-agreeing matching is kept
        (default 4).
    rows : int
        Rows a side the search runs on, a random sample above that, ``>= clusters`` (default 4,000).
    refine : int
        Self-learning steps, ``>= 1`` (default 6).
    dictionary : float
        Share in (0, 1] of each step's mutual pairs (best scored first) that the next map is fitted on
        (default 0.5).
    min_confidence : float
        Confidence in [0, 1] below which the seeds are not used: the link has no links (and a warning
        says so) instead of running the rounds from seeds two searches disagree on (default 0.5).
    """

    kind = "seed-search"
    n_seeds: int = 15
    clusters: int = 24
    runs: int = 4
    rows: int = 4000
    refine: int = 6
    dictionary: float = 0.5
    min_confidence: float = 0.5

    def __post_init__(self):
        clusters = check_int(self.clusters, "clusters", low=3)
        set_checked(
            self,
            n_seeds=check_int(self.n_seeds, "n_seeds", low=2),
            clusters=clusters,
            runs=check_int(self.runs, "runs", low=1),
            rows=check_int(self.rows, "rows", low=clusters),
            refine=check_int(self.refine, "refine", low=1),
            dictionary=check_fraction(self.dictionary, "dictionary"),
            min_confidence=check_fraction(self.min_confidence, "min_confidence", allow_zero=True),
        )

    def find(self, A: np.ndarray, B: np.ndarray, rng: np.random.Generator, *, num_threads=None):
        """``(seeds (s, 2), confidence, info)`` for the preprocessed unit rows ``A`` and ``B``.

        ``confidence`` is the share of the seeds that a second, independent search on the same rows
        finds too (module docstring); ``info`` holds the search's figures for the fit's history."""
        rows_a = _sample(len(A), self.rows, rng)
        rows_b = _sample(len(B), self.rows, rng)
        SA, SB = np.asarray(A[rows_a], np.float32), np.asarray(B[rows_b], np.float32)
        pairs, info = self._search(SA, SB, rng, num_threads)
        again, _ = self._search(SA, SB, rng, num_threads)
        seeds = pairs[: self.n_seeds]
        confidence = float(contains(again, seeds, len(SB)).mean()) if len(seeds) else 0.0
        info.update(seeds=int(len(seeds)), confidence=round(confidence, 4))
        return np.stack([rows_a[seeds[:, 0]], rows_b[seeds[:, 1]]], axis=1), confidence, info

    def _search(self, SA: np.ndarray, SB: np.ndarray, rng: np.random.Generator, num_threads) -> Tuple[np.ndarray, Dict]:
        """One search (steps 1-3 of the module docstring): the last mutual pairs, best first, and its figures."""
        k = min(self.clusters, len(SA), len(SB))
        best: Tuple[float, Any] = (np.inf, None)
        for _ in range(self.runs):
            CA, _ = spherical_kmeans(SA, k, rng)
            CB, _ = spherical_kmeans(SB, k, rng)
            perm, cost = match_centres(CA @ CA.T, CB @ CB.T, rng)
            if cost < best[0]:
                best = (cost, (CA, CB[perm]))
        CA, CB = best[1]
        pairs, _ = mutual_pairs(relative_rows(SA, CA), relative_rows(SB, CB), num_threads=num_threads)
        scorer = CCAMap(n_components=min(128, SA.shape[1], SB.shape[1]))
        first = len(pairs)
        for _ in range(self.refine):
            if len(pairs) < 2:
                break
            fit_on = pairs[: max(2, int(np.ceil(self.dictionary * len(pairs))))]
            pairs, _ = mutual_pairs(*scorer.rows(SA, SB, fit_on), num_threads=num_threads)
        info = {"seed_search": True, "centre_disagreement": round(float(best[0]), 4), "first_pairs": int(first)}
        return pairs, {**info, "pairs": int(len(pairs))}


def _sample(n: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    return np.arange(n) if n <= rows else np.sort(rng.choice(n, size=rows, replace=False))
