"""Baselines in the GEH harness: same inputs, same :class:`LinkResult` output.

* :func:`procrustes_link` - orthogonal Procrustes fitted on the seeds, then
  mutual nearest neighbours (cosine) of ``A W`` and ``B``.
* :func:`relative_link` - relative representations (cosine to the seed
  anchors on each side, Moschella et al.), then mutual nearest neighbours.
* :func:`bootstrap_procrustes_link` - Procrustes re-fitted on the seeds plus
  the mutual pairs of the previous iteration (self-learning, as in VecMap).

When ``D_A != D_B`` the narrower side is zero-padded to the wider one, which
keeps Procrustes orthogonal (a rotation of the padded space).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from crossembed._validation import check_int
from crossembed.linking._inputs import check_link_inputs, mutual_nearest
from crossembed.linking.preprocess import unit_rows
from crossembed.linking.result import LinkResult

__all__ = ["procrustes", "procrustes_link", "relative_link", "bootstrap_procrustes_link"]


def _pad(X: np.ndarray, dim: int) -> np.ndarray:
    if X.shape[1] == dim:
        return X
    out = np.zeros((len(X), dim), np.float32)
    out[:, : X.shape[1]] = X
    return out


def procrustes(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Orthogonal ``W`` minimising ``||X W - Y||_F`` (``X``, ``Y`` of equal width): ``W = U V^T``."""
    U, _, Vt = np.linalg.svd(X.astype(np.float64).T @ Y.astype(np.float64))
    return (U @ Vt).astype(np.float32)


def _result(pairs, sims, seeds, history=None) -> LinkResult:
    return LinkResult(pairs, sims.astype(np.float64), np.zeros(len(pairs), np.int64), history or [])


def procrustes_link(A, B, seeds) -> LinkResult:
    """Orthogonal Procrustes on the seeds (unit rows, zero-padded), then mutual NN.

    Parameters
    ----------
    A : array_like, shape (N_A, D_A)
    B : array_like, shape (N_B, D_B)
    seeds : array_like of int, shape (s, 2)

    Returns
    -------
    LinkResult
        Links (seeds excluded); ``posterior`` holds the cosine of each pair.
    """
    A, B, seeds = check_link_inputs(A, B, seeds)
    dim = max(A.shape[1], B.shape[1])
    An, Bn = _pad(unit_rows(A), dim), _pad(unit_rows(B), dim)
    W = procrustes(An[seeds[:, 0]], Bn[seeds[:, 1]])
    pairs, sims = mutual_nearest(unit_rows(An @ W), Bn, exclude_a=seeds[:, 0], exclude_b=seeds[:, 1])
    return _result(pairs, sims, seeds)


def relative_link(A, B, seeds) -> LinkResult:
    """Relative representations: cosine to the seed anchors per side, unit rows, mutual NN."""
    A, B, seeds = check_link_inputs(A, B, seeds)
    An, Bn = unit_rows(A), unit_rows(B)
    RA = unit_rows(An @ An[seeds[:, 0]].T)
    RB = unit_rows(Bn @ Bn[seeds[:, 1]].T)
    pairs, sims = mutual_nearest(RA, RB, exclude_a=seeds[:, 0], exclude_b=seeds[:, 1])
    return _result(pairs, sims, seeds)


def bootstrap_procrustes_link(A, B, seeds, *, n_iter: int = 10, max_pairs: Optional[int] = None) -> LinkResult:
    """Iterative Procrustes: re-fit on seeds + the previous mutual pairs, ``n_iter`` times.

    Parameters
    ----------
    n_iter : int
        Re-fits after the first one.
    max_pairs : int, optional
        Use only the most similar ``max_pairs`` mutual pairs for the next fit
        (default: all of them).
    """
    A, B, seeds = check_link_inputs(A, B, seeds)
    n_iter = check_int(n_iter, "n_iter", low=1)
    max_pairs = None if max_pairs is None else check_int(max_pairs, "max_pairs", low=0)
    dim = max(A.shape[1], B.shape[1])
    An, Bn = _pad(unit_rows(A), dim), _pad(unit_rows(B), dim)
    train = seeds
    history = []
    for it in range(n_iter + 1):
        tic = time.perf_counter()
        W = procrustes(An[train[:, 0]], Bn[train[:, 1]])
        pairs, sims = mutual_nearest(unit_rows(An @ W), Bn, exclude_a=seeds[:, 0], exclude_b=seeds[:, 1])
        history.append(
            {"round": it, "pool": len(train), "links": len(pairs), "seconds": round(time.perf_counter() - tic, 4)}
        )
        top = pairs if max_pairs is None else pairs[:max_pairs]
        train = np.concatenate([seeds, top])
    return _result(pairs, sims, seeds, history)
