"""The seed paper's evaluation protocol: partial unknown overlap, few seeds.

``alpha`` of the objects appear in both A and B, the rest split half/half
into A-only and B-only objects; ``n_seeds`` overlap pairs are revealed as
seeds and removed from the truth. Rows of A and B are shuffled so that row
order leaks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import numpy as np

from crossembed._validation import as_array, as_int_matrix, check_fraction, check_int, check_random_state

__all__ = ["OverlapSplit", "make_partial_overlap", "evaluate_links"]


@dataclass(frozen=True)
class OverlapSplit:
    """One draw of the protocol.

    Attributes
    ----------
    rows_a, rows_b : ndarray of int64
        Object id of every row of A / B (take ``X_A[rows_a]``, ``X_B[rows_b]``).
    seeds : ndarray, shape (s, 2)
        Known pairs (row in A, row in B).
    truth : ndarray, shape (T, 2)
        The other overlap pairs, the ones a linker must find.
    """

    rows_a: np.ndarray
    rows_b: np.ndarray
    seeds: np.ndarray
    truth: np.ndarray


def make_partial_overlap(n_objects: int, *, alpha: float = 0.3, n_seeds: int = 15, random_state=None) -> OverlapSplit:
    """Draw which objects each side holds, the seeds and the hidden truth.

    Parameters
    ----------
    n_objects : int
        Objects available (rows of the full embedding matrices).
    alpha : float
        Fraction of objects present in both A and B, ``0 < alpha <= 1``.
    n_seeds : int
        Seed pairs revealed, ``>= 1`` and smaller than the overlap.
    random_state : None, int or numpy Generator

    Returns
    -------
    OverlapSplit
    """
    n_objects = check_int(n_objects, "n_objects", low=2)
    alpha = check_fraction(alpha, "alpha")
    n_seeds = check_int(n_seeds, "n_seeds", low=1)
    n_overlap = int(round(alpha * n_objects))
    if n_overlap <= n_seeds:
        raise ValueError(f"the overlap round(alpha * n_objects) = {n_overlap} must be larger than n_seeds ({n_seeds})")
    rng = check_random_state(random_state)
    perm = rng.permutation(n_objects)
    overlap = perm[:n_overlap]
    rest = perm[n_overlap:]
    half = len(rest) // 2
    objs_a = np.concatenate([overlap, rest[:half]])
    objs_b = np.concatenate([overlap, rest[half:]])
    rows_a = objs_a[rng.permutation(len(objs_a))]
    rows_b = objs_b[rng.permutation(len(objs_b))]
    pos_a = np.full(n_objects, -1, dtype=np.int64)
    pos_b = np.full(n_objects, -1, dtype=np.int64)
    pos_a[rows_a] = np.arange(len(rows_a))
    pos_b[rows_b] = np.arange(len(rows_b))
    pairs = np.stack([pos_a[overlap], pos_b[overlap]], axis=1)  # overlap is already in random order
    return OverlapSplit(
        rows_a=rows_a.astype(np.int64),
        rows_b=rows_b.astype(np.int64),
        seeds=pairs[:n_seeds].copy(),
        truth=pairs[n_seeds:].copy(),
    )


def evaluate_links(links, truth) -> Dict[str, float]:
    """Precision, recall and F1 of predicted links against the hidden truth.

    ``precision = correct / len(links)``, ``recall = correct / len(truth)``
    (the truth already excludes the seeds), F1 their harmonic mean; 0 when
    undefined. Both are taken as sets: a duplicated link counts once.
    """
    links = as_array(links, "links")
    links = as_int_matrix(links.reshape(-1, 2) if links.size == 0 else links, "links")
    truth = as_int_matrix(truth, "truth")
    if links.shape[1] != 2 or truth.shape[1] != 2:
        raise ValueError("links and truth must have shape (n, 2)")
    if len(truth) == 0:
        raise ValueError("truth must not be empty")
    # a link listed twice is one link (and a repeated truth pair one truth pair);
    # matched as rows, so no key a * n_b + b can overflow for huge ids
    links = np.unique(links, axis=0)
    truth = np.unique(truth, axis=0)
    correct = len(links) + len(truth) - len(np.unique(np.concatenate([links, truth]), axis=0))
    precision = correct / len(links) if len(links) else 0.0
    recall = correct / len(truth)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_links": len(links), "correct": correct}
