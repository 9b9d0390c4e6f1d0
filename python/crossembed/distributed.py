"""GEH's proposal step sharded over a Dask cluster.

Two candidate sources for ``GEHLinker(candidates=...)``, both exact (the
same links as their local twins in one process):

* :class:`DaskCandidates`: the pool path (per-round candidate lists,
  candidate-restricted CSLS per view, :class:`~crossembed.linking.candidates.PoolCandidates`)
  with B's rows sharded (its class docstring);
* :class:`DaskExactCandidates`: the exhaustive CSLS of every view
  (:class:`~crossembed.linking.candidates.ExactCandidates`), through
  :class:`DaskProposer`.

:class:`DaskProposer`: B's signature
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

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import numpy as np

from crossembed import kernels
from crossembed._config import set_checked
from crossembed._validation import as_matrix, check_int
from crossembed.linking.candidates import CandidateSource, PoolCandidates
from crossembed.linking.csls import csls_from_candidate_dots, excluded_mask
from crossembed.linking.pairs import greedy_one_to_one, positions
from crossembed.linking.proposers import Proposer

__all__ = [
    "DaskCandidates",
    "DaskExactCandidates",
    "DaskProposer",
    "sharded_csls_mutual_topk",
]


def _check_client(client):
    if not hasattr(client, "submit") or not hasattr(client, "scatter"):
        raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__}")
    return client


def _check_shards(n_shards: Optional[int]) -> Optional[int]:
    return None if n_shards is None else check_int(n_shards, "n_shards", low=1)


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
    rows = np.flatnonzero(~excluded_mask(exclude_a, len(SA), "exclude_a"))
    cols = np.flatnonzero(~excluded_mask(exclude_b, len(SB), "exclude_b"))
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


class DaskProposer(Proposer):
    """GEH's exhaustive top-k step on a Dask cluster (the proposer of :class:`DaskExactCandidates`).

    Parameters
    ----------
    client : dask.distributed.Client
    n_shards : int, optional
        Shards of B (default: one per worker).
    """

    def __init__(self, client, *, n_shards: Optional[int] = None):
        self.client, self.n_shards = _check_client(client), _check_shards(n_shards)

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        return sharded_csls_mutual_topk(
            self.client, SA, SB, k=k, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b, n_shards=self.n_shards
        )


class _OnClient:
    """What both Dask sources share: their client (checked, left out of the config) and shard count."""

    client: Any
    n_shards: Optional[int]

    def __post_init__(self):
        checks = getattr(super(), "__post_init__", None)  # the pool source's settings
        if checks is not None:
            checks()
        _check_client(self.client)
        set_checked(self, n_shards=_check_shards(self.n_shards))

    def get_config(self) -> Dict[str, Any]:
        """The source's settings (:meth:`crossembed._config.Configured.get_config`) without the client."""
        config = super().get_config()
        del config["client"]
        return config


@dataclass(frozen=True)
class DaskExactCandidates(_OnClient, CandidateSource):
    """``GEHLinker(candidates=DaskExactCandidates(client))``: every view's exhaustive CSLS with B sharded.

    ``client`` and ``n_shards`` (default: one shard of B per worker) are
    those of :class:`DaskProposer`, which runs every view.

    Examples
    --------
    >>> from dask.distributed import Client, LocalCluster  # doctest: +SKIP
    >>> with Client(LocalCluster(n_workers=2, processes=False)) as client:  # doctest: +SKIP
    ...     res = GEHLinker(candidates=DaskExactCandidates(client)).link(A, B, seeds)
    """

    kind = "dask-exact"
    client: Any = field(repr=False, compare=False)
    n_shards: Optional[int] = field(default=None, kw_only=True)

    def for_fit(self, fit, *, every_row: bool):
        proposer = DaskProposer(self.client, n_shards=self.n_shards)  # it holds no fit state
        return lambda _fit: proposer


# --------------------------------------------------------------------------- the "pool" path, B sharded
def _shard_candidate_lists(SA: np.ndarray, SB_shard: np.ndarray, m: int, offset: int):
    """One shard's part of :func:`~crossembed.linking.proposers.pool_candidate_lists`."""
    score_a, cand_a, _, cand_b = kernels.topk_rows_and_columns(SA, SB_shard, m)
    return score_a, cand_a + offset, cand_b


def _shard_dots(SA: np.ndarray, SB_shard: np.ndarray, cand_a_local: np.ndarray, cand_b_shard: np.ndarray):
    """This shard's candidate similarities: A rows with their shard candidates (listed ones only), shard rows with theirs."""
    dots_a = kernels.candidate_dots(SA, SB_shard, cand_a_local)
    return dots_a[cand_a_local >= 0], kernels.candidate_dots(SB_shard, SA, cand_b_shard)


@dataclass(frozen=True)
class DaskCandidates(_OnClient, PoolCandidates):
    """``GEHLinker(candidates=DaskCandidates(client))``: GEH's pool path with B sharded.

    Each task holds one shard of B's signature rows (and all of A's, which
    every shard needs). Per round, each shard finds every A row's ``k`` best
    rows inside it and its own rows' ``k`` best A rows; the driver merges the
    A side by score (ties to the lower row). Per view, each shard computes
    the similarities of the candidate pairs that touch it
    (:func:`crossembed.kernels.candidate_dots`) and the driver scores them
    (:func:`~crossembed.linking.csls.csls_from_candidate_dots`). Both merges are exact, so the links
    equal the local :class:`~crossembed.linking.candidates.PoolCandidates`
    ones for the same ``random_state``.

    Parameters
    ----------
    client : dask.distributed.Client
    n_shards : int, optional
        Shards of B (default: one per worker).
    k, anchors, refresh
        As for :class:`~crossembed.linking.candidates.PoolCandidates`.
    """

    kind = "dask-pool"
    client: Any = field(repr=False, compare=False)
    n_shards: Optional[int] = field(default=None, kw_only=True)

    def shard_bounds(self, n_b: int) -> np.ndarray:
        """Row bounds of the shards of ``n_b`` rows of B (one shard per worker, or ``n_shards``)."""
        n = self.n_shards or max(1, len(self.client.scheduler_info()["workers"]))
        return np.linspace(0, n_b, max(1, min(n, n_b)) + 1).astype(np.int64)

    def candidate_lists(self, SA, SB, m, *, num_threads=None):
        SA = np.ascontiguousarray(SA, dtype=np.float32)
        SB = np.ascontiguousarray(SB, dtype=np.float32)
        m = check_int(m, "m", low=1)
        bounds = self.shard_bounds(len(SB))
        sa = self.client.scatter(SA, broadcast=True)
        parts = self.client.gather(
            [
                self.client.submit(_shard_candidate_lists, sa, SB[lo:hi], m, int(lo), pure=False)
                for lo, hi in zip(bounds[:-1], bounds[1:])
            ]
        )
        scores = np.concatenate([p[0] for p in parts], axis=1)
        idx = np.concatenate([p[1] for p in parts], axis=1)
        best = _row_lexsort(scores, idx)[:, : min(m, len(SB))]
        return np.take_along_axis(idx, best, axis=1), np.concatenate([p[2] for p in parts], axis=0)

    def lists_proposer(self, cand_a, cand_b, *, num_threads=None):
        return _ShardedCandidateProposer(self, cand_a, cand_b)


class _ShardedCandidateProposer(Proposer):
    """The per-view proposer of :class:`DaskCandidates` (the round's lists are scattered once)."""

    def __init__(self, backend: DaskCandidates, cand_a: np.ndarray, cand_b: np.ndarray):
        self.client = backend.client
        self.cand_a, self.cand_b = np.asarray(cand_a, np.int64), np.asarray(cand_b, np.int64)
        self.bounds = backend.shard_bounds(len(cand_b))
        self.in_shard, self.shards = [], []
        for lo, hi in zip(self.bounds[:-1], self.bounds[1:]):
            inside = (self.cand_a >= lo) & (self.cand_a < hi)
            local = np.where(inside, self.cand_a - lo, -1)
            self.in_shard.append(inside)
            self.shards.append((self.client.scatter(local), self.client.scatter(self.cand_b[lo:hi])))

    def __call__(self, SA, SB, *, k: int = 5, csls_k: int = 50, exclude_a=None, exclude_b=None):
        SA = np.ascontiguousarray(SA, dtype=np.float32)
        SB = np.ascontiguousarray(SB, dtype=np.float32)
        sa = self.client.scatter(SA, broadcast=True)
        parts = self.client.gather(
            [
                self.client.submit(_shard_dots, sa, SB[lo:hi], local, cb, pure=False)
                for (lo, hi), (local, cb) in zip(zip(self.bounds[:-1], self.bounds[1:]), self.shards)
            ]
        )
        dots_a = np.full(self.cand_a.shape, np.nan, np.float32)
        for inside, (vals, _) in zip(self.in_shard, parts):
            dots_a[inside] = vals  # both walk the shard's entries in row-major order
        dots_b = np.concatenate([p[1] for p in parts], axis=0)
        return csls_from_candidate_dots(
            dots_a, self.cand_a, dots_b, self.cand_b, k=k, csls_k=csls_k, exclude_a=exclude_a, exclude_b=exclude_b
        )
