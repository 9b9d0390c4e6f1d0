"""GEH's proposal step sharded over a Dask cluster.

:class:`DaskProposer` plugs into ``GEHLinker(proposer=...)``. B's signature
rows are split into shards, one task per shard; every task sees all of A's
signatures. CSLS needs two global quantities, so there are two passes:

1. per shard: each A row's ``csls_k`` best similarities inside the shard
   (merged into ``r_A``) and the shard columns' own ``r_B`` (exact locally,
   since the task sees every A row);
2. per shard, given ``r_A``: each A row's CSLS top-``k`` inside the shard
   (merged by score, ties to the lower index) and each shard column's
   top-``k`` A rows (exact locally).

The driver then keeps mutual pairs and makes them one-to-one greedily, so
the result is the one :func:`crossembed.reference.csls_mutual_topk` gives on
the whole matrices (float64 throughout). Nothing larger than
``N_A x shard`` is ever allocated, on any worker. The same code runs on a
``LocalCluster`` and on a real ``dask.distributed`` cluster.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from crossembed._validation import as_int_matrix, as_matrix, check_int
from crossembed.linking._inputs import active_rows
from crossembed.linking.pairs import greedy_one_to_one, positions

__all__ = ["DaskProposer", "sharded_csls_mutual_topk"]


def _top(values: np.ndarray, k: int, axis: int) -> np.ndarray:
    """Positions of the ``k`` largest entries along ``axis``, best first, ties to the lower position."""
    order = np.argsort(-values, axis=axis, kind="stable")
    return order[:k] if axis == 0 else order[:, :k]


def _pass_one(SA: np.ndarray, SB_shard: np.ndarray, csls_k: int, n_a: int) -> Tuple[np.ndarray, np.ndarray]:
    sim = SA @ SB_shard.T
    ka = min(csls_k, sim.shape[1])
    best_rows = -np.sort(-sim, axis=1)[:, :ka]  # this shard's contribution to r_A
    r_b = -np.sort(-sim, axis=0)[: min(csls_k, n_a), :].mean(axis=0)
    return best_rows, r_b


def _pass_two(SA, SB_shard, r_a, r_b, k: int, offset: int):
    csls = 2.0 * (SA @ SB_shard.T) - r_a[:, None] - r_b[None, :]
    kr = min(k, csls.shape[1])
    row_pos = _top(csls, kr, axis=1)
    row_val = np.take_along_axis(csls, row_pos, axis=1)
    col_top = _top(csls, min(k, csls.shape[0]), axis=0).T  # (shard, k) A positions per column
    return row_val, row_pos + offset, col_top


def _exclusions(exclude, n: int, name: str) -> Optional[np.ndarray]:
    """Excluded rows as validated int64 (integers in ``[0, n)``: no NaN, float or negative index)."""
    if exclude is None:
        return None
    return as_int_matrix(np.asarray(exclude).reshape(-1), name, ndim=1, high=n)


def sharded_csls_mutual_topk(
    client, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None, n_shards: Optional[int] = None
):
    """Mutual CSLS top-``k`` pairs with B sharded over ``client``'s workers (see module docstring).

    Returns ``pairs`` (P, 2) int64 sorted by descending score and ``scores`` (P,) float64.
    """
    SA = as_matrix(SA, "SA", dtype=np.float64, allow_empty=True)
    SB = as_matrix(SB, "SB", dtype=np.float64, allow_empty=True)
    if SA.shape[1] != SB.shape[1]:
        raise ValueError(f"SA and SB must be 2-D with the same width, got {SA.shape} and {SB.shape}")
    k, csls_k = check_int(k, "k", low=1), check_int(csls_k, "csls_k", low=1)
    rows = active_rows(_exclusions(exclude_a, len(SA), "exclude_a"), len(SA))
    cols = active_rows(_exclusions(exclude_b, len(SB), "exclude_b"), len(SB))
    if rows.size == 0 or cols.size == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0)
    if n_shards is None:
        n_shards = max(1, len(client.scheduler_info()["workers"]))
    n_shards = max(1, min(int(n_shards), cols.size))
    bounds = np.linspace(0, cols.size, n_shards + 1).astype(np.int64)
    sa = client.scatter(SA[rows], broadcast=True)
    shards = [client.scatter(SB[cols[lo:hi]]) for lo, hi in zip(bounds[:-1], bounds[1:])]

    first = client.gather([client.submit(_pass_one, sa, sh, csls_k, rows.size, pure=False) for sh in shards])
    ka = min(csls_k, cols.size)
    r_a = -np.sort(-np.concatenate([f[0] for f in first], axis=1), axis=1)[:, :ka]
    r_a = r_a.mean(axis=1)
    r_a_f = client.scatter(r_a, broadcast=True)
    second = client.gather(
        [
            client.submit(_pass_two, sa, sh, r_a_f, f[1], k, int(lo), pure=False)
            for sh, f, lo in zip(shards, first, bounds[:-1])
        ]
    )
    # merge each A row's per-shard top-k: by score descending, then lower column position
    vals = np.concatenate([s[0] for s in second], axis=1)
    pos = np.concatenate([s[1] for s in second], axis=1)
    order = _row_lexsort(vals, pos)
    kr = min(k, cols.size)
    row_top = np.take_along_axis(pos, order[:, :kr], axis=1)
    row_val = np.take_along_axis(vals, order[:, :kr], axis=1)
    col_top = np.concatenate([s[2] for s in second], axis=0)  # (n_cols, k) row positions
    cand_a = np.repeat(np.arange(rows.size), kr)
    cand_b = row_top.reshape(-1)
    cand_s = row_val.reshape(-1)
    mutual = (col_top[cand_b] == cand_a[:, None]).any(axis=1)
    a, b, s = cand_a[mutual], cand_b[mutual], cand_s[mutual]
    pairs = np.stack([rows[a], cols[b]], axis=1).astype(np.int64)
    # the same greedy one-to-one step as the C++ kernel: score desc, ties to the lower (a, b)
    chosen = greedy_one_to_one(pairs, s)
    return chosen, s[positions(pairs, chosen, len(SB))]


def _row_lexsort(vals: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per row: order by value descending, then position ascending."""
    by_pos = np.argsort(pos, axis=1, kind="stable")
    by_val = np.argsort(-np.take_along_axis(vals, by_pos, axis=1), axis=1, kind="stable")
    return np.take_along_axis(by_pos, by_val, axis=1)


class DaskProposer:
    """``GEHLinker(proposer=DaskProposer(client))``: GEH's top-k step on a Dask cluster.

    Parameters
    ----------
    client : dask.distributed.Client
    n_shards : int, optional
        Shards of B (default: one per worker).

    Examples
    --------
    >>> from dask.distributed import Client, LocalCluster  # doctest: +SKIP
    >>> with Client(LocalCluster(n_workers=2, processes=False)) as client:  # doctest: +SKIP
    ...     res = GEHLinker(proposer=DaskProposer(client)).link(A, B, seeds)
    """

    def __init__(self, client, *, n_shards: Optional[int] = None):
        if not hasattr(client, "submit") or not hasattr(client, "scatter"):
            raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__}")
        self.client = client
        self.n_shards = None if n_shards is None else check_int(n_shards, "n_shards", low=1)

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        return sharded_csls_mutual_topk(
            self.client, SA, SB, k=k, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, n_shards=self.n_shards
        )
