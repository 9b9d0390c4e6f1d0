"""Embedding-translation baselines beside GEH: linear maps between two spaces from no or few pairs.

Both are implemented from their papers' descriptions and return the same
:class:`~crossembed.linking.LinkResult` as GEH (mutual CSLS nearest
neighbours of the mapped rows, ``csls_k = 10``), so they run in the same
harness; ``rows(A, B, seeds)`` gives the two sides' rows in one space for
the translation protocol (top-1, mean rank, FOSCTTM). Both assume every row
has a partner: they link every mutual pair and have no no-partner decision.

* :class:`MiniVec2Vec` (Dar 2025): centre and normalise; match k-means
  centres of the two sides by quadratic assignment of their cosine matrices,
  describe every row by its cosines to its side's matched centres, and pair
  each A row with the mean of its nearest B rows in that description
  (pseudo-pairs, over several runs); orthogonal Procrustes on the
  pseudo-pairs; refinement by matching (each mapped A row of a sample paired
  with the mean of its nearest B rows, Procrustes, the map smoothed towards
  the previous one) and then by clusters (k-means centres of the mapped A
  rows matched to B's by mutual nearest neighbours, Procrustes, smoothed).
  With seeds, the seed rows replace the matched centres.
* :class:`VecMap` (Artetxe et al. 2018): unit rows, centred, unit again;
  the first dictionary from each row's sorted similarities to the other rows
  of its side (of ``sqrt(X X')``), matched across sides by CSLS (or the
  seeds); then self-learning: whiten each side on the dictionary, map
  orthogonally (SVD), re-weight by the singular values' square roots,
  de-whiten, and induce the next dictionary by CSLS in both directions with
  stochastic dropout of the similarities (keep probability 0.1, doubled when
  the objective stalls, until 1).

Sides of different widths are zero-padded to the wider one for Procrustes
(:class:`MiniVec2Vec`); :class:`VecMap` maps each side into a shared space
of ``min(D_A, D_B)`` dimensions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from crossembed._config import Configured, set_checked
from crossembed._validation import check_fraction, check_int, check_random_state
from crossembed.linking._inputs import check_link_inputs
from crossembed.linking.baselines import procrustes
from crossembed.linking.preprocess import Center, unit_rows
from crossembed.linking.result import LinkResult
from crossembed.linking.seedless import match_centres, mutual_pairs, relative_rows, spherical_kmeans

__all__ = ["MiniVec2Vec", "VecMap"]

Rows = Tuple[np.ndarray, np.ndarray]
_CENTER = Center()
# CSLS neighbours of the links and of VecMap's dictionary induction
_CSLS_K = 10


def _inputs(A, B, seeds):
    """Checked sides (centred unit rows) and seeds (an empty ``(0, 2)`` array for None)."""
    none = np.zeros((0, 2), np.int64)
    A, B, seeds = check_link_inputs(A, B, none if seeds is None else seeds, min_seeds=0 if seeds is None else 2)
    return _CENTER.apply(np.asarray(A, np.float32)), _CENTER.apply(np.asarray(B, np.float32)), seeds


def _link(XA: np.ndarray, XB: np.ndarray, seeds: np.ndarray, history) -> LinkResult:
    pairs, scores = mutual_pairs(XA, XB, csls_k=_CSLS_K)
    if len(seeds):  # the seeds are given, not found: they take no part in the links
        keep = ~np.isin(pairs[:, 0], seeds[:, 0]) & ~np.isin(pairs[:, 1], seeds[:, 1])
        pairs, scores = pairs[keep], scores[keep]
    return LinkResult(pairs, scores.astype(np.float64), np.zeros(len(pairs), np.int64), history)


def _pad(X: np.ndarray, dim: int) -> np.ndarray:
    return X if X.shape[1] == dim else np.pad(X, ((0, 0), (0, dim - X.shape[1])))


@dataclass(frozen=True, kw_only=True)
class MiniVec2Vec(Configured):
    """mini-vec2vec (module docstring): an orthogonal map from cluster matching, Procrustes and refinement.

    Parameters
    ----------
    clusters : int
        k-means centres a side for the pseudo-pairs, ``>= 3`` (default 24).
    neighbors : int
        B rows averaged into each pseudo-pair's target, ``>= 1`` (default 20).
    runs : int
        Clusterings whose pseudo-pairs are pooled, ``>= 1`` (default 4).
    iterations : int
        Matching refinements, ``>= 0`` (default 20).
    smoothing : float
        Weight in [0, 1) of the previous map in each refinement (default 0.5).
    refine_clusters : int
        Centres of the cluster refinement, ``>= 2`` (default 64).
    refine_neighbors : int
        B rows averaged into a matching refinement's targets, ``>= 1`` (default 5).
    sample : int
        A rows per matching refinement, ``>= 1`` (default 4,000).
    random_state : None, int or numpy Generator
    """

    kind = "mini-vec2vec"
    clusters: int = 24
    neighbors: int = 20
    runs: int = 4
    iterations: int = 20
    smoothing: float = 0.5
    refine_clusters: int = 64
    refine_neighbors: int = 5
    sample: int = 4000
    random_state: object = None

    def __post_init__(self):
        smoothing = check_fraction(self.smoothing, "smoothing", allow_zero=True)
        if smoothing >= 1.0:
            raise ValueError(f"smoothing must be below 1, got {self.smoothing!r}")
        set_checked(
            self,
            clusters=check_int(self.clusters, "clusters", low=3),
            neighbors=check_int(self.neighbors, "neighbors", low=1),
            runs=check_int(self.runs, "runs", low=1),
            iterations=check_int(self.iterations, "iterations", low=0),
            smoothing=smoothing,
            refine_clusters=check_int(self.refine_clusters, "refine_clusters", low=2),
            refine_neighbors=check_int(self.refine_neighbors, "refine_neighbors", low=1),
            sample=check_int(self.sample, "sample", low=1),
        )

    def rows(self, A, B, seeds=None) -> Rows:
        """``(A W, B)``: unit rows of both sides in B's (zero-padded) space; ``seeds`` (s, 2) or None."""
        A, B, seeds = _inputs(A, B, seeds)
        return self._rows(A, B, seeds, check_random_state(self.random_state))

    def link(self, A, B, seeds=None) -> LinkResult:
        """Mutual CSLS nearest neighbours of :meth:`rows` (given seeds left out of the links)."""
        tic = time.perf_counter()
        A, B, seeds = _inputs(A, B, seeds)
        XA, XB = self._rows(A, B, seeds, check_random_state(self.random_state))
        return _link(XA, XB, seeds, [{"method": self.kind, "seconds": round(time.perf_counter() - tic, 4)}])

    def _rows(self, A, B, seeds, rng) -> Rows:
        dim = max(A.shape[1], B.shape[1])
        A, B = _pad(A, dim), _pad(B, dim)
        W = procrustes(*self._pseudo_pairs(A, B, seeds, rng))
        for _ in range(self.iterations):  # refinement by matching
            rows = rng.choice(len(A), size=min(self.sample, len(A)), replace=False)
            target = _nearest_mean(unit_rows(A[rows] @ W), B, self.refine_neighbors)
            W = self._smooth(W, procrustes(A[rows], target))
        k = min(self.refine_clusters, len(A), len(B))  # refinement by clusters
        CA, labels = spherical_kmeans(unit_rows(A @ W), k, rng)
        CB, _ = spherical_kmeans(B, k, rng)
        pairs, _ = mutual_pairs(CA, CB)
        if len(pairs) >= 2:
            sums = np.zeros((k, dim), np.float32)
            np.add.at(sums, labels, A)
            W = self._smooth(W, procrustes(unit_rows(sums)[pairs[:, 0]], CB[pairs[:, 1]]))
        return unit_rows(A @ W), B

    def _smooth(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        return self.smoothing * old + (1.0 - self.smoothing) * new

    def _pseudo_pairs(self, A, B, seeds, rng) -> Rows:
        """Rows of A and their targets in B: each A row against the mean of its nearest B rows in the
        relative description (cosines to matched centres, or to the seeds)."""
        if len(seeds):
            return A, _nearest_mean(
                relative_rows(A, A[seeds[:, 0]]), relative_rows(B, B[seeds[:, 1]]), self.neighbors, B
            )
        k = min(self.clusters, len(A), len(B))
        sources, targets = [], []
        for _ in range(self.runs):
            CA, _ = spherical_kmeans(A, k, rng)
            CB, _ = spherical_kmeans(B, k, rng)
            perm, _ = match_centres(CA @ CA.T, CB @ CB.T, rng)
            sources.append(A)
            targets.append(_nearest_mean(relative_rows(A, CA), relative_rows(B, CB[perm]), self.neighbors, B))
        return np.concatenate(sources), np.concatenate(targets)


def _nearest_mean(Q: np.ndarray, R: np.ndarray, k: int, X: Optional[np.ndarray] = None) -> np.ndarray:
    """Per row of ``Q``, the mean of the rows of ``X`` (default ``R``) whose rows of ``R`` have the ``k``
    largest dot products with it (in tiles of rows: memory stays ``tile x len(R)``)."""
    X = R if X is None else X
    out = np.empty((len(Q), X.shape[1]), np.float32)
    k = min(k, len(R))
    for s in range(0, len(Q), 2048):
        S = Q[s : s + 2048] @ R.T
        top = np.argpartition(-S, k - 1, axis=1)[:, :k]
        out[s : s + 2048] = X[top].mean(axis=1)
    return out


@dataclass(frozen=True, kw_only=True)
class VecMap(Configured):
    """VecMap's self-learning (module docstring): an orthogonal map between whitened sides.

    Parameters
    ----------
    init_rows : int
        Rows a side (the first ones) whose sorted similarity rows give the unsupervised first
        dictionary, ``>= 2`` (default 4,000).
    max_iter : int
        Self-learning steps at most, ``>= 1`` (default 40).
    keep : float
        First keep probability in (0, 1] of the stochastic dictionary induction (default 0.1).
    patience : int
        Steps without an objective gain of ``1e-6`` before the keep probability doubles (or, at 1,
        the fit stops), ``>= 1`` (default 3).
    random_state : None, int or numpy Generator
    """

    kind = "vecmap"
    init_rows: int = 4000
    max_iter: int = 40
    keep: float = 0.1
    patience: int = 3
    random_state: object = None

    def __post_init__(self):
        set_checked(
            self,
            init_rows=check_int(self.init_rows, "init_rows", low=2),
            max_iter=check_int(self.max_iter, "max_iter", low=1),
            keep=check_fraction(self.keep, "keep"),
            patience=check_int(self.patience, "patience", low=1),
        )

    def rows(self, A, B, seeds=None) -> Rows:
        """``(A W_A, B W_B)``: unit rows of both sides in one space of ``min(D_A, D_B)`` dimensions."""
        A, B, seeds = _inputs(A, B, seeds)
        return self._rows(A, B, seeds, check_random_state(self.random_state))[0]

    def link(self, A, B, seeds=None) -> LinkResult:
        """Mutual CSLS nearest neighbours of :meth:`rows` (given seeds left out of the links)."""
        tic = time.perf_counter()
        A, B, seeds = _inputs(A, B, seeds)
        (XA, XB), steps = self._rows(A, B, seeds, check_random_state(self.random_state))
        info = {"method": self.kind, "steps": steps, "seconds": round(time.perf_counter() - tic, 4)}
        return _link(XA, XB, seeds, [info])

    def _rows(self, A, B, seeds, rng):
        pairs = seeds if len(seeds) else self._first_dictionary(A, B)
        keep, best, stale, steps = self.keep, -np.inf, 0, 0
        while steps < self.max_iter:
            steps += 1
            XA, XB = _whitened_map(A, B, pairs)
            pairs, objective = _induce(XA, XB, keep, rng)
            if objective > best + 1e-6:
                best, stale = objective, 0
                continue
            stale += 1
            if stale >= self.patience:
                if keep >= 1.0:
                    break
                keep, stale = min(1.0, 2 * keep), 0
        if len(seeds):
            pairs = np.concatenate([seeds, pairs])
        return _whitened_map(A, B, pairs), steps

    def _first_dictionary(self, A, B) -> np.ndarray:
        """CSLS pairs of the sides' sorted similarity rows (``sqrt(X X')``, the first ``init_rows`` rows)."""
        n = min(self.init_rows, len(A), len(B))
        return mutual_pairs(_sorted_similarities(A[:n]), _sorted_similarities(B[:n]), csls_k=_CSLS_K)[0]


def _sorted_similarities(X: np.ndarray) -> np.ndarray:
    """Each row's similarities under ``sqrt(X X') = U S U'``, sorted, then unit, centred, unit."""
    U, s, _ = np.linalg.svd(X.astype(np.float64), full_matrices=False)
    M = -np.sort(-((U * s) @ U.T), axis=1)
    return _CENTER.apply(M.astype(np.float32))


def _whitened_map(A: np.ndarray, B: np.ndarray, pairs: np.ndarray) -> Rows:
    """Both sides mapped through whitening on the dictionary ``pairs``, the orthogonal map between the
    whitened sides, re-weighting by the square roots of its singular values and de-whitening."""
    PA, PB = A[pairs[:, 0]].astype(np.float64), B[pairs[:, 1]].astype(np.float64)
    wa, ha = _whiten(PA)
    wb, hb = _whiten(PB)
    U, s, Vt = np.linalg.svd((PA @ wa).T @ (PB @ wb))
    r = min(A.shape[1], B.shape[1])
    U, s, V = U[:, :r], s[:r], Vt[:r].T
    # de-whitening: each side back to its own scale (wa^-1 = ha) along its mapped axes
    TA = wa @ U * np.sqrt(s) @ (U.T @ ha @ U)
    TB = wb @ V * np.sqrt(s) @ (V.T @ hb @ V)
    return unit_rows(A @ TA.astype(np.float32)), unit_rows(B @ TB.astype(np.float32))


def _whiten(P: np.ndarray):
    """``(C^-1/2, C^1/2)`` of the dictionary rows' second moment ``C = P'P`` (eigenvalues floored)."""
    w, V = np.linalg.eigh(P.T @ P)
    w = np.maximum(w, 1e-9 * max(float(w[-1]), 1e-300))
    return (V / np.sqrt(w)) @ V.T, (V * np.sqrt(w)) @ V.T


def _induce(XA: np.ndarray, XB: np.ndarray, keep: float, rng) -> Tuple[np.ndarray, float]:
    """The next dictionary, CSLS nearest neighbours in both directions with each similarity kept with
    probability ``keep`` (the others set to -inf), and the objective: the mean CSLS of its pairs."""
    S = XA @ XB.T
    ra = np.partition(S, -_CSLS_K, axis=1)[:, -_CSLS_K:].mean(axis=1)
    rb = np.partition(S, -_CSLS_K, axis=0)[-_CSLS_K:].mean(axis=0)
    C = 2 * S - ra[:, None] - rb[None, :]
    if keep < 1.0:
        C[rng.random(C.shape) >= keep] = -np.inf
    fwd, bwd = np.argmax(C, axis=1), np.argmax(C, axis=0)
    pairs = np.unique(
        np.concatenate([np.stack([np.arange(len(XA)), fwd], 1), np.stack([bwd, np.arange(len(XB))], 1)]), axis=0
    )
    objective = float(np.mean(np.max(C, axis=1)[np.isfinite(np.max(C, axis=1))]))
    return pairs, objective
