"""A UEC index sharded over Dask workers.

Document ``id`` lives in shard ``hash(id) % n_shards`` (a Fibonacci hash, so
strided ids spread evenly too); each shard is a whole
:class:`~crossembed.uec.UECIndex` (store + HNSW graph) held in one
worker's memory. A search sends the queries to every shard, each returns its
own top-``k`` (padded with id -1 / score -inf), and the driver merges them
exactly with :func:`~crossembed.uec.rerank.merge_topk` (score descending, ties
to the lower id, padding last). A pair's score does not depend on which other
documents share its block, so exact search over any sharding returns what one
local index returns, bit for bit.

Failures (bounded calls, lost workers, recovery from the shards' files and
the driver's update log) are :class:`~crossembed.uec.shards.ShardSet`'s.

The same code runs on a ``LocalCluster`` and on machines joined by
``dask scheduler`` / ``dask worker``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._validation import check_int, check_positive
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import query_gaussians
from crossembed.uec.index_config import IndexConfig
from crossembed.uec.rerank import merge_topk
from crossembed.uec.shards import (
    Deadline,
    ShardError,
    ShardLostError,
    ShardSet,
    ShardTimeoutError,
    build_shard,
    placement,
    restore_shard,
    shard_contains,
    shard_info,
    shard_save,
    shard_search,
    shard_stats,
    shard_update,
)
from crossembed.uec.store import as_ids, check_ids

__all__ = ["ShardError", "ShardLostError", "ShardTimeoutError", "ShardedUECIndex", "shard_of"]

_DEFAULT_TIMEOUT_S = 60.0


def shard_of(ids: np.ndarray, n_shards: int) -> np.ndarray:
    """The shard of each id: Fibonacci hashing (multiply by 2^64 / phi, keep the high 32 bits)."""
    mixed = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return (mixed % np.uint64(n_shards)).astype(np.int64)


def _check_ensemble(ensemble) -> None:
    if ensemble is not None and not isinstance(ensemble, UECEnsemble):
        raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")


def _pick(texts, rows: np.ndarray):
    return None if texts is None else [texts[r] for r in rows]


def _check_docs(docs) -> GaussianEmbedding:
    if not isinstance(docs, GaussianEmbedding):
        raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
    return docs


class ShardedUECIndex:
    """A UEC index whose documents are partitioned across Dask workers; no call waits forever.

    Guarantees. Every call returns or raises within ``timeout`` seconds (its
    own ``timeout=`` when given), recovery and retry included (a worker that
    dies while its answer is being transferred shows as a timeout at that
    bound). A worker that left is noticed within a quarter second of the
    scheduler removing it (at once for a killed process; after the
    scheduler's ``worker-ttl`` for an unreachable machine). Its shards are
    then reloaded from their last file (the one :meth:`save` wrote or
    :meth:`load` read) on the surviving worker holding the fewest shards, the
    updates sent to them since that file are replayed in order, and the call
    is retried once; shards that cannot be (never saved, file unreadable, no
    worker left, lost again) raise :class:`ShardLostError` naming the shards
    and workers. Files must be on storage every worker can read. An update is
    validated on every shard before any applies (unknown or present ids,
    dimension); one interrupted by an unrecoverable loss may have been applied
    on the other shards.

    Memory. For each shard with a file the driver keeps the updates sent
    since: the float32 means and variances of every added or upserted
    document (``8 D`` bytes each) plus 8 bytes per id (added, upserted or
    removed) and the texts; :meth:`save` clears it, shards never saved keep
    none. Recovery sends that log to the new worker.

    Threads: any number may search while one updates; updates, saves and
    recoveries run one at a time.

    Attributes: ``client``, ``ensemble``, ``n_shards``, ``dim`` (the documents' dimension)
    and ``timeout`` (seconds, the default of every call).

    Parameters
    ----------
    client : dask.distributed.Client
        The cluster; shard ``s`` starts on worker ``s % n_workers`` (workers in sorted address order).
    docs : GaussianEmbedding
        Document Gaussians (``role="passage"``), at least one per shard.
    ids : array_like of int, optional
        Distinct non-negative ids (default ``0 .. n-1``), placed by :func:`shard_of`.
    texts : sequence of str, optional
        Document texts, kept by the shards (default none).
    n_shards : int, optional
        Number of shards (default: one per worker).
    ensemble : UECEnsemble, optional
        Encodes text queries on the driver; its ``scoring`` scores on every shard
        unless ``scoring`` is given (default none: Gaussian queries).
    timeout : float
        Seconds any call may take (default 60); building the shards is bounded by it too.
    scoring, config, num_threads
        Every shard's :class:`UECIndex` ``scoring``, :class:`IndexConfig` and threads (defaults as there).

    Examples
    --------
    >>> from dask.distributed import Client, LocalCluster  # doctest: +SKIP
    >>> with Client(LocalCluster(n_workers=2)) as client:  # doctest: +SKIP
    ...     index = ShardedUECIndex(client, docs, config=IndexConfig(M=32))
    ...     index.save("/shared/uec/shard{shard}.uec")  # makes the shards recoverable
    ...     scores, ids = index.search(queries, 10)
    """

    def __init__(
        self,
        client,
        docs: GaussianEmbedding,
        *,
        ids=None,
        texts: Optional[Sequence[str]] = None,
        n_shards: Optional[int] = None,
        ensemble: Optional[UECEnsemble] = None,
        timeout: float = _DEFAULT_TIMEOUT_S,
        scoring=None,
        config: Optional[IndexConfig] = None,
        num_threads: Optional[int] = None,
    ):
        _check_ensemble(ensemble)
        timeout = check_positive(timeout, "timeout")
        placed = placement(client, n_shards, timeout)
        if len(_check_docs(docs)) == 0:
            raise ValueError("docs must not be empty")
        ids = np.arange(len(docs), dtype=np.int64) if ids is None else check_ids(ids, len(docs))
        if texts is not None and len(texts) != len(docs):
            raise ValueError(f"texts must hold {len(docs)} strings (one per document)")
        n_shards = len(placed)
        rows = [np.flatnonzero(shard_of(ids, n_shards) == s) for s in range(n_shards)]
        if min(len(r) for r in rows) == 0:
            raise ValueError(f"n_shards={n_shards} leaves a shard without documents: use fewer shards")
        if scoring is None and ensemble is not None:
            scoring = ensemble.scoring
        index_options = {"scoring": scoring, "config": config, "num_threads": num_threads}
        shards = [
            client.submit(
                build_shard, docs.mean[r], docs.var[r], ids[r], _pick(texts, r), index_options, workers=[w], pure=False
            )
            for r, w in zip(rows, placed)
        ]
        shard_set = ShardSet(client, shards, placed, [None] * n_shards, num_threads)
        self._attach(client, ensemble, timeout, shard_set)

    def _attach(self, client, ensemble, timeout: float, shards: ShardSet) -> None:
        """Hold the shards once every one exists."""
        self.client = client
        self.ensemble = ensemble
        self.timeout = timeout
        self.n_shards = len(shards)
        self._shards = shards
        info = shards.run(shard_info, dict.fromkeys(range(self.n_shards), ()), Deadline(timeout))
        dims = {d for _, d in info.values()}
        if len(dims) != 1:
            raise ValueError(f"the shards have different dimensions {sorted(dims)}")
        self.dim = dims.pop()

    @classmethod
    def load(
        cls,
        client,
        paths: Sequence,
        *,
        ensemble: Optional[UECEnsemble] = None,
        num_threads: Optional[int] = None,
        timeout: float = _DEFAULT_TIMEOUT_S,
    ) -> ShardedUECIndex:
        """Shards saved by :meth:`save`: ``paths[s]`` is shard ``s``, read (memory-mapped) by its worker.

        Parameters
        ----------
        client : dask.distributed.Client
            The cluster; shard ``s`` starts on worker ``s % n_workers`` (sorted addresses).
        paths : sequence of str or Path
            One file per shard, on storage every worker can read (a lost shard is reloaded from it).
        ensemble : UECEnsemble, optional
            Encodes text queries on the driver (default none).
        num_threads : int, optional
            Threads of each shard's searches (default: all cores of its worker).
        timeout : float
            Seconds any call may take, loading included (default 60).
        """
        _check_ensemble(ensemble)
        timeout = check_positive(timeout, "timeout")
        paths = [str(p) for p in paths]
        if not paths:
            raise ValueError("paths must name at least one shard file")
        placed = placement(client, len(paths), timeout)
        shards = [
            client.submit(restore_shard, p, [], 0, num_threads, workers=[w], pure=False) for p, w in zip(paths, placed)
        ]
        self = cls.__new__(cls)
        self._attach(client, ensemble, timeout, ShardSet(client, shards, placed, paths, num_threads))
        return self

    # ------------------------------------------------------------------ contents
    def __len__(self) -> int:
        return int(sum(self.shard_sizes()))

    def shard_sizes(self, *, timeout: Optional[float] = None) -> List[int]:
        """Live documents of each shard, in shard order.

        ``timeout``: seconds this call may take (default the index's ``timeout``).
        """
        info = self._shards.run(shard_info, dict.fromkeys(range(self.n_shards), ()), self._deadline(timeout))
        return [int(info[s][0]) for s in range(self.n_shards)]

    def stats(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """What the shards hold together, as :meth:`UECIndex.stats` reports one index: ``live``, ``deleted``
        and ``capacity`` summed, ``compacting`` when any shard is, ``bytes`` summed by part; ``shards`` lists
        each shard's own, in shard order.

        ``timeout``: seconds this call may take (default the index's ``timeout``).
        """
        info = self._shards.run(shard_stats, dict.fromkeys(range(self.n_shards), ()), self._deadline(timeout))
        shards = [info[s] for s in range(self.n_shards)]
        parts = sorted({part for s in shards for part in s["bytes"]})
        total = {key: int(sum(s[key] for s in shards)) for key in ("live", "deleted", "capacity")}
        total["compacting"] = any(s["compacting"] for s in shards)
        total["bytes"] = {part: int(sum(s["bytes"].get(part, 0) for s in shards)) for part in parts}
        return {**total, "shards": shards}

    def shard_workers(self) -> List[str]:
        """The address of the worker holding each shard now, in shard order (changes when a shard is recovered)."""
        return self._shards.workers()

    def _split(self, ids: np.ndarray) -> Dict[int, np.ndarray]:
        """Rows of ``ids`` per shard, for the shards that get any."""
        where = shard_of(ids, self.n_shards)
        rows = {s: np.flatnonzero(where == s) for s in range(self.n_shards)}
        return {s: r for s, r in rows.items() if len(r)}

    # ------------------------------------------------------------------ updates
    def _deadline(self, timeout) -> Deadline:
        return Deadline(self.timeout if timeout is None else check_positive(timeout, "timeout"))

    def _update_shards(self, ops: Dict[int, tuple], deadline: Deadline) -> None:
        """Apply one update per shard; each part that succeeds is counted and logged (shards with a file)."""

        def applied(s: int, _size) -> None:
            self._shards.applied(s, ops[s])

        self._shards.run(shard_update, {s: (op,) for s, op in ops.items()}, deadline, applied)

    def _present(self, ids: np.ndarray, parts: Dict[int, np.ndarray], deadline: Deadline) -> np.ndarray:
        """Mask over ``ids``: which are in the index (asked of their shards)."""
        masks = self._shards.run(shard_contains, {s: (ids[r],) for s, r in parts.items()}, deadline)
        present = np.zeros(len(ids), dtype=bool)
        for s, r in parts.items():
            present[r] = masks[s]
        return present

    def _doc_ops(self, kind: str, docs, ids, texts) -> Tuple[np.ndarray, Dict[int, tuple]]:
        """Checked ``ids`` and the per-shard ``(kind, mean, var, ids, texts)`` updates of ``docs``."""
        if _check_docs(docs).dim != self.dim:
            raise ValueError(f"docs have dimension {docs.dim} but the index has {self.dim}")
        ids = check_ids(ids, len(docs))
        if texts is not None and (len(texts) != len(docs) or not all(isinstance(t, str) for t in texts)):
            raise ValueError(f"texts must hold {len(docs)} strings (one per document)")
        parts = self._split(ids)
        return ids, {s: (kind, docs.mean[r], docs.var[r], ids[r], _pick(texts, r)) for s, r in parts.items()}

    def add(
        self, docs: GaussianEmbedding, *, ids, texts: Optional[Sequence[str]] = None, timeout: Optional[float] = None
    ) -> np.ndarray:
        """Add documents under new ids, each to its shard; returns the ids.

        Parameters
        ----------
        docs : GaussianEmbedding
            Passage Gaussians of the index's dimension.
        ids : array_like of int
            New distinct non-negative ids, one per document (ValueError naming those already
            in the index; nothing is added then).
        texts : sequence of str, optional
            Required when the shards keep texts (and refused otherwise).
        timeout : float, optional
            Seconds this call may take (default the index's ``timeout``).
        """
        ids, ops = self._doc_ops("add", docs, ids, texts)
        deadline = self._deadline(timeout)
        with self._shards.updating(deadline):
            present = self._present(ids, self._split(ids), deadline)
            if present.any():
                raise ValueError(f"ids {ids[present][:5].tolist()} are already in the index (use upsert to replace)")
            self._update_shards(ops, deadline)
        return ids

    def upsert(
        self, docs: GaussianEmbedding, *, ids, texts: Optional[Sequence[str]] = None, timeout: Optional[float] = None
    ) -> np.ndarray:
        """Replace the documents of ``ids`` already in the index and add the others; returns the ids.

        An id's shard is fixed by :func:`shard_of`, so each id is added or replaced on one shard.

        Parameters
        ----------
        docs : GaussianEmbedding
            Passage Gaussians of the index's dimension.
        ids : array_like of int
            Distinct non-negative ids, one per document.
        texts : sequence of str, optional
            Required when the shards keep texts (and refused otherwise).
        timeout : float, optional
            Seconds this call may take (default the index's ``timeout``).
        """
        ids, ops = self._doc_ops("upsert", docs, ids, texts)
        deadline = self._deadline(timeout)
        with self._shards.updating(deadline):
            self._update_shards(ops, deadline)
        return ids

    def remove(self, ids, *, timeout: Optional[float] = None) -> None:
        """Remove documents by id, each from its shard.

        Parameters
        ----------
        ids : array_like of int
            Distinct ids in the index (ValueError naming those that are not; nothing is removed
            then). Removing every document is allowed: searches then return only padding.
        timeout : float, optional
            Seconds this call may take (default the index's ``timeout``).
        """
        ids = check_ids(ids)
        parts = self._split(ids)
        deadline = self._deadline(timeout)
        with self._shards.updating(deadline):
            present = self._present(ids, parts, deadline)
            if not present.all():
                raise ValueError(f"ids {ids[~present][:5].tolist()} are not in the index (nothing was removed)")
            self._update_shards({s: ("remove", ids[r]) for s, r in parts.items()}, deadline)

    # ------------------------------------------------------------------ search
    def search(
        self,
        queries,
        k: int = 10,
        *,
        exact: bool = False,
        rerank: Optional[int] = None,
        ef: Optional[int] = None,
        filter=None,
        timeout: Optional[float] = None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Top-``k`` ids per query over all shards, merged exactly (see :meth:`UECIndex.search`).

        Parameters
        ----------
        queries : list of str or GaussianEmbedding
            Texts (encoded on the driver by the ensemble) or query Gaussians.
        k : int
            Results per query (default 10). Rows with fewer than ``k`` live (or allowed)
            documents are padded with id -1 and score -inf.
        exact : bool
            Score every document of every shard (default False: ANN candidates, reranked).
        rerank : int, optional
            ANN candidates per query and shard (default each shard's ``rerank``).
        ef : int, optional
            HNSW search breadth per shard (default ``2 * rerank``).
        filter : array_like of int, optional
            Ids the results may come from (default all; ids not in the index are ignored,
            shards with none of them are not asked).
        timeout : float, optional
            Seconds this call may take (default the index's ``timeout``).

        Returns
        -------
        scores : ndarray (Q, k) float32, best first (ties: lower id; padding -inf)
        ids : ndarray (Q, k) int64 (padding -1)
        """
        q = query_gaussians(queries, self.ensemble, self.dim)
        k = check_int(k, "k", low=1)
        deadline = self._deadline(timeout)
        allowed: Dict[int, Optional[np.ndarray]] = dict.fromkeys(range(self.n_shards))
        if filter is not None:
            f = np.unique(as_ids(filter, "filter", low=-(2**63)))
            f = f[f >= 0]
            allowed = {s: f[r] for s, r in self._split(f).items()}
        options = {"exact": exact, "rerank": rerank, "ef": ef}
        parts = self._shards.run(
            shard_search, {s: (q.mean, q.var, k, a, options) for s, a in allowed.items()}, deadline
        )
        if not parts:  # the filter allows no id of any shard
            return np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64)
        scores = np.concatenate([parts[s][0] for s in sorted(parts)], axis=1)
        ids = np.concatenate([parts[s][1] for s in sorted(parts)], axis=1)
        return merge_topk(scores, ids, k)

    # ------------------------------------------------------------------ persistence
    def save(self, pattern: str, *, timeout: Optional[float] = None) -> List[str]:
        """Each worker saves its shard to ``pattern.format(shard=s)``; returns the paths, in shard order.

        Each file is written atomically. The files become the shards' recovery points (their
        update logs are cleared), so put them where every worker can read them (a shared file
        system), as absolute paths.

        Parameters
        ----------
        pattern : str
            Path with a ``{shard}`` field, e.g. ``"/shared/uec/shard{shard}.uec"``.
        timeout : float, optional
            Seconds this call may take (default the index's ``timeout``).
        """
        if "{shard" not in pattern:
            raise ValueError("pattern must contain '{shard}' (one file per shard)")
        paths = {s: pattern.format(shard=s) for s in range(self.n_shards)}
        deadline = self._deadline(timeout)

        def saved(s: int, path: str) -> None:
            self._shards.saved(s, path)

        with self._shards.updating(deadline):
            out = self._shards.run(shard_save, {s: (p,) for s, p in paths.items()}, deadline, saved)
        return [out[s] for s in range(self.n_shards)]

    def __repr__(self) -> str:
        return f"ShardedUECIndex(n_shards={self.n_shards}, workers={len(set(self.shard_workers()))})"
