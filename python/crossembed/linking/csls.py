"""CSLS over candidate lists in numpy, in the C++ kernel's arithmetic.

:func:`crossembed.kernels.csls_mutual_topk_candidates` scores listed pairs
from the signatures. Where only the listed similarities are at hand (the
sharded path of :mod:`crossembed.distributed` merges them from its shards;
the map pass at scale, :mod:`crossembed.linking.mapcells`, keeps them with
its lists), the steps below redo the kernel's in its order of operations,
so the links are the kernel's bit for bit:

* ``r`` of a row (:func:`csls_hubness`): ``v`` the ``kc``-th best listed
  similarity (``kc = min(csls_k, listed)``), the similarities above ``v``
  summed in list order in float64, plus ``kc - #above`` copies of ``v``,
  over ``kc``; 0 for a row without candidates;
* ``CSLS(i, j) = 2 s_ij - (r_own(i) + r_other(j))`` in float64, rounded to
  float32 (:func:`csls_scores`);
* ties to the lower index, the same greedy one-to-one.
"""

from __future__ import annotations

import numpy as np

from crossembed._validation import as_int_matrix
from crossembed.linking.pairs import greedy_one_to_one, positions

__all__ = ["csls_from_candidate_dots", "csls_hubness", "csls_scores", "excluded_mask"]


def csls_hubness(values: np.ndarray, csls_k: int) -> np.ndarray:
    """The kernel's hubness term ``r`` per row (float64; module docstring).

    Parameters
    ----------
    values : ndarray, shape (N, M)
        Each row's listed similarities in list order, ``-inf`` where a slot
        lists no candidate. A caller whose lists are best first may pass only
        their first ``csls_k`` columns.
    csls_k : int
        Neighbours averaged, ``>= 1``.
    """
    finite = np.isfinite(values)
    kc = np.minimum(csls_k, finite.sum(axis=1))
    if values.shape[1] > csls_k:  # the kc-th best value needs an order
        v = -np.sort(-values, axis=1)[np.arange(len(values)), np.maximum(kc, 1) - 1]
    else:  # every listed value is among the best csls_k: v is the smallest
        v = np.where(finite, values, np.inf).min(axis=1, initial=np.inf)
    v = np.where(kc > 0, v, 0).astype(np.float64)
    above = values > v[:, None]
    # a sequential float64 sum in list order, as the kernel's loop (the zeros in between add nothing)
    total = np.cumsum(np.where(above, values, 0).astype(np.float64), axis=1)[:, -1] if values.shape[1] else 0.0
    total = total + (kc - above.sum(axis=1)) * v
    return np.where(kc > 0, total / np.maximum(kc, 1), 0.0)


def csls_scores(dots: np.ndarray, cand: np.ndarray, r_own: np.ndarray, r_other: np.ndarray) -> np.ndarray:
    """float32 ``2 s - (r_own(i) + r_other(j))`` of each row's listed similarities ``dots`` (N, M) to the
    candidates ``cand`` (N, M; ``-1`` slots read ``r_other[0]`` and are the caller's to mask)."""
    return (2.0 * np.asarray(dots, np.float64) - (r_own[:, None] + r_other[np.maximum(cand, 0)])).astype(np.float32)


def excluded_mask(exclude, n: int, name: str) -> np.ndarray:
    """Mask over ``n`` rows of those listed in ``exclude`` (None: none), checked: integers in ``[0, n)``
    (no NaN, float or negative index); a ValueError or TypeError names the argument ``name``."""
    mask = np.zeros(n, bool)
    if exclude is not None:
        mask[as_int_matrix(np.asarray(exclude).reshape(-1), name, ndim=1, high=n)] = True
    return mask


def csls_from_candidate_dots(
    dots_a, cand_a, dots_b, cand_b, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None
):
    """:func:`crossembed.kernels.csls_mutual_topk_candidates` from its similarities, bit for bit.

    ``dots_a``/``dots_b`` are :func:`crossembed.kernels.candidate_dots` of
    the two lists ``cand_a`` (N_A, M) and ``cand_b`` (N_B, M); the other
    arguments and the result ``(pairs, float32 scores)`` are the kernel's.
    """
    cand_a, cand_b = np.asarray(cand_a, np.int64), np.asarray(cand_b, np.int64)
    nb = len(cand_b)
    mask_a, mask_b = excluded_mask(exclude_a, len(cand_a), "exclude_a"), excluded_mask(exclude_b, nb, "exclude_b")

    def side(dots, cand, mask_own, mask_other):
        valid = (cand >= 0) & ~mask_own[:, None] & ~mask_other[np.maximum(cand, 0)]
        s = np.where(valid, dots, -np.inf).astype(np.float32)
        return s, valid, csls_hubness(s, csls_k)

    sa, va, ra = side(dots_a, cand_a, mask_a, mask_b)
    sb, vb, rb = side(dots_b, cand_b, mask_b, mask_a)
    kk = min(k, max(cand_a.shape[1], cand_b.shape[1]))

    def top(s, valid, cand, r_row, r_col):
        csls = csls_scores(s, cand, r_row, r_col)
        key = np.where(valid, -csls, np.inf)
        order = np.lexsort((np.where(valid, cand, np.iinfo(np.int64).max), key), axis=1)[:, :kk]
        return (
            np.take_along_axis(cand, order, axis=1),
            np.take_along_axis(csls, order, axis=1),
            np.take_along_axis(valid, order, axis=1),
        )

    ta, ta_score, ta_valid = top(sa, va, cand_a, ra, rb)
    tb, _, tb_valid = top(sb, vb, cand_b, rb, ra)
    i, t = np.nonzero(ta_valid)
    j = ta[i, t]
    mutual = ((tb[j] == i[:, None]) & tb_valid[j]).any(axis=1)
    pairs = np.stack([i[mutual], j[mutual]], axis=1).astype(np.int64)
    scores = ta_score[i[mutual], t[mutual]]
    if len(pairs) == 0:
        return pairs.reshape(0, 2), scores
    chosen = greedy_one_to_one(pairs, scores.astype(np.float64))
    return chosen, scores[positions(pairs, chosen, nb)]
