"""The writer of a UEC index: updates of its store and graph, in chunks under a readers-writer lock.

A search holds :attr:`IndexWriter.lock` shared for its whole call; an update
holds it exclusively one chunk at a time, chunks sized to hold it about 20 ms
while searches come (200 ms while none came during the previous chunk), so a
search waits for one chunk, not for a whole bulk add. Updates run one at a
time, each validated before its first chunk applies. Graph labels are store
slots. A removed document's node stays in the graph, marked deleted (searches
pass through it, never return it), and new documents (upserted ones too) take
new slots: re-linking a deleted node in place costs hnswlib tens of fresh
insertions. Once the deleted slots exceed ``compact_at`` times the live ones,
the update that got them there compacts: a graph of the live documents is
built aside while searches go on, then swapped in under one exclusive hold,
so the memory held stays within ``1 + compact_at`` times the live set's.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from typing import Callable, ContextManager, List, Optional, Sequence

import numpy as np

from crossembed._validation import check_int
from crossembed.ann import MeanGraph
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.locking import ReadWriteLock
from crossembed.uec.store import DocStore, check_ids, check_texts, mean_rows

__all__ = ["IndexWriter"]

# A chunk is sized by time, not rows (a new slot links several times faster than a reused or updated one), so
# that a waiting search waits about _WRITE_HOLD_S; while no search came, _WRITE_HOLD_IDLE_S (a chunk of a few
# rows leaves the insertion threads idle at its end).
_WRITE_HOLD_S = 0.02
_WRITE_HOLD_IDLE_S = 0.2
_WRITE_CHUNK_FIRST = 32
_WRITE_CHUNK_MAX = 4096
_COMPACT_ROWS = 65536  # live rows read from the old graph per insertion call while compacting (bounds the copy)


def _heap_trimmer() -> Optional[Callable[[int], int]]:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):
        return None


# After a compaction frees the old graph, glibc keeps most of it as free heap (its upper-layer link lists are
# small allocations spread over the arenas of the insertion threads, and a freed large block raises the
# threshold under which later large blocks come from the heap too): malloc_trim hands those pages back.
_TRIM_HEAP = _heap_trimmer()


class IndexWriter:
    """Adds, upserts and removes documents of ``store`` and ``graph`` in chunks, one update at a time.

    Parameters
    ----------
    store : DocStore
        The documents' ids, flags, variances and texts, by slot.
    graph : MeanGraph
        The documents' means, labelled by slot.
    on_change : callable
        Called with the slots of each chunk, under the exclusive lock, after they changed
        (the rerank planner drops what it prepared from them).
    new_graph : callable
        ``new_graph(capacity)``: an empty graph with the index's settings, which :meth:`compact` fills.
    compact_at : float or None, optional
        Compact once the deleted slots exceed this many times the live documents (default None: only
        when :meth:`compact` is called).
    num_threads : int, optional
        Threads linking documents into the graph (default: all cores).
    """

    def __init__(
        self,
        store: DocStore,
        graph: MeanGraph,
        *,
        on_change: Callable[[np.ndarray], None],
        new_graph: Callable[[int], MeanGraph],
        compact_at: Optional[float] = None,
        num_threads: Optional[int] = None,
    ):
        self.store = store
        self.graph = graph
        self.num_threads = num_threads
        self.compact_at = compact_at
        self._new_graph = new_graph
        self.lock = ReadWriteLock()  # searches shared, changes to the store and graph exclusive
        self._updating = threading.Lock()  # one update (or save) at a time, across its chunks
        self._on_change = on_change

    def no_updates(self) -> ContextManager:
        """A ``with`` block during which no update runs (searches go on)."""
        return self._updating

    def check_docs(self, docs, texts) -> Optional[List[str]]:
        """Check documents to store (dimension, the store's range) and their texts; returns the texts."""
        if not isinstance(docs, GaussianEmbedding):
            raise TypeError(f"docs must be a GaussianEmbedding, got {type(docs).__name__}")
        if docs.dim != self.store.dim:
            raise ValueError(f"docs have dimension {docs.dim} but the index has {self.store.dim}")
        self.store.check_rows(docs.mean, docs.var)
        if (texts is None) != (self.store.texts is None):
            raise ValueError("texts must be given exactly when the index keeps texts")
        return check_texts(texts, len(docs))

    # ------------------------------------------------------------------ updates
    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` documents in the store and the graph (never shrinks)."""
        capacity = check_int(capacity, "capacity", low=1)
        with self._updating, self.lock.write():
            self.store.reserve(capacity)
            self._grow_graph()

    def add(self, docs: GaussianEmbedding, ids, texts: Optional[Sequence[str]]) -> np.ndarray:
        """Store new documents (ids: distinct, none present; None: after the largest ever used); returns the ids."""
        texts = self.check_docs(docs, texts)
        if len(docs) == 0:
            return np.zeros(0, np.int64)
        with self._updating:
            ids = self.store.next_ids(len(docs)) if ids is None else check_ids(ids, len(docs))
            present = self.store.contains(ids)
            if present.any():
                raise ValueError(f"ids {ids[present][:5].tolist()} are already in the index (use upsert to replace)")
            self.insert(docs, ids, texts)
        return ids

    def upsert(self, docs: GaussianEmbedding, ids, texts: Optional[Sequence[str]]) -> np.ndarray:
        """Replace the documents of ``ids`` already present, add the others; returns the ids."""
        texts = self.check_docs(docs, texts)
        ids = check_ids(ids, len(docs))
        with self._updating:
            present = self.store.contains(ids)
            for rows, apply in ((np.flatnonzero(present), self._replace), (np.flatnonzero(~present), self.insert)):
                if len(rows):
                    part = GaussianEmbedding(docs.mean[rows], docs.var[rows])
                    apply(part, ids[rows], None if texts is None else [texts[r] for r in rows])
            self._compact_if_due()
        return ids

    def remove(self, ids) -> None:
        """Remove documents by id (ValueError for an id not present; nothing is removed then)."""
        ids = check_ids(ids)
        with self._updating:
            slots = self.store.slots_of(ids)

            def apply(part: slice) -> None:
                self.graph.mark_deleted(slots[part])
                self.store.drop(slots[part])
                self._on_change(slots[part])

            self.chunked(len(slots), apply)
            self._compact_if_due()

    def insert(self, docs: GaussianEmbedding, ids: np.ndarray, texts, chunk: Optional[int] = None) -> None:
        """Store and link checked documents under new ``ids`` in new slots; ``chunk`` fixes the chunk size."""
        self._write(docs, ids, texts, False, chunk)

    def _replace(self, docs: GaussianEmbedding, ids: np.ndarray, texts) -> None:
        """Replace the documents of present ``ids``: each chunk deletes their slots and stores them in new ones."""
        self._write(docs, ids, texts, True)

    def _write(self, docs: GaussianEmbedding, ids: np.ndarray, texts, replace: bool, chunk: Optional[int] = None):
        """Store ``docs`` under ``ids`` in new slots and link them in the graph, in chunks (``replace``: each
        chunk first deletes the slots the ids held, so a search sees a document either before or after)."""

        def apply(part: slice) -> None:
            old = self.store.slots_of(ids[part]) if replace else np.zeros(0, np.int64)
            if replace:
                self.graph.mark_deleted(old)
                self.store.drop(old)
            slots = self.store.put(docs.mean[part], docs.var[part], ids[part], None if texts is None else texts[part])
            self._grow_graph()
            self.graph.add(docs.mean[part], slots, num_threads=self.num_threads)
            self._on_change(np.concatenate([old, slots]))

        self.chunked(len(ids), apply, chunk)

    # ------------------------------------------------------------------ compaction
    def compact(self) -> None:
        """Rebuild the store and the graph on the live documents alone (slots ``0 .. n-1``, no deleted node).

        Waits for the update in progress and holds later ones off; searches go on against the old graph while
        the new one is built, and wait only for the swap.
        """
        with self._updating:
            self._compact()

    def _compact_if_due(self) -> None:
        if self.compact_at is not None and self.store.deleted > self.compact_at * len(self.store):
            self._compact()

    def _compact(self) -> None:
        # room for the slots the next compaction comes at, so the graph is not reallocated in between
        headroom = 0 if self.compact_at is None else math.ceil(self.compact_at * len(self.store)) + 1
        store = self.store.compacted(headroom)
        graph = self._new_graph(store.capacity)
        live = self.store.live_slots()
        for start in range(0, len(live), _COMPACT_ROWS):
            part = live[start : start + _COMPACT_ROWS]
            rows = np.arange(start, start + len(part), dtype=np.int64)
            graph.add(mean_rows(self.store, self.graph, part, self.num_threads), rows, num_threads=self.num_threads)
        changed = np.arange(self.store.n_slots, dtype=np.int64)
        with self.lock.write():
            self.store.take(store)
            self.graph.take(graph)  # `graph` now holds the old nodes, freed after the hold
            self._on_change(changed)
        del graph, store
        if _TRIM_HEAP is not None:
            _TRIM_HEAP(0)

    def _grow_graph(self) -> None:
        if self.store.capacity > self.graph.max_elements:
            self.graph.resize(self.store.capacity)

    def chunked(self, n: int, apply: Callable[[slice], None], chunk: Optional[int] = None) -> None:
        """``apply(rows)`` over consecutive slices of ``range(n)``, each under the exclusive lock; chunks
        are sized from the last one's time so a hold lasts about ``_WRITE_HOLD_S``, or ``_WRITE_HOLD_IDLE_S``
        while no search came during the last one (``chunk`` fixes them)."""
        size, start = chunk or _WRITE_CHUNK_FIRST, 0
        while start < n:
            part = slice(start, min(n, start + size))
            began, reads = time.perf_counter(), self.lock.reads
            with self.lock.write():
                apply(part)
            if chunk is None:
                per_row = max(time.perf_counter() - began, 1e-9) / (part.stop - part.start)
                hold = _WRITE_HOLD_S if self.lock.reads != reads else _WRITE_HOLD_IDLE_S
                size = int(min(_WRITE_CHUNK_MAX, max(1, hold / per_row)))
            start = part.stop
