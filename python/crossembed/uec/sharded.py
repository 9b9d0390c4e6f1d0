"""A UEC index sharded over Dask workers.

Document ``id`` lives in shard ``hash(id) % n_shards`` (a Fibonacci hash, so
strided ids spread evenly too); each shard is a whole
:class:`~crossembed.uec.UECIndex` (store + hnswlib graph) held in one
worker's memory, pinned there (every task on it names that worker). A search
sends the queries to every shard, each returns its own top-``k``, and the
driver merges them exactly with :func:`~crossembed.uec.index.merge_topk`
(score descending, ties to the lower id). A pair's score does not depend on
which other documents share its block, so exact search over any sharding
returns what one local index returns, bit for bit.

The same code runs on a ``LocalCluster`` and on machines joined by
``dask scheduler`` / ``dask worker`` (docs/uec_index.md).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from crossembed._validation import as_int_matrix, check_int, check_k
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex, merge_topk
from crossembed.uec.store import check_ids

__all__ = ["ShardedUECIndex", "shard_of"]


def shard_of(ids: np.ndarray, n_shards: int) -> np.ndarray:
    """The shard of each id: Fibonacci hashing (multiply by 2^64 / phi, keep the high 32 bits)."""
    mixed = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return (mixed % np.uint64(n_shards)).astype(np.int64)


def _workers(client) -> List[str]:
    """The cluster's worker addresses, sorted (TypeError for something that is not a Dask client)."""
    if not hasattr(client, "submit") or not hasattr(client, "scatter"):
        raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__}")
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ValueError("the Dask cluster has no workers")
    return workers


def _check_ensemble(ensemble) -> None:
    if ensemble is not None and not isinstance(ensemble, UECEnsemble):
        raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")


# --------------------------------------------------------------------------- worker-side tasks
def _build(mean, var, ids, options) -> UECIndex:
    return UECIndex(GaussianEmbedding(mean, var), ids=ids, **options)


def _load(path, num_threads) -> UECIndex:
    return UECIndex.load(path, mmap=True, num_threads=num_threads)


def _size(index: UECIndex) -> int:
    return len(index)


def _search(index: UECIndex, mean, var, k, allowed, options) -> Tuple[np.ndarray, np.ndarray]:
    q = GaussianEmbedding(mean, var)
    if allowed is not None:
        allowed = allowed[index.contains(allowed)]
    n = len(index) if allowed is None else len(allowed)
    if n == 0:
        return np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64)
    return index.search(q, min(k, n), filter=allowed, **options)


def _add(index: UECIndex, mean, var, ids) -> int:
    index.add(GaussianEmbedding(mean, var), ids=ids)
    return len(index)


def _remove(index: UECIndex, ids) -> int:
    index.remove(ids)
    return len(index)


def _save(index: UECIndex, path) -> str:
    return str(index.save(path))


class ShardedUECIndex:
    """A UEC index whose documents are partitioned across Dask workers.

    Parameters
    ----------
    client : dask.distributed.Client
        The cluster; shard ``s`` lives on worker ``s % n_workers`` (workers in sorted address order).
    docs : GaussianEmbedding
        Document Gaussians (``role="passage"``), at least one per shard.
    ids : array_like of int, optional
        Distinct non-negative ids (default ``0 .. n-1``), placed by :func:`shard_of`.
    n_shards : int, optional
        Number of shards (default: one per worker).
    ensemble : UECEnsemble, optional
        Encodes text queries on the driver; its ``scoring`` scores on every shard
        unless ``scoring`` is among ``index_options`` (default none: Gaussian queries).
    **index_options
        :class:`UECIndex` options for every shard (``scoring``, ``M``,
        ``ef_construction``, ``rerank``, ``dtype``, ``panel_cache_bytes``,
        ``random_state``, ``num_threads``).

    Examples
    --------
    >>> from dask.distributed import Client, LocalCluster  # doctest: +SKIP
    >>> with Client(LocalCluster(n_workers=2)) as client:  # doctest: +SKIP
    ...     index = ShardedUECIndex(client, docs, M=32)
    ...     scores, ids = index.search(queries, 10)
    """

    def __init__(
        self,
        client,
        docs: GaussianEmbedding,
        *,
        ids=None,
        n_shards: Optional[int] = None,
        ensemble: Optional[UECEnsemble] = None,
        **index_options,
    ):
        workers = _workers(client)
        _check_ensemble(ensemble)
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        if len(docs) == 0:
            raise ValueError("docs must not be empty")
        ids = np.arange(len(docs), dtype=np.int64) if ids is None else check_ids(ids, len(docs))
        n_shards = len(workers) if n_shards is None else check_int(n_shards, "n_shards", low=1)
        rows = [np.flatnonzero(shard_of(ids, n_shards) == s) for s in range(n_shards)]
        if min(len(r) for r in rows) == 0:
            raise ValueError(f"n_shards={n_shards} leaves a shard without documents: use fewer shards")
        if ensemble is not None:
            index_options.setdefault("scoring", ensemble.scoring)
        placed = [workers[s % len(workers)] for s in range(n_shards)]
        shards = [
            client.submit(_build, docs.mean[r], docs.var[r], ids[r], index_options, workers=[w], pure=False)
            for r, w in zip(rows, placed)
        ]
        self._attach(client, ensemble, placed, shards)

    def _attach(self, client, ensemble: Optional[UECEnsemble], workers: List[str], shards: List) -> None:
        """Hold the shard futures (shard ``s`` on ``workers[s]``) once every shard exists."""
        self.client = client
        self.ensemble = ensemble
        self.n_shards = len(shards)
        self._workers, self._shards = workers, shards
        client.gather([client.submit(_size, f, workers=[w], pure=False) for f, w in zip(shards, workers)])

    @classmethod
    def load(
        cls, client, paths: Sequence, *, ensemble: Optional[UECEnsemble] = None, num_threads: Optional[int] = None
    ) -> ShardedUECIndex:
        """Shards saved by :meth:`save` (``paths[s]`` is shard ``s``, read by its worker, memory-mapped).

        ``ensemble`` encodes text queries on the driver (default none); ``num_threads`` is each shard's.
        """
        workers = _workers(client)
        _check_ensemble(ensemble)
        paths = [str(p) for p in paths]
        if not paths:
            raise ValueError("paths must name at least one shard file")
        placed = [workers[s % len(workers)] for s in range(len(paths))]
        shards = [client.submit(_load, p, num_threads, workers=[w], pure=False) for p, w in zip(paths, placed)]
        self = cls.__new__(cls)
        self._attach(client, ensemble, placed, shards)
        return self

    def _each(self, fn, *args_per_shard) -> List:
        futures = [
            self.client.submit(fn, f, *args, workers=[w], pure=False)
            for f, w, *args in zip(self._shards, self._workers, *args_per_shard)
        ]
        return self.client.gather(futures)

    def __len__(self) -> int:
        return int(sum(self._each(_size)))

    def shard_sizes(self) -> List[int]:
        return [int(n) for n in self._each(_size)]

    def _split(self, ids: np.ndarray) -> List[np.ndarray]:
        where = shard_of(ids, self.n_shards)
        return [np.flatnonzero(where == s) for s in range(self.n_shards)]

    def add(self, docs: GaussianEmbedding, *, ids) -> None:
        """Add documents under new distinct ``ids`` (each to its shard)."""
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        ids = check_ids(ids, len(docs))
        parts = self._split(ids)
        live = [s for s, r in enumerate(parts) if len(r)]
        futures = [
            self.client.submit(
                _add,
                self._shards[s],
                docs.mean[parts[s]],
                docs.var[parts[s]],
                ids[parts[s]],
                workers=[self._workers[s]],
                pure=False,
            )
            for s in live
        ]
        self.client.gather(futures)

    def remove(self, ids) -> None:
        """Remove documents by id (each shard checks its own ids)."""
        ids = check_ids(ids, len(np.asarray(ids).reshape(-1)))
        parts = self._split(ids)
        futures = [
            self.client.submit(_remove, self._shards[s], ids[r], workers=[self._workers[s]], pure=False)
            for s, r in enumerate(parts)
            if len(r)
        ]
        self.client.gather(futures)

    def search(
        self,
        queries,
        k: int = 10,
        *,
        exact: bool = False,
        rerank: Optional[int] = None,
        ef: Optional[int] = None,
        filter=None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ids per query over all shards (see :meth:`UECIndex.search`)."""
        if isinstance(queries, GaussianEmbedding):
            q = queries
        else:
            if self.ensemble is None:
                raise ValueError("this index has no ensemble: pass query GaussianEmbeddings")
            if isinstance(queries, str):
                raise TypeError("queries must be a list of strings or a GaussianEmbedding, not one string")
            q = self.ensemble.encode(list(queries), role="query", show_progress_bar=False)
        check_k(k, 2**62)
        allowed = [None] * self.n_shards
        if filter is not None:
            f = np.unique(as_int_matrix(np.asarray(filter).reshape(-1), "filter", ndim=1, low=-(2**63)))
            f = f[f >= 0]
            allowed = [f[r] for r in self._split(f)]
        mean, var = self.client.scatter(
            [q.mean, q.var], broadcast=True, hash=False
        )  # fresh keys: no race with a released twin
        options = {"exact": exact, "rerank": rerank, "ef": ef}
        parts = self._each(
            _search,
            [mean] * self.n_shards,
            [var] * self.n_shards,
            [k] * self.n_shards,
            allowed,
            [options] * self.n_shards,
        )
        scores = np.concatenate([p[0] for p in parts], axis=1)
        ids = np.concatenate([p[1] for p in parts], axis=1)
        if scores.shape[1] == 0:
            raise ValueError("filter allows no document of the index")
        k = check_k(k, scores.shape[1])
        return merge_topk(scores, ids, k)

    def save(self, pattern: str) -> List[str]:
        """Each worker saves its shard to ``pattern.format(shard=s)`` (a path it can write)."""
        if "{shard" not in pattern:
            raise ValueError("pattern must contain '{shard}' (one file per shard)")
        return [str(p) for p in self._each(_save, [pattern.format(shard=s) for s in range(self.n_shards)])]

    def __repr__(self) -> str:
        return f"ShardedUECIndex(n_shards={self.n_shards}, workers={len(set(self._workers))})"
