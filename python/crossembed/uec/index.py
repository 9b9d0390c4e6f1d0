"""A searchable, updatable UEC index: HNSW candidates on the means, exact rerank by the scoring.

``search(queries, k)`` asks the HNSW graph (inner product on the document
means) for ``rerank`` candidates per query and reranks them exactly with the
index's scoring (the ensemble's, :class:`~crossembed.uec.scoring.ProbitScoring`
by default); ``exact=True`` scores every document. Results are external int64
ids (``ids=`` at build, or 0, 1, ...), best first, ties to the lower id.

Memory: the document means live once, in the graph (:class:`crossembed.ann.MeanGraph`,
float32, or float16 with ``dtype="float16"``); the rerank reads the candidates'
rows from it. The rest of each document - id, texts, and its variances when
any document has one - is in a :class:`~crossembed.uec.store.DocStore` (a
memory map after ``load(mmap=True)``). Documents without variance (the
default ensemble's) store none, and queries without variance against them
score by inner product (``mu_s``, exactly what the probit gives there).
Prepared documents of an index with variances (for the probit, packed panels
of 12 D bytes per document) are built per block of 16,384 slots and kept
while all of them fit in ``panel_cache_bytes``; beyond that budget they are
prepared on every call: per block for exact search, and for the ANN path
only the candidate rows of each query batch. Without variances nothing is
cached: the prepared form would be a second copy of the means.

Updates: :meth:`UECIndex.add`, :meth:`UECIndex.remove` and
:meth:`UECIndex.upsert`. Graph labels are store slots: ``remove`` marks the
label deleted and frees the slot, ``add`` re-adds freed slots first (the
graph rewrites a deleted label in place and reconnects it) and appends the
rest; ``upsert`` rewrites the rows of existing ids in place (the graph
re-links an updated label).

Concurrency: any number of threads may search (and read contents) while
others add, remove, upsert or save. A readers-writer lock guards the store
and the graph: a search holds it shared for its whole call, so it sees one
state of the index (never an id that was not in it at some moment during the
call); an update holds it exclusively while it changes that state, in chunks
sized to hold it about 20 ms each while searches come (200 ms while none came
during the previous chunk, so a bulk load keeps its threads busy), so a search
waits for one chunk, not for a whole bulk add (a search during a large add may
see some of its chunks). Updates
run one at a time (each call is validated before its first chunk applies);
:meth:`UECIndex.save` waits for updates, not for searches. Text queries are
encoded before the lock is taken.

Fewer than ``k`` documents: when the index (or the ``filter``) leaves fewer
than ``k`` documents, each row holds them all and is padded with id ``-1``
and score ``-inf``, as faiss pads.

The file written by :meth:`UECIndex.save` is one checksummed
:mod:`crossembed._io` raw container (atomic, streamed) of index format
:data:`INDEX_VERSION`: the graph (with the means), the ids, the variances when any, optional
texts, the scoring's config and the fitted ensemble. :meth:`UECIndex.load`
reads it, or memory-maps the store with ``mmap=True``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._config import check_plugin
from crossembed._io import CorruptFileError, load_arrays, save_raw_arrays
from crossembed._validation import INT_MAX, check_int, check_num_threads
from crossembed.ann import MeanGraph
from crossembed.uec._random import int_seed
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.locking import ReadWriteLock
from crossembed.uec.scoring import ProbitScoring, scoring_from_config
from crossembed.uec.store import DocStore, as_ids, check_ids

__all__ = ["INDEX_VERSION", "UECIndex", "merge_topk", "query_gaussians"]

_KIND = "crossembed.uec.UECIndex"
#: Version of the index file layout written by :meth:`UECIndex.save` (the only one :meth:`UECIndex.load` reads).
INDEX_VERSION = 4
_BLOCK = 16384  # slots per block of prepared documents (exact search and the panel cache go block by block)
_RERANK_ROWS = 32768  # candidate rows prepared per rerank batch when the panels are not cached
_EXACT_FILTER_ROWS = 20000  # a filter allowing at most this many documents is searched exactly
# An update applies its documents in chunks, one exclusive hold of the lock each, sized so that a hold
# lasts about _WRITE_HOLD_S (a waiting search waits about that long): the graph links a new slot several
# times faster than it re-links a reused or updated one, so a fixed count would not bound the wait. While
# no search came during the previous chunk, holds may last _WRITE_HOLD_IDLE_S: a chunk of a few rows
# leaves the insertion threads idle at its end (a bulk load on 2 threads spent twice the CPU at 20 rows).
_WRITE_HOLD_S = 0.02
_WRITE_HOLD_IDLE_S = 0.2
_WRITE_CHUNK_FIRST = 32
_WRITE_CHUNK_MAX = 4096
_MAX_RESULTS = 1 << 28  # queries x k: larger result arrays are refused (they would exhaust memory)
# the panel budget is checked against the probit's packed panels (three float32 values per coordinate),
# the largest prepared form, before any block exists
_PANEL_BYTES_PER_VALUE = 12
# the ANN rerank visits cached blocks only when it has this many candidate rows per block or more: below,
# preparing just the candidate rows costs less than a step per block (crossover: docs/uec_index.md)
_ROWS_PER_CACHED_BLOCK = 256


def _pack_texts(texts: Sequence[Optional[str]]) -> Tuple[np.ndarray, np.ndarray]:
    blobs = [(t or "").encode("utf-8") for t in texts]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in blobs])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).copy(), offsets


def _unpack_texts(data: np.ndarray, offsets: np.ndarray) -> List[str]:
    raw = np.asarray(data).tobytes()
    return [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]


def _check_texts(texts, n: int) -> Optional[List[str]]:
    if texts is None:
        return None
    texts = list(texts)
    if len(texts) != n or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"texts must hold {n} strings (one per document)")
    return texts


def _check_scoring(scoring, ensemble: Optional[UECEnsemble]):
    """``scoring``, else the ensemble's, else the probit with variances."""
    if scoring is None:
        return ProbitScoring() if ensemble is None else ensemble.scoring
    return check_plugin(scoring, "scoring", ("prepare", "get_config"), "ProbitScoring()")


def _write_graph_file(graph: np.ndarray) -> str:
    """The saved graph bytes as a temporary file for :meth:`MeanGraph.load`.

    A memory map is copied from its file in 16 MiB reads, so its pages never
    become resident: loading holds the graph once, not twice.
    """
    fd, tmp = tempfile.mkstemp(suffix=".hnsw")
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(graph, np.memmap) and graph.filename is not None:
                with open(graph.filename, "rb") as src:
                    src.seek(graph.offset)
                    left = graph.nbytes
                    while left:
                        chunk = src.read(min(left, 1 << 24))
                        if not chunk:
                            raise CorruptFileError(f"{graph.filename}: graph bytes end early (truncated?)")
                        fh.write(chunk)
                        left -= len(chunk)
            else:
                flat = np.asarray(graph).reshape(-1)
                for s in range(0, flat.size, 1 << 26):
                    fh.write(memoryview(np.ascontiguousarray(flat[s : s + (1 << 26)])))
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _padded(scores: np.ndarray, ids: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(Q, j)`` results widened to ``k`` columns with score -inf and id -1 (faiss's padding)."""
    if scores.shape[1] >= k:
        return scores, ids
    q, j = scores.shape
    out_s = np.full((q, k), -np.inf, np.float32)
    out_i = np.full((q, k), -1, np.int64)
    out_s[:, :j], out_i[:, :j] = scores, ids
    return out_s, out_i


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


def merge_topk(scores: np.ndarray, ids: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of each row of ``(Q, M)`` scores/ids: score descending, ties to the lower id.

    ``-1`` ids are padding and go last. Used to merge blocks and shards, so
    merging any partition of the documents gives the same answer.
    """
    pad = ids < 0
    key_ids = np.where(pad, np.iinfo(np.int64).max, ids)
    key_scores = np.where(pad, np.inf, -scores.astype(np.float64))
    order = np.lexsort((key_ids, key_scores), axis=-1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


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
    M : int
        HNSW links per node (default 32).
    ef_construction : int
        HNSW candidate list size while inserting (default 200).
    rerank : int
        ANN candidates reranked exactly per query when :meth:`search` is not told (default 100).
    dtype : {"float32", "float16"}
        Storage of the document means and variances (default float32; float16 halves it,
        scores are computed in float32 either way).
    panel_cache_bytes : int
        Bytes of prepared documents with variances kept between searches (default 1 GiB): the
        prepared blocks are cached while those of every document fit, else prepared per call.
    random_state : int, Generator or None
        The graph's construction seed (default 0; None or a Generator: one is drawn and saved).
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
        M: int = 32,
        ef_construction: int = 200,
        rerank: int = 100,
        dtype: str = "float32",
        panel_cache_bytes: int = 1 << 30,
        random_state=0,
        num_threads: Optional[int] = None,
    ):
        self._configure(
            ensemble,
            scoring,
            {"M": M, "ef_construction": ef_construction, "rerank": rerank, "random_state": random_state},
            panel_cache_bytes=panel_cache_bytes,
            num_threads=num_threads,
        )
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        if len(docs) == 0:
            raise ValueError("docs must not be empty")
        if ensemble is not None and ensemble.dim != docs.dim:
            raise ValueError(f"docs have dimension {docs.dim} but the ensemble produces {ensemble.dim}")
        texts = _check_texts(texts, len(docs))
        ids = np.arange(len(docs), dtype=np.int64) if ids is None else check_ids(ids, len(docs))
        self._store = DocStore.empty(docs.dim, dtype, capacity=len(docs), keep_texts=texts is not None)
        self._graph = MeanGraph(
            docs.dim,
            storage=self._store.dtype.name,
            max_elements=len(docs),
            M=self.M,
            ef_construction=self.ef_construction,
            random_seed=self.random_state,
        )
        self._insert(docs, ids, texts, chunk=len(docs))  # one graph call: nobody can search yet

    def _configure(self, ensemble, scoring, graph: Dict[str, Any], *, panel_cache_bytes, num_threads) -> None:
        """Check and set everything but the documents (shared by the constructor and :meth:`load`)."""
        if ensemble is not None and not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        self.ensemble = ensemble
        self.scoring = _check_scoring(scoring, ensemble)
        self.M = check_int(graph["M"], "M", low=2, high=INT_MAX)
        self.ef_construction = check_int(graph["ef_construction"], "ef_construction", low=1, high=INT_MAX)
        self.rerank = check_int(graph["rerank"], "rerank", low=1, high=INT_MAX)
        self.panel_cache_bytes = check_int(panel_cache_bytes, "panel_cache_bytes", low=0)
        self.random_state = int_seed(graph["random_state"])
        check_num_threads(num_threads)
        self.num_threads = num_threads
        self._rw = ReadWriteLock()  # searches shared, changes to the store and graph exclusive
        self._update_lock = threading.Lock()  # one update (or save) at a time, across its chunks
        self._blocks: Dict[int, Tuple[Any, np.ndarray]] = {}  # block -> (prepared documents, their slots)
        self._rows_packed = 0  # candidate rows prepared per search since blocks were last rebuilt

    @classmethod
    def build(
        cls,
        ensemble: UECEnsemble,
        docs,
        *,
        ids=None,
        M: int = 32,
        ef_construction: int = 200,
        rerank: int = 100,
        dtype: str = "float32",
        panel_cache_bytes: int = 1 << 30,
        random_state=0,
        num_threads: Optional[int] = None,
        batch_size: int = 64,
        show_progress_bar: bool = True,
    ) -> UECIndex:
        """Index ``docs`` for ``ensemble``: texts are encoded as passages (and kept), or pass
        a passage :class:`GaussianEmbedding` from :meth:`UECEnsemble.encode`/``combine``.

        When the ensemble routes by retrieval confidence and has no reference
        collection yet, the index keeps a copy of it whose reference is the
        encoded documents (texts only; with a GaussianEmbedding pass an
        ensemble from :meth:`UECEnsemble.with_reference`). ``ensemble`` itself
        is left as it was. ``batch_size`` and ``show_progress_bar`` are the
        encoding's; the other options are the constructor's.
        """
        if not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        options = {
            "ids": ids,
            "M": M,
            "ef_construction": ef_construction,
            "rerank": rerank,
            "dtype": dtype,
            "panel_cache_bytes": panel_cache_bytes,
            "random_state": random_state,
            "num_threads": num_threads,
        }
        if isinstance(docs, GaussianEmbedding):
            return cls(docs, ensemble=ensemble, **options)
        if isinstance(docs, str):
            raise TypeError("docs must be a list of strings or a GaussianEmbedding, not one string")
        texts = list(docs)
        comps = ensemble.encode_components(
            texts, role="passage", batch_size=batch_size, show_progress_bar=show_progress_bar
        )
        if ensemble.needs_reference and not ensemble.has_reference:
            ensemble = ensemble.with_reference(comps)  # retrieval confidence is measured over the indexed documents
        return cls(ensemble.combine(comps, role="passage"), ensemble=ensemble, texts=texts, **options)

    # ------------------------------------------------------------------ contents
    def __len__(self) -> int:
        with self._rw.read():
            return len(self._store)

    @property
    def dim(self) -> int:
        return self._store.dim

    @property
    def dtype(self) -> str:
        return self._store.dtype.name

    @property
    def ids(self) -> np.ndarray:
        """External ids of the documents, in storage order."""
        with self._rw.read():
            return self._store.ids[self._store.live_slots()]

    @property
    def docs(self) -> GaussianEmbedding:
        """The documents (float32 copies, storage order; see :attr:`ids`)."""
        with self._rw.read():
            return GaussianEmbedding(*self._rows(self._store.live_slots()))

    @property
    def texts(self) -> Optional[List[str]]:
        """Document texts in storage order (None when the index keeps none)."""
        with self._rw.read():
            if self._store.texts is None:
                return None
            return [self._store.texts[s] for s in self._store.live_slots()]

    def get_docs(self, ids) -> GaussianEmbedding:
        """The documents of ``ids`` (float32 copies, in the order given; ValueError for an unknown id)."""
        ids = as_ids(ids)
        with self._rw.read():
            return GaussianEmbedding(*self._rows(self._store.slots_of(ids)))

    def contains(self, ids) -> np.ndarray:
        """Boolean mask over ``ids`` (int, any shape flattened): which are documents of the index."""
        ids = as_ids(ids, low=-(2**63))
        with self._rw.read():
            return self._store.contains(ids)

    def get_texts(self, ids) -> List[Optional[str]]:
        """Texts of ``ids`` (``-1``, the padding of :meth:`search`, and ids not in the index give None)."""
        ids = as_ids(ids, low=-1)
        with self._rw.read():
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
        """Bytes held: the store (ids, flags, variances), the graph (the means and links) and cached
        prepared blocks."""
        with self._rw.read():
            blocks = sum(int(prepared.nbytes) for prepared, _ in list(self._blocks.values()))
            return {"store": self._store.nbytes(), "graph": self._graph.nbytes, "panels": blocks}

    def _rows(self, slots: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """float32 means (from the graph) and variances of store ``slots``."""
        return self._graph.rows(slots), self._store.variances(slots)

    # ------------------------------------------------------------------ updates
    def _check_docs(self, docs, texts) -> Optional[List[str]]:
        """Check documents to store (dimension, the store's range) and their texts; returns the texts."""
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        if docs.dim != self.dim:
            raise ValueError(f"docs have dimension {docs.dim} but the index has {self.dim}")
        self._store.check_rows(docs.mean, docs.var)
        if (texts is None) != (self._store.texts is None):
            raise ValueError("texts must be given exactly when the index keeps texts")
        return _check_texts(texts, len(docs))

    def _grow_graph(self) -> None:
        if self._store.capacity > self._graph.max_elements:
            self._graph.resize(self._store.capacity)

    def _chunked(self, n: int, apply, chunk: Optional[int] = None) -> None:
        """``apply(rows)`` over consecutive slices of ``range(n)``, each under the exclusive lock; chunks
        are sized from the last one's time so a hold lasts about ``_WRITE_HOLD_S``, or ``_WRITE_HOLD_IDLE_S``
        while no search came during the last one (``chunk`` fixes them)."""
        size, start = chunk or _WRITE_CHUNK_FIRST, 0
        while start < n:
            part = slice(start, min(n, start + size))
            began, reads = time.perf_counter(), self._rw.reads
            with self._rw.write():
                apply(part)
            if chunk is None:
                per_row = max(time.perf_counter() - began, 1e-9) / (part.stop - part.start)
                hold = _WRITE_HOLD_S if self._rw.reads != reads else _WRITE_HOLD_IDLE_S
                size = int(min(_WRITE_CHUNK_MAX, max(1, hold / per_row)))
            start = part.stop

    def _write(self, docs: GaussianEmbedding, ids: np.ndarray, texts, place, chunk: Optional[int] = None) -> None:
        """Store ``docs`` under ``ids`` in the slots ``place(var, ids, texts)`` writes them to, and
        link them in the graph (which adds a new label, re-links a reused or existing one), in chunks."""
        threads = self.num_threads

        def apply(part: slice) -> None:
            mean = docs.mean[part]
            slots = place(docs.var[part], ids[part], None if texts is None else texts[part])
            self._graph.add(mean, slots, num_threads=threads)
            self._forget_blocks(slots)

        self._chunked(len(ids), apply, chunk)

    def _insert(self, docs: GaussianEmbedding, ids: np.ndarray, texts, chunk: Optional[int] = None) -> None:
        """Store and link documents under new ``ids`` (freed slots first)."""

        def place(var, part_ids, part_texts) -> np.ndarray:
            slots = self._store.put(var, part_ids, part_texts)
            self._grow_graph()
            return slots

        self._write(docs, ids, texts, place, chunk)

    def _rewrite(self, docs: GaussianEmbedding, ids: np.ndarray, texts) -> None:
        """Replace the rows of existing ``ids`` in their slots."""

        def place(var, part_ids, part_texts) -> np.ndarray:
            slots = self._store.slots_of(part_ids)
            self._store.replace(slots, var, part_texts)
            return slots

        self._write(docs, ids, texts, place)

    def reserve(self, capacity: int) -> None:
        """Make room for ``capacity`` documents in all (later :meth:`add` calls up to it then never
        reallocate the store or the graph); never shrinks."""
        capacity = check_int(capacity, "capacity", low=1)
        with self._update_lock, self._rw.write():
            self._store.reserve(capacity)
            self._grow_graph()

    def add(self, docs: GaussianEmbedding, *, ids=None, texts: Optional[Sequence[str]] = None) -> np.ndarray:
        """Add documents; returns their ids.

        Parameters
        ----------
        docs : GaussianEmbedding
            Passage Gaussians of the index's dimension.
        ids : array_like of int, optional
            New distinct ids (default: after the largest id ever used).
        texts : sequence of str, optional
            Required when the index keeps texts (and refused otherwise).

        Raises ValueError, and adds nothing, when an id is already in the index.
        """
        texts = self._check_docs(docs, texts)
        if len(docs) == 0:
            return np.zeros(0, np.int64)
        with self._update_lock:
            ids = self._store.next_ids(len(docs)) if ids is None else check_ids(ids, len(docs))
            present = self._store.contains(ids)
            if present.any():
                raise ValueError(f"ids {ids[present][:5].tolist()} are already in the index (use upsert to replace)")
            self._insert(docs, ids, texts)
        return ids

    def upsert(self, docs: GaussianEmbedding, *, ids, texts: Optional[Sequence[str]] = None) -> np.ndarray:
        """Replace the documents (vectors and texts) of ``ids`` already in the index; add the others.

        Parameters
        ----------
        docs : GaussianEmbedding
            Passage Gaussians of the index's dimension.
        ids : array_like of int
            Distinct ids, one per document.
        texts : sequence of str, optional
            Required when the index keeps texts (and refused otherwise).

        Returns the ids. A search sees each replaced document either before or after.
        """
        texts = self._check_docs(docs, texts)
        ids = check_ids(ids, len(docs))
        with self._update_lock:
            present = self._store.contains(ids)
            for rows, apply in ((np.flatnonzero(present), self._rewrite), (np.flatnonzero(~present), self._insert)):
                if len(rows):
                    part = GaussianEmbedding(docs.mean[rows], docs.var[rows])
                    apply(part, ids[rows], None if texts is None else [texts[r] for r in rows])
        return ids

    def remove(self, ids) -> None:
        """Remove documents by id (ValueError for an id not in the index; nothing is removed then).

        Removing every document is allowed: searches then return only padding.
        """
        ids = check_ids(ids)
        with self._update_lock:
            slots = self._store.slots_of(ids)

            def apply(part: slice) -> None:
                self._graph.mark_deleted(slots[part])
                self._store.drop(slots[part])
                self._forget_blocks(slots[part])

            self._chunked(len(slots), apply)

    def _forget_blocks(self, slots: np.ndarray) -> None:
        for b in np.unique(slots // _BLOCK):
            self._blocks.pop(int(b), None)

    # ------------------------------------------------------------------ search
    def _allowed(self, filter_ids: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Sorted slots of the live documents among ``filter_ids`` (others are ignored; may be empty)."""
        if filter_ids is None:
            return None
        ids = filter_ids[self._store.contains(filter_ids)]
        return np.sort(self._store.slots_of(ids))

    def _candidate_slots(self, mean: np.ndarray, m: int, ef: int, threads: Optional[int], allowed) -> np.ndarray:
        """The graph's ``m`` nearest slots per query (``allowed``: sorted slots, or None for all live ones).

        A query the graph finds fewer than ``m`` of (a sparse graph, many identical documents)
        gets its candidates by exact inner product instead.
        """
        mask = None
        if allowed is not None:
            mask = np.zeros(self._store.n_slots, dtype=bool)
            mask[allowed] = True
        slots, _ = self._graph.knn(mean, m, ef=ef, allowed=mask, num_threads=threads)
        short = np.flatnonzero((slots < 0).any(axis=1))
        if len(short):
            pool = self._store.live_slots() if allowed is None else allowed
            slots[short] = np.stack([self._exact_candidates(mean[i], m, pool) for i in short])
        return slots

    def _exact_candidates(self, query: np.ndarray, m: int, pool: np.ndarray) -> np.ndarray:
        """The ``m`` slots of ``pool`` of largest inner product with ``query`` (ties: lower slot)."""
        ip = np.concatenate(
            [self._graph.rows(pool[s : s + _BLOCK]) @ query for s in range(0, len(pool), _BLOCK)]
        ).astype(np.float64)
        return pool[np.lexsort((pool, -ip))[:m]]

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
        threads = num_threads if num_threads is not None else self.num_threads
        check_num_threads(threads)
        with self._rw.read():
            n = len(self._store)
            if n == 0:
                return np.full((len(q), m), -1, np.int64)
            slots = self._candidate_slots(q.mean, min(m, n), max(ef, min(m, n)), threads, None)
            ids = self._to_ids(slots)
        return np.pad(ids, ((0, 0), (0, m - ids.shape[1])), constant_values=-1)

    def _to_ids(self, slots: np.ndarray) -> np.ndarray:
        return np.where(slots >= 0, self._store.ids[np.maximum(slots, 0)], -1)

    def _score_rows(self, q: GaussianEmbedding, rows: np.ndarray, k: int, candidates, nt, block=None):
        """Top-``k`` of ``q`` over store ``rows`` (or among ``candidates``, positions in ``rows``) as slots,
        widened past ``k`` while the ``k``-th score ties the last one returned.

        The kernel breaks ties by position (slot order), the index by id; after updates the two differ,
        so a tie across the cut must come back whole for :func:`merge_topk` to keep the lower ids.
        """
        prepared = self._prepared(rows, block)
        width = len(rows) if candidates is None else candidates.shape[1]
        take = min(k + 1, width)
        while True:
            s, p = prepared.top_k(q.mean, q.var, take, candidates=candidates, num_threads=nt)
            cut = s[:, min(k, take) - 1]
            if take >= width or not np.any(np.isfinite(cut) & (cut == s[:, -1])):
                return s, np.where(p >= 0, rows[np.maximum(p, 0)], -1)
            take = min(2 * take, width)

    def _prepared(self, rows: np.ndarray, block: Optional[int]):
        """The scoring's prepared documents of store ``rows`` (kept when ``block`` is named and all fit)."""
        if block is not None and block in self._blocks:
            return self._blocks[block][0]
        mean, var = self._rows(rows)
        prepared = self.scoring.prepare(mean, var)
        del mean, var
        if block is not None and self._panels_fit():  # all or none: a partial cache would still pack per call
            self._blocks[block] = (prepared, rows)
        return prepared

    def _live_blocks(self) -> List[Tuple[int, np.ndarray]]:
        """``(block, live slots)`` of each fixed range of ``_BLOCK`` slots (fixed, so its panels can be cached)."""
        live = self._store.live_slots()
        cuts = np.searchsorted(live, np.arange(0, self._store.n_slots + _BLOCK, _BLOCK))
        return [(b, live[lo:hi]) for b, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])) if hi > lo]

    def _rerank_on_cached_panels(self, n_candidates: int) -> bool:
        """Whether to rerank ``n_candidates`` rows on the cached blocks (else prepare only those rows).

        Missing blocks (never built, or dropped by an update) are rebuilt once the rows prepared
        one search at a time since the last rebuild reach the rows the rebuild prepares (ski
        rental: at most twice the cheaper choice in hindsight), so a stream of searches beside a
        writer does not repack whole blocks per query, and a stable index ends up cached.
        """
        if not self._panels_fit():
            return False
        # a block holds at most _BLOCK documents: this many blocks are live at least (no slot scan needed)
        if n_candidates < _ROWS_PER_CACHED_BLOCK * -(-len(self._store) // _BLOCK):
            return False
        blocks = self._live_blocks()
        if n_candidates < _ROWS_PER_CACHED_BLOCK * len(blocks):
            return False  # too few rows to gain from the blocks even when they are all cached
        missing = sum(len(rows) for b, rows in blocks if b not in self._blocks)
        if missing == 0:
            return True
        if self._rows_packed + n_candidates >= missing:
            self._rows_packed = 0
            return True
        self._rows_packed += n_candidates  # racy between searches: only a heuristic's counter
        return False

    def _panels_fit(self) -> bool:
        """Whether prepared blocks are kept: the documents have variances (without, the prepared form
        is a re-layout of the graph's means) and the blocks of every live document fit ``panel_cache_bytes``."""
        if not self._store.has_variance:
            return False
        return _PANEL_BYTES_PER_VALUE * self.dim * len(self._store) <= self.panel_cache_bytes

    def _rerank_cached(self, q: GaussianEmbedding, cand: np.ndarray, k: int, nt) -> Tuple[np.ndarray, np.ndarray]:
        """Rerank ``cand`` (slots) block by block on the cached panels: each block sees, per query,
        only its own candidates (a ``(Q, c_b)`` matrix, ``c_b`` the most any query has there)."""
        srt = np.sort(cand, axis=1)  # -1 pads first; each block's candidates contiguous per row
        scores, ids = [], []
        for b, rows in self._live_blocks():
            lo = (srt < b * _BLOCK).sum(axis=1)
            hi = (srt < (b + 1) * _BLOCK).sum(axis=1)
            width = int((hi - lo).max())
            if width == 0:
                continue
            take = lo[:, None] + np.arange(width)
            valid = take < hi[:, None]
            slots = np.take_along_axis(srt, np.minimum(take, srt.shape[1] - 1), axis=1)
            local = np.where(valid, np.searchsorted(rows, slots), -1)
            sc, sl = self._score_rows(q, rows, min(k, width), local, nt, b)
            scores.append(sc)
            ids.append(self._to_ids(sl))
        return merge_topk(np.concatenate(scores, axis=1), np.concatenate(ids, axis=1), k)

    def _rerank_packed(self, q: GaussianEmbedding, cand: np.ndarray, k: int, nt) -> Tuple[np.ndarray, np.ndarray]:
        """Rerank ``cand`` (slots) per batch of queries, preparing only the rows that batch's candidates need."""
        m = cand.shape[1]
        out_s = np.empty((len(q), k), np.float32)
        out_i = np.empty((len(q), k), np.int64)
        step = max(1, _RERANK_ROWS // m)
        for s in range(0, len(q), step):
            c = cand[s : s + step]
            rows = np.unique(c[c >= 0])
            pos = np.where(c >= 0, np.searchsorted(rows, c), -1)
            sc, sl = self._score_rows(q[s : s + step], rows, k, pos, nt)
            out_s[s : s + step], out_i[s : s + step] = merge_topk(sc, self._to_ids(sl), k)
        return out_s, out_i

    def _exact(self, q: GaussianEmbedding, k: int, allowed, nt) -> Tuple[np.ndarray, np.ndarray]:
        if allowed is None:
            parts = self._live_blocks()
        else:
            parts = [(None, allowed[s : s + _BLOCK]) for s in range(0, len(allowed), _BLOCK)]
        scores, slots = [], []
        for b, rows in parts:
            s, sl = self._score_rows(q, rows, min(k, len(rows)), None, nt, None if b is None else int(b))
            scores.append(s)
            slots.append(sl)
        return merge_topk(np.concatenate(scores, axis=1), self._to_ids(np.concatenate(slots, axis=1)), k)

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
    ) -> Tuple[np.ndarray, np.ndarray]:
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
            ANN candidates per query (default ``self.rerank``, at least ``k``).
        ef : int, optional
            HNSW search breadth (default ``2 * rerank``).
        filter : array_like of int, optional
            Ids the results may come from (ids not in the index are ignored;
            none in it gives rows of padding). Up to 20,000 allowed documents
            are searched exactly; more go through the graph's filtered search.
        num_threads : int, optional
            Threads for this call (default: the index's ``num_threads``).

        Returns
        -------
        scores : ndarray (Q, k) float32, best first (ties: lower id)
        ids : ndarray (Q, k) int64
        """
        q = query_gaussians(queries, self.ensemble, self.dim)
        k = _check_result_k(k, len(q))
        nt = num_threads if num_threads is not None else self.num_threads
        check_num_threads(nt)
        m = max(k, check_int(rerank, "rerank", low=1, high=INT_MAX) if rerank is not None else self.rerank)
        ef = max(m, check_int(ef, "ef", low=1, high=INT_MAX)) if ef is not None else 2 * m
        filter_ids = None
        if filter is not None:
            filter_ids = np.unique(as_ids(filter, "filter", low=-(2**63)))
        with self._rw.read():  # one state of the index for the whole call
            allowed = self._allowed(filter_ids)
            n = len(self._store) if allowed is None else len(allowed)
            if n == 0:
                return _padded(np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), np.int64), k)
            if exact or (allowed is not None and n <= _EXACT_FILTER_ROWS):
                return _padded(*self._exact(q, min(k, n), allowed, nt), k)
            m = min(m, n)
            cand = self._candidate_slots(q.mean, m, max(ef, m), nt, allowed)
            rerank_fn = self._rerank_cached if self._rerank_on_cached_panels(cand.size) else self._rerank_packed
            return _padded(*rerank_fn(q, cand, min(k, n), nt), k)

    # ------------------------------------------------------------------ persistence
    def _state(self, graph: np.ndarray) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Arrays and JSON metadata of the file (``graph``: the graph's saved bytes, the means included)."""
        store = self._store
        arrays = {
            "ids": store.ids[: store.n_slots],
            "alive": store.alive[: store.n_slots],
            "graph": graph,
        }
        if store.has_variance:
            arrays["var"] = store.var
        meta = {
            "index_version": INDEX_VERSION,
            "M": self.M,
            "ef_construction": self.ef_construction,
            "rerank": self.rerank,
            "random_state": self.random_state,
            "dtype": self.dtype,
            "dim": self.dim,
            "has_variance": store.has_variance,
            "has_texts": store.texts is not None,
            "scoring": self.scoring.get_config(),
            "ensemble": None,
        }
        if store.texts is not None:
            arrays["texts"], arrays["text_offsets"] = _pack_texts(store.texts)
        if self.ensemble is not None:
            ens_arrays, meta["ensemble"] = self.ensemble.get_state()
            arrays.update({f"ens.{k}": v for k, v in ens_arrays.items()})
        return arrays, meta

    def save(self, path) -> Path:
        """Write the index to ``path`` atomically, with a checksum over everything (graph bytes included), streamed."""
        fd, tmp = tempfile.mkstemp(suffix=".hnsw")
        os.close(fd)
        try:
            with self._update_lock:  # no update while the file is written; searches go on
                self._graph.save(tmp)
                arrays, meta = self._state(np.memmap(tmp, dtype=np.uint8, mode="r"))
                out = save_raw_arrays(path, _KIND, arrays, meta)
                del arrays
            return out
        finally:
            os.unlink(tmp)

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
        """Read an index written by :meth:`save`.

        With ``mmap=True`` the document store (ids, flags, variances) stays on
        disk as a read-only memory map (the first :meth:`add`/:meth:`remove`
        copies it into memory); the graph, with the means, is always read into memory. The saved ensemble is
        restored unless ``ensemble`` is given; its encoders load lazily (by
        stored name, or from ``encoders``). ``num_threads`` as in the constructor.

        Raises ValueError for a file of another index format version, and
        :class:`crossembed._io.CorruptFileError` (a ValueError) when the file
        is truncated, edited or of another kind.
        """
        path = Path(path)
        if ensemble is not None and not isinstance(ensemble, UECEnsemble):
            raise TypeError(f"ensemble must be a UECEnsemble, got {type(ensemble).__name__}")
        if not path.is_file():
            raise FileNotFoundError(f"no index file at {str(path)!r}")
        # the graph is always mapped: it is copied from the file into MeanGraph, never read into memory whole
        arrays, meta = load_arrays(path, _KIND, mmap=True if mmap else {"graph"})
        version = meta.get("index_version")
        if version != INDEX_VERSION:
            raise ValueError(
                f"{path}: UECIndex file version {version} is not supported (expected {INDEX_VERSION}); "
                "rebuild the index with this release"
            )
        try:
            store = _read_store(path, arrays, meta)
            if ensemble is None and meta["ensemble"] is not None:
                ens_arrays = {k[4:]: v for k, v in arrays.items() if k.startswith("ens.")}
                ensemble = UECEnsemble.from_state(ens_arrays, meta["ensemble"], encoders=encoders)
            self = cls.__new__(cls)
            graph = {key: meta[key] for key in ("M", "ef_construction", "rerank", "random_state")}
            scoring = scoring_from_config(meta["scoring"])
            self._configure(ensemble, scoring, graph, panel_cache_bytes=1 << 30, num_threads=num_threads)
            self._store = store
            self._graph = self._load_graph(arrays["graph"])
            return self
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, CorruptFileError):
                raise
            raise CorruptFileError(f"{path}: incomplete UECIndex ({type(exc).__name__}: {exc})") from None

    def _load_graph(self, graph: np.ndarray) -> MeanGraph:
        tmp = _write_graph_file(graph)
        try:
            loaded = MeanGraph.load(tmp, dim=self.dim, storage=self.dtype, max_elements=max(1, self._store.capacity))
        except (RuntimeError, ValueError) as exc:
            raise CorruptFileError(f"unreadable graph ({exc})") from None
        finally:
            os.unlink(tmp)
        if loaded.count != self._store.n_slots:
            raise CorruptFileError(f"the graph holds {loaded.count} items, expected {self._store.n_slots}")
        return loaded

    def __repr__(self) -> str:
        return (
            f"UECIndex(n={len(self)}, dim={self.dim}, dtype={self.dtype}, M={self.M}, rerank={self.rerank}, "
            f"scoring={self.scoring!r})"
        )


def _read_store(path: Path, arrays: Dict[str, np.ndarray], meta: Dict[str, Any]) -> DocStore:
    """The document store of a loaded file (CorruptFileError when its arrays disagree)."""
    ids, alive, dim = arrays["ids"], arrays["alive"], int(meta["dim"])
    n = len(ids)
    var = arrays["var"] if meta["has_variance"] else None
    if alive.shape != (n,) or (var is not None and var.shape != (n, dim)) or dim < 1:
        raise CorruptFileError(f"{path}: inconsistent UECIndex arrays")
    texts = _unpack_texts(arrays["texts"], arrays["text_offsets"]) if meta["has_texts"] else None
    if texts is not None:
        texts = [t if a else None for t, a in zip(texts, alive)]
    return DocStore(ids, alive, dim=dim, dtype=meta["dtype"], var=var, texts=texts)
