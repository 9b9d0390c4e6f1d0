"""The one pair representation of :mod:`crossembed.linking`.

A set of links or proposals is an ``(n, 2)`` int64 array of ``(row of A,
row of B)``. Where pairs must be compared, merged or looked up they are
keyed as ``a * n_b + b`` (exact in int64 for any realistic size), so no
code path builds Python tuples, sets or dicts of pairs.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

from crossembed.kernels import greedy_one_to_one

__all__ = ["count_new", "greedy_one_to_one", "merge_views", "pair_keys", "positions", "rank_by", "row_positions"]


def pair_keys(pairs: np.ndarray, n_b: int) -> np.ndarray:
    """``a * n_b + b`` per pair: sorted keys sort pairs by (a, b)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0] * n_b + pairs[:, 1]


def _from_keys(keys: np.ndarray, n_b: int) -> np.ndarray:
    return np.stack([keys // n_b, keys % n_b], axis=1)


def merge_views(
    pairs_list: List[np.ndarray], scores_list: List[np.ndarray], n_b: int
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique pairs over views (sorted by (a, b)), their mean score and their vote count."""
    pairs = np.concatenate(pairs_list) if pairs_list else np.zeros((0, 2), np.int64)
    scores = np.concatenate(scores_list).astype(np.float64) if scores_list else np.zeros(0)
    if len(pairs) == 0:
        return pairs.reshape(0, 2), scores, np.zeros(0, np.int64)
    ukey, inv, counts = np.unique(pair_keys(pairs, n_b), return_inverse=True, return_counts=True)
    mean = np.bincount(inv, weights=scores, minlength=len(ukey)) / counts
    return _from_keys(ukey, n_b), mean, counts.astype(np.int64)


def positions(pairs: np.ndarray, query: np.ndarray, n_b: int) -> np.ndarray:
    """Positions of the ``query`` pairs inside ``pairs`` (every query pair must be in ``pairs``).

    ``pairs`` sorted by (a, b), as :func:`merge_views` returns them, is searched
    directly; any other order is sorted first.
    """
    keys = pair_keys(pairs, n_b)
    if len(keys) < 2 or (keys[1:] >= keys[:-1]).all():
        return np.searchsorted(keys, pair_keys(query, n_b))
    order = np.argsort(keys, kind="stable")
    return order[np.searchsorted(keys[order], pair_keys(query, n_b))]


def contains(pairs: np.ndarray, query: np.ndarray, n_b: int) -> np.ndarray:
    """Boolean mask over ``query``: which of its pairs are in ``pairs``."""
    return np.isin(pair_keys(query, n_b), pair_keys(pairs, n_b))


def count_new(new: np.ndarray, old: np.ndarray, n_b: int) -> int:
    """How many pairs of ``new`` are not in ``old``."""
    return int((~contains(old, new, n_b)).sum())


def row_positions(rows: np.ndarray, n: int) -> np.ndarray:
    """``pos[row] = index of row in rows`` over ``n`` rows, -1 for rows not listed."""
    pos = np.full(n, -1, np.int64)
    pos[rows] = np.arange(len(rows))
    return pos


def rank_by(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """A score whose descending order is (primary desc, secondary desc): ranks, best = largest.

    :func:`greedy_one_to_one` takes one score; this turns a two-key order into one.
    """
    order = np.lexsort((-secondary, -primary))
    score = np.empty(len(order), np.float64)
    score[order] = np.arange(len(order), 0, -1, dtype=np.float64)
    return score
