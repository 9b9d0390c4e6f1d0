"""Input checks and small numpy helpers shared by GEH and the baselines."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from crossembed._validation import as_int_matrix, as_matrix

#: rows per chunk of a pass over a whole side of a large fit (its temporaries stay ~CHUNK x D)
ROW_CHUNK = 1 << 16


def check_link_inputs(A, B, seeds, *, min_seeds: int = 2) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``A`` (N_A, D_A), ``B`` (N_B, D_B) and one-to-one ``seeds`` (s, 2).

    float16 sides stay float16 (a memory-mapped one is not copied); anything else becomes float32."""
    A = as_matrix(A, "A", dtype=_storage(A))
    B = as_matrix(B, "B", dtype=_storage(B))
    seeds = as_int_matrix(seeds, "seeds")
    if seeds.shape[1] != 2:
        raise ValueError(f"seeds must have shape (s, 2), got {seeds.shape}")
    if len(seeds) < min_seeds:
        raise ValueError(f"seeds must hold at least {min_seeds} pairs, got {len(seeds)}")
    if not len(seeds):
        return A, B, seeds
    if seeds[:, 0].max() >= len(A):
        raise ValueError(f"seeds has an A index {seeds[:, 0].max()} out of range (A has {len(A)} rows)")
    if seeds[:, 1].max() >= len(B):
        raise ValueError(f"seeds has a B index {seeds[:, 1].max()} out of range (B has {len(B)} rows)")
    if len(np.unique(seeds[:, 0])) != len(seeds) or len(np.unique(seeds[:, 1])) != len(seeds):
        raise ValueError("seeds must be one-to-one (a row of A or B appears twice)")
    return A, B, seeds


def _storage(X) -> type:
    return np.float16 if getattr(X, "dtype", None) == np.float16 else np.float32


def mutual_nearest(X: np.ndarray, Y: np.ndarray, *, exclude_a=None, exclude_b=None, tile: int = 2048):
    """One-to-one pairs (i, j) where j is i's best row of Y and i is j's best row of X (dot product).

    Tiled over X so memory stays O(tile * N_Y). Excluded rows take no part.
    Returns ``pairs`` (P, 2) int64 sorted by descending similarity and the similarities.
    """
    na, nb = len(X), len(Y)
    ok_a = np.ones(na, bool)
    ok_b = np.ones(nb, bool)
    if exclude_a is not None:
        ok_a[np.asarray(exclude_a, dtype=np.int64)] = False
    if exclude_b is not None:
        ok_b[np.asarray(exclude_b, dtype=np.int64)] = False
    best_j = np.full(na, -1, np.int64)
    best_sa = np.full(na, -np.inf, np.float32)
    best_i = np.full(nb, -1, np.int64)
    best_sb = np.full(nb, -np.inf, np.float32)
    Yv = Y[ok_b]
    idx_b = np.flatnonzero(ok_b)
    idx_a = np.flatnonzero(ok_a)
    if len(idx_a) == 0 or len(idx_b) == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
    for start in range(0, len(idx_a), tile):
        rows = idx_a[start : start + tile]
        S = X[rows] @ Yv.T
        j = np.argmax(S, axis=1)
        best_j[rows] = idx_b[j]
        best_sa[rows] = S[np.arange(len(rows)), j]
        i = np.argmax(S, axis=0)
        s = S[i, np.arange(S.shape[1])]
        better = s > best_sb[idx_b]
        best_sb[idx_b[better]] = s[better]
        best_i[idx_b[better]] = rows[i[better]]
    a = idx_a[best_j[idx_a] >= 0]
    mutual = a[best_i[best_j[a]] == a]
    pairs = np.stack([mutual, best_j[mutual]], axis=1)
    sims = best_sa[mutual]
    order = np.lexsort((pairs[:, 0], -sims))
    return pairs[order], sims[order]
