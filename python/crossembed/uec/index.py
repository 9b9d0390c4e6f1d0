"""A searchable, updatable UEC index: HNSW candidates on the means, exact rerank by the scoring.

Results are external int64 ids (``ids=`` at build, or 0, 1, ...), best
first, ties to the lower id; with fewer than ``k`` documents (or allowed by
``filter``) each row is padded with id ``-1`` and score ``-inf``, as faiss
pads. :class:`UECIndex` composes one part per job: the means in
:class:`crossembed.ann.MeanGraph`, ids, texts and variances (none stored
when no document has one) in :class:`~crossembed.uec.store.DocStore`, updates
and the readers-writer lock in :class:`~crossembed.uec.writer.IndexWriter`,
searches and the cache of prepared documents in
:class:`~crossembed.uec.rerank.RerankPlanner`, the file in
:class:`~crossembed.uec.index_file.IndexFile`, the build settings in
:class:`~crossembed.uec.index_config.IndexConfig`.

Any number of threads may search (and read contents) while others add,
remove, upsert or save: a search sees one state of the index; an update
holds searches off for one chunk at a time; :meth:`UECIndex.save` waits for
updates, not for searches. Text queries are encoded before the lock is taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from crossembed._config import check_plugin
from crossembed._validation import INT_MAX, check_int, check_num_threads
from crossembed.ann import MeanGraph
from crossembed.uec.confidence import DEPTH as CONFIDENCE_DEPTH
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index_config import IndexConfig
from crossembed.uec.index_file import IndexFile
from crossembed.uec.rerank import PanelCache, RerankPlanner
from crossembed.uec.scoring import ProbitScoring
from crossembed.uec.store import DocStore, as_ids, check_ids, check_texts
from crossembed.uec.writer import IndexWriter

__all__ = ["UECIndex", "query_gaussians"]

_MAX_RESULTS = 1 << 28  # queries x k: larger result arrays are refused (they would exhaust memory)


def _check_result_k(k, n_queries: int, name: str = "k") -> int:
    k = check_int(k, name, low=1)
    if n_queries * k > _MAX_RESULTS:
        raise ValueError(f"{name}={k} is too large: {n_queries} queries x {name} results exceed {_MAX_RESULTS}")
    return k


def query_gaussians(queries, ensemble: Optional[UECEnsemble], dim: int) -> GaussianEmbedding:
    """``queries`` as query Gaussians of dimension ``dim``: given as a :class:`GaussianEmbedding`, or texts
    encoded by ``ensemble`` (TypeError/ValueError naming ``queries`` for anything else)."""
    if isinstance(queries, GaussianEmbedding):
        q = queries
    elif isinstance(queries, str):
        raise TypeError("queries must be a list of strings or a GaussianEmbedding, not one string")
    else:
        if not isinstance(queries, Iterable):
            raise TypeError(f"queries must be a list of strings or a GaussianEmbedding, got {type(queries).__name__}")
        queries = list(queries)
        if not queries:
            raise ValueError("queries must not be empty")
        if not all(isinstance(t, str) for t in queries):
            raise TypeError("queries must be a list of strings or a GaussianEmbedding")
        if ensemble is None:
            raise ValueError("this index has no ensemble: pass query GaussianEmbeddings, or build/load it with one")
        q = ensemble.encode(queries, role="query", show_progress_bar=False)
    if q.dim != dim:
        raise ValueError(f"queries have dimension {q.dim} but the index has {dim}")
    return q


class UECIndex:
    """Documents as Gaussians, searchable by the scoring's similarity, with ids, updates and filters.

    Parameters
    ----------
    docs : GaussianEmbedding
        Document Gaussians (``role="passage"`` output of the ensemble), at least one.
    ids : array_like of int, optional
        Distinct non-negative int64 external ids, one per document (default ``0 .. n-1``).
    texts : sequence of str, optional
        The document texts, kept for display and saved with the index (default: none kept).
    ensemble : UECEnsemble, optional
        Encodes text queries; saved with the index (default none: queries must be Gaussians).
    scoring : scoring object, optional
        Scores queries against documents (:mod:`crossembed.uec.scoring`; default the
        ensemble's ``scoring``, without an ensemble ``ProbitScoring()``).
    config : IndexConfig, optional
        The build settings: graph, default rerank depth, storage dtype, cache budget, seed
        (default ``IndexConfig()``).
    num_threads : int, optional
        Threads for building and searching (default: all cores).
    """

    def __init__(
        self,
        docs: GaussianEmbedding,
        *,
        ids=None,
        texts: Optional[Sequence[str]] = None,
        ensemble: Optional[UECEnsemble] = None,
        scoring=None,
        config: Optional[IndexConfig] = None,
        num_threads: Optional[int] = None,
    ):
        self._settings(ensemble, scoring, config, num_threads)
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        if len(docs) == 0:
            raise ValueError("docs must not be empty")
        if ensemble is not None and ensemble.dim != docs.dim:
            raise ValueError(f"docs have dimension {docs.dim} but the ensemble produces {ensemble.dim}")
        texts = check_texts(texts, len(docs))
        ids = np.arange(len(docs), dtype=np.int64) if ids is None else check_ids(ids, len(docs))
        store = DocStore.empty(docs.dim, self.config.dtype, capacity=len(docs), keep_texts=texts is not None)
        self._compose(store, None)
        self._writer.insert(docs, ids, texts, chunk=len(docs))  # one graph call: nobody can search yet

    def _settings(self, ensemble, scoring, config, num_threads) -> None:
        """Check and set everything but the documents (shared by the constructor and :meth:`load`)."""
        if ensemble is not None and not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        if config is not None and not isinstance(config, IndexConfig):
            raise TypeError(f"config must be an IndexConfig, got {type(config).__name__}")
        self.ensemble = ensemble
        if scoring is None:
            scoring = ProbitScoring() if ensemble is None else ensemble.scoring
        self.scoring = check_plugin(scoring, "scoring", ("prepare", "get_config"), "ProbitScoring()")
        self.config = IndexConfig() if config is None else config
        check_num_threads(num_threads)
        self.num_threads = num_threads

    def _compose(self, store: DocStore, graph: Optional[MeanGraph]) -> None:
        """Assemble the parts around ``store`` and ``graph`` (None: an empty graph for the store's capacity)."""
        self._store = store
        self._graph = graph = self._new_graph(store.capacity) if graph is None else graph
        self._panels = PanelCache(store, graph, self.scoring, self.config.panel_cache_bytes)
        self._planner = RerankPlanner(store, graph, self._panels)
        self._writer = IndexWriter(
            store,
            graph,
            on_change=self._panels.forget,
            new_graph=self._new_graph,
            compact_at=self.config.compact_at,
            num_threads=self.num_threads,
        )

    def _new_graph(self, capacity: int) -> MeanGraph:
        c = self.config
        return MeanGraph(
            self.dim,
            storage=c.dtype,
            max_elements=capacity,
            M=c.M,
            ef_construction=c.ef_construction,
            random_seed=c.random_state,
        )

    @classmethod
    def build(
        cls,
        ensemble: UECEnsemble,
        texts: Sequence[str],
        *,
        config: Optional[IndexConfig] = None,
        num_threads: Optional[int] = None,
        show_progress_bar: bool = True,
    ) -> UECIndex:
        """Index ``texts`` for ``ensemble``: they are encoded as passages and kept (ids ``0 .. n-1``).

        ``config`` and ``num_threads`` are the constructor's; ``show_progress_bar`` the encoding's.

        When the ensemble routes by retrieval confidence and has no reference
        collection yet, the index keeps a copy of it whose reference is the
        encoded documents; ``ensemble`` itself is left as it was. For documents
        already encoded, pass their :class:`GaussianEmbedding` to the constructor
        (with an ensemble from :meth:`UECEnsemble.with_reference` where needed).
        """
        if not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, not one string")
        if isinstance(texts, GaussianEmbedding):
            raise TypeError("texts must be a list of strings: index a GaussianEmbedding with UECIndex(docs, ...)")
        texts = list(texts)
        comps = ensemble.encode_components(texts, role="passage", show_progress_bar=show_progress_bar)
        if ensemble.needs_reference and not ensemble.has_reference:
            ensemble = ensemble.with_reference(comps)  # retrieval confidence is measured over the indexed documents
        docs = ensemble.combine(comps, role="passage")
        return cls(docs, ensemble=ensemble, texts=texts, config=config, num_threads=num_threads)

    # ------------------------------------------------------------------ contents
    def __len__(self) -> int:
        with self._writer.lock.read():
            return len(self._store)

    @property
    def dim(self) -> int:
        return self._store.dim

    @property
    def ids(self) -> np.ndarray:
        """External ids of the documents, in storage order."""
        with self._writer.lock.read():
            return self._store.ids[self._store.live_slots()]

    @property
    def docs(self) -> GaussianEmbedding:
        """The documents (float32 copies, storage order; see :attr:`ids`)."""
        with self._writer.lock.read():
            return GaussianEmbedding(*self._panels.rows(self._store.live_slots()))

    @property
    def texts(self) -> Optional[List[str]]:
        """Document texts in storage order (None when the index keeps none)."""
        with self._writer.lock.read():
            if self._store.texts is None:
                return None
            return [self._store.texts[s] for s in self._store.live_slots()]

    def get_docs(self, ids) -> GaussianEmbedding:
        """The documents of ``ids`` (float32 copies, in the order given; ValueError for an unknown id)."""
        ids = as_ids(ids)
        with self._writer.lock.read():
            return GaussianEmbedding(*self._panels.rows(self._store.slots_of(ids)))

    def contains(self, ids) -> np.ndarray:
        """Boolean mask over ``ids`` (int, any shape flattened): which are documents of the index."""
        ids = as_ids(ids, low=-(2**63))
        with self._writer.lock.read():
            return self._store.contains(ids)

    def get_texts(self, ids) -> List[Optional[str]]:
        """Texts of ``ids`` (``-1``, the padding of :meth:`search`, and ids not in the index give None)."""
        ids = as_ids(ids, low=-1)
        with self._writer.lock.read():
            if self._store.texts is None:
                return [None] * len(ids)
            known = self._store.contains(ids)
            slots = np.full(len(ids), -1, np.int64)
            slots[known] = self._store.slots_of(ids[known])
            return [self._store.texts[s] if s >= 0 else None for s in slots]

    @property
    def has_variance(self) -> bool:
        """Whether some document has (or had) a variance; False: the index stores none and scores
        queries without variance by inner product."""
        return self._store.has_variance

    def memory_usage(self) -> Dict[str, int]:
        """Bytes held: the store (ids, flags, variances; the float32 means of an int8 or bf16 index, counted
        whole even where they are mapped from the file), the graph (the means or their codes, and the links)
        and cached prepared blocks."""
        with self._writer.lock.read():
            return {"store": self._store.nbytes(), "graph": self._graph.nbytes, "panels": self._panels.nbytes}

    def stats(self) -> Dict[str, Any]:
        """What the index holds: ``live`` documents, ``deleted`` slots (removed or replaced documents whose graph
        node is kept until the index compacts, see ``IndexConfig.compact_at``), ``capacity`` (slots with room
        reserved), ``compacting`` (whether a compaction is building its graph) and ``bytes``
        (:meth:`memory_usage`)."""
        with self._writer.lock.read():
            return {
                "live": len(self._store),
                "deleted": self._store.deleted,
                "capacity": self._store.capacity,
                "compacting": self._writer.compacting,
                "bytes": {"store": self._store.nbytes(), "graph": self._graph.nbytes, "panels": self._panels.nbytes},
            }

    def unreachable(self) -> np.ndarray:
        """Ids of documents that no graph search can reach (no chain of links leads to them from the entry
        point), sorted. An ANN search never returns them (``exact=True`` still does); :meth:`compact` rebuilds
        the graph. Costs about a :meth:`save` of the graph: a check, not for every search."""
        with self._writer.lock.read():
            return np.sort(self._store.ids_of(self._graph.unreachable()))

    # ------------------------------------------------------------------ updates
    def compact(self) -> None:
        """Rebuild the graph (and the slots) of the live documents alone, dropping removed documents' nodes.

        Waits for a compaction in flight, then rebuilds and returns when the new graph is in place. Searches
        go on during the rebuild (against the graph as it was) and wait only for the swap; updates from other
        threads go on too (they are replayed onto the new graph before the swap). Updates start compactions
        on their own, in the background (``IndexConfig.compact_at``); call this to free the deleted nodes'
        memory at once, or when :meth:`unreachable` finds documents.
        """
        self._writer.compact()

    def wait_for_compaction(self, timeout: Optional[float] = None) -> bool:
        """Wait for a compaction in flight, ``timeout`` seconds at most (default None: no limit); returns True
        when none is left running."""
        return self._writer.wait_for_compaction(timeout)

    def reserve(self, capacity: int) -> None:
        """Make room for ``capacity`` documents in all (later :meth:`add` calls up to it then never
        reallocate the store or the graph); never shrinks."""
        self._writer.reserve(capacity)

    def add(self, docs: GaussianEmbedding, *, ids=None, texts: Optional[Sequence[str]] = None) -> np.ndarray:
        """Add ``docs`` (passage Gaussians of the index's dimension) under new distinct ``ids`` (default: after
        the largest id ever used), with ``texts`` exactly when the index keeps texts; returns the ids.

        Raises ValueError, and adds nothing, when an id is already in the index.
        """
        return self._writer.add(docs, ids, texts)

    def upsert(self, docs: GaussianEmbedding, *, ids, texts: Optional[Sequence[str]] = None) -> np.ndarray:
        """Replace the documents (vectors and texts) of ``ids`` already in the index; add the others.

        ``docs``, ``ids`` (distinct, one per document) and ``texts`` as for :meth:`add`.
        Returns the ids. A search sees each replaced document either before or after.
        """
        return self._writer.upsert(docs, ids, texts)

    def remove(self, ids) -> None:
        """Remove documents by id (ValueError for an id not in the index; nothing is removed then).

        Removing every document is allowed: searches then return only padding.
        """
        self._writer.remove(ids)

    # ------------------------------------------------------------------ search
    def _threads(self, num_threads: Optional[int]) -> Optional[int]:
        nt = num_threads if num_threads is not None else self.num_threads
        check_num_threads(nt)
        return nt

    def candidates(self, queries, m: int, *, ef: Optional[int] = None, num_threads: Optional[int] = None) -> np.ndarray:
        """The graph's inner-product candidates ``(Q, m)`` as ids (``-1`` pads).

        Safe to call from several threads at once, each with its own search
        breadth ``ef`` (default ``2 * m``). Queries for which the graph cannot
        return ``m`` neighbours (a sparse graph, many identical documents) get
        their candidates by exact inner product.
        """
        q = query_gaussians(queries, self.ensemble, self.dim)
        m = _check_result_k(m, len(q), "m")
        ef = max(m, check_int(ef, "ef", low=1, high=INT_MAX) if ef is not None else 2 * m)
        nt = self._threads(num_threads)
        with self._writer.lock.read():
            n = len(self._store)
            if n == 0:
                return np.full((len(q), m), -1, np.int64)
            ids = self._store.ids_of(self._planner.candidates(q.mean, min(m, n), max(ef, min(m, n)), nt))
        return np.pad(ids, ((0, 0), (0, m - ids.shape[1])), constant_values=-1)

    def search(
        self,
        queries,
        k: int = 10,
        *,
        exact: bool = False,
        rerank: Optional[int] = None,
        ef: Optional[int] = None,
        filter=None,
        num_threads: Optional[int] = None,
        return_confidence: bool = False,
    ):
        """Top-``k`` documents per query by the index's scoring.

        Thread-safe: any number of threads may search one index at once, with
        different ``k``/``rerank``/``ef``, and each gets exactly what the same
        call alone would return; updates in other threads wait for the search
        or the search for one chunk of them (module docstring). Deterministic
        for a fixed index.

        Parameters
        ----------
        queries : list of str or GaussianEmbedding
            Texts (encoded by the ensemble as queries) or query Gaussians.
        k : int
            Results per query (default 10). With fewer than ``k`` documents live
            (or allowed by ``filter``), rows end in id -1 with score -inf.
        exact : bool
            Score every document (brute force) instead of reranking ANN candidates (default False).
        rerank : int, optional
            ANN candidates per query (default ``config.rerank``, at least ``k``).
        ef : int, optional
            HNSW search breadth (default ``2 * rerank``).
        filter : array_like of int, optional
            Ids the results may come from (ids not in the index are ignored;
            none in it gives rows of padding). Up to 20,000 allowed documents
            are searched exactly; more go through the graph's filtered search.
        num_threads : int, optional
            Threads for this call (default: the index's ``num_threads``).
        return_confidence : bool
            Also return each query's calibrated probability that its top hit is relevant
            (default False; the ensemble needs :meth:`UECEnsemble.fit_confidence`).

        Returns
        -------
        scores : ndarray (Q, k) float32, best first (ties: lower id)
        ids : ndarray (Q, k) int64
        confidence : ndarray (Q,) float64, only with ``return_confidence``
            (:meth:`UECEnsemble.top_hit_confidence`: read from the best ``max(k, 10)`` results; 0 with no hit)
        """
        q = query_gaussians(queries, self.ensemble, self.dim)
        k = _check_result_k(k, len(q))
        nt = self._threads(num_threads)
        m = max(k, check_int(rerank, "rerank", low=1, high=INT_MAX) if rerank is not None else self.config.rerank)
        ef = max(m, check_int(ef, "ef", low=1, high=INT_MAX)) if ef is not None else 2 * m
        filter_ids = None if filter is None else np.unique(as_ids(filter, "filter", low=-(2**63)))
        if return_confidence and (self.ensemble is None or self.ensemble.confidence_ is None):
            raise ValueError("return_confidence=True needs an ensemble with a confidence (UECEnsemble.fit_confidence)")
        depth = max(k, CONFIDENCE_DEPTH) if return_confidence else k
        with self._writer.lock.read():  # one state of the index for the whole call
            scores, ids = self._planner.search(q, depth, max(m, depth), ef, filter_ids, exact=exact, nt=nt)
            if not return_confidence:
                return scores, ids
            top = ids[:, :CONFIDENCE_DEPTH]
            rows = np.zeros((*top.shape, self.dim), np.float32)
            rows[top >= 0] = self._panels.rows(self._store.slots_of(top[top >= 0]))[0]
        confidence = self.ensemble.top_hit_confidence(q, scores[:, :CONFIDENCE_DEPTH], rows)
        return scores[:, :k], ids[:, :k], confidence

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> Path:
        """Write the index to ``path`` atomically, with a checksum over everything (graph bytes included), streamed.

        The file (:mod:`crossembed.uec.index_file`) holds the documents, the config, the scoring and the ensemble.
        """
        with self._writer.no_updates():  # no update while the file is written; searches go on
            return IndexFile(self._store, self._graph, self.config, self.scoring, self.ensemble).write(path)

    @classmethod
    def load(
        cls,
        path,
        *,
        ensemble: Optional[UECEnsemble] = None,
        encoders=None,
        mmap: bool = False,
        num_threads: Optional[int] = None,
    ) -> UECIndex:
        """Read an index written by :meth:`save`, with the config, scoring and ensemble it was saved with.

        With ``mmap=True`` the document store (ids, flags, variances, and the
        float32 means of an int8 or bf16 index) stays on disk as a read-only
        memory map (the first :meth:`add`/:meth:`remove` copies the ids, flags
        and variances into memory; the means stay mapped, new ones go to memory);
        the graph, with the means (int8, bf16: their codes), is always read into memory. The saved ensemble is
        restored unless ``ensemble`` is given; its encoders load lazily (by
        stored name, or from ``encoders``). ``num_threads`` as in the constructor.

        Raises ValueError for a file of another index format version, and
        :class:`crossembed._io.CorruptFileError` (a ValueError) when the file
        is truncated, edited or of another kind.
        """
        if ensemble is not None and not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        saved = IndexFile.read(path, mmap=mmap, ensemble=ensemble, encoders=encoders)
        self = cls.__new__(cls)
        self._settings(saved.ensemble, saved.scoring, saved.config, num_threads)
        self._compose(saved.store, saved.graph)
        return self

    def __repr__(self) -> str:
        c = self.config
        return (
            f"UECIndex(n={len(self)}, dim={self.dim}, dtype={c.dtype}, M={c.M}, rerank={c.rerank}, "
            f"scoring={self.scoring!r})"
        )
