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
the update that got them there starts a compaction and returns: a thread
builds a graph of the live documents aside while searches and updates go on
against the old one. The updates applied meanwhile are journaled (their rows
copied; a document removed before the build read its row has the row kept
aside first, as the graph hands out no row of a deleted node) and replayed
onto the new store and graph (most of it while updates go on, the last few
rows with them held off), which are then swapped in under one exclusive hold;
an update waits only for the snapshot at the start and for those last rows at
the end, not for the build. The memory held stays
within ``1 + compact_at`` times the live set's, plus the deletions of the
updates that run during a build.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from typing import Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._glibc import malloc_trim
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
# A build's journal is replayed while updates go on until at most _REPLAY_HELD_ROWS rows are left (or after
# _CATCH_UP_ROUNDS rounds), then the rest with updates held off, so an update waits for a few rows' replay.
_REPLAY_HELD_ROWS = 256
_CATCH_UP_ROUNDS = 8


class _Compaction:
    """A compaction in flight: the live documents' snapshot (a compacted store, their old slots), the
    updates applied since (replayed onto the snapshot before the swap), and the thread building its graph."""

    def __init__(self, store: DocStore, live: np.ndarray, background: bool):
        self.store = store
        self.live = live  # the old slots of the snapshot's documents, sorted (new slot = position)
        self.read = 0  # positions of ``live`` whose rows the build has read
        self.kept: Dict[int, np.ndarray] = {}  # old slot -> row, for snapshot documents removed before read
        self.journal: List[Tuple] = []  # ("drop", ids) | ("put", mean, var, ids, texts) | ("reserve", capacity)
        self.background = background
        # the thread that builds it (gone in a forked child: then nobody does)
        self.thread = threading.current_thread()
        self.done = threading.Event()
        self.error: Optional[BaseException] = None

    @property
    def running(self) -> bool:
        return not self.done.is_set() and self.thread.is_alive()


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
        self._compaction: Optional[_Compaction] = None  # set and cleared under _updating

    @property
    def compacting(self) -> bool:
        """Whether a compaction is building its graph (updates go on meanwhile)."""
        c = self._compaction
        return c is not None and c.running

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
            _fit_graph(self.store, self.graph)
            self._journal("reserve", capacity)

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
                self._keep_rows(slots[part])
                _drop(self.store, self.graph, slots[part])
                self._on_change(slots[part])
                self._journal("drop", ids[part])

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
                self._keep_rows(old)
                _drop(self.store, self.graph, old)
                self._journal("drop", ids[part])
            mean, var, texts_part = docs.mean[part], docs.var[part], None if texts is None else texts[part]
            slots = _put(self.store, self.graph, mean, var, ids[part], texts_part, self.num_threads)
            self._on_change(np.concatenate([old, slots]))
            self._journal("put", mean, var, ids[part], texts_part)

        self.chunked(len(ids), apply, chunk)

    # ------------------------------------------------------------------ compaction
    def compact(self) -> None:
        """Rebuild the store and the graph on the live documents alone (slots ``0 .. n-1``, no deleted node).

        Waits for a compaction in flight, then builds a new one in this thread and returns when it is in
        place; updates from other threads go on meanwhile (journaled and replayed), searches wait only for
        the swap. Raises what the build raised.
        """
        while True:
            self.wait_for_compaction()
            with self._updating:
                if not self._in_flight():
                    compaction = self._start_compaction(background=False)
                    break
        self._build(compaction)
        if compaction.error is not None:
            raise compaction.error

    def wait_for_compaction(self, timeout: Optional[float] = None) -> bool:
        """Wait for a compaction in flight (``timeout`` seconds at most, default no limit); True when none is."""
        c = self._compaction
        if c is not None and c.running:
            c.done.wait(timeout)
        return not self.compacting

    def _in_flight(self) -> bool:
        """Whether a compaction is under way (under ``_updating``; one whose builder is gone is dropped)."""
        if self._compaction is not None and not self._compaction.running:  # a forked child's copy: nobody builds it
            self._compaction = None
        return self._compaction is not None

    def _compact_if_due(self) -> None:
        due = self.compact_at is not None and self.store.deleted > self.compact_at * len(self.store)
        if due and not self._in_flight():
            compaction = self._start_compaction(background=True)
            # not a daemon: a process that exits during a build waits for it (a daemon thread stopped inside
            # the graph's native code at interpreter exit aborts the process)
            compaction.thread = threading.Thread(target=self._build, args=(compaction,), name="crossembed-compaction")
            compaction.thread.start()

    def _start_compaction(self, background: bool) -> _Compaction:
        """The snapshot of the live documents (under ``_updating``); the updates from now on are journaled."""
        # room for the slots the next compaction comes at, so the graph is not reallocated in between
        headroom = 0 if self.compact_at is None else math.ceil(self.compact_at * len(self.store)) + 1
        self._compaction = _Compaction(self.store.compacted(headroom), self.store.live_slots(), background)
        return self._compaction

    def _keep_rows(self, slots: np.ndarray) -> None:
        """Before ``slots`` are marked deleted (under the exclusive lock): keep the rows the compaction's build
        has yet to read."""
        c = self._compaction
        if c is None or c.read >= len(c.live):
            return
        pos = np.minimum(np.searchsorted(c.live, slots), len(c.live) - 1)
        unread = slots[(c.live[pos] == slots) & (pos >= c.read)]
        if len(unread):
            c.kept.update(zip(unread.tolist(), mean_rows(self.store, self.graph, unread, self.num_threads)))

    def _read_rows(self, c: _Compaction, part: np.ndarray) -> np.ndarray:
        """The rows of the snapshot's old slots ``part``, next in order (under the shared lock)."""
        kept = np.fromiter((s in c.kept for s in part.tolist()), bool, len(part))
        rows = np.empty((len(part), self.store.dim), np.float32)
        if (~kept).any():
            rows[~kept] = mean_rows(self.store, self.graph, part[~kept], self.num_threads)
        for i in np.flatnonzero(kept):
            rows[i] = c.kept.pop(int(part[i]))
        c.read += len(part)
        return rows

    def _journal(self, kind: str, *fields) -> None:
        """Log an update for the compaction in flight, if any (arrays copied: the caller's may change later)."""
        if self._compaction is not None:
            fields = tuple(np.array(f) if isinstance(f, np.ndarray) else f for f in fields)
            self._compaction.journal.append((kind, *fields))

    def _build(self, c: _Compaction) -> None:
        """Build ``c``'s graph from the old one's rows, replay the journal onto it and swap it in; an error
        leaves the index as it was (kept in ``c.error``; warned about when the build ran in the background).
        ``c.done`` is set last, once the old graph is freed."""
        graph = None
        try:
            graph = self._new_graph(c.store.capacity)
            for start in range(0, len(c.live), _COMPACT_ROWS):
                part = c.live[start : start + _COMPACT_ROWS]
                with self.lock.read():  # updates may grow (reallocate) the old graph or delete rows between reads
                    rows = self._read_rows(c, part)
                graph.add(rows, np.arange(start, start + len(part), dtype=np.int64), num_threads=self.num_threads)
                del rows
            # catch up with the journal while updates go on, then replay the rest with them held off and swap
            for attempt in range(_CATCH_UP_ROUNDS + 1):
                with self._updating:
                    ops, c.journal = c.journal, []
                    if attempt == _CATCH_UP_ROUNDS or sum(map(_op_rows, ops)) <= _REPLAY_HELD_ROWS:
                        for op in ops:
                            _replay(c.store, graph, op, self.num_threads)
                        changed = np.arange(max(self.store.n_slots, c.store.n_slots), dtype=np.int64)
                        with self.lock.write():
                            self.store.take(c.store)
                            self.graph.take(graph)  # `graph` now holds the old nodes, freed below
                            self._on_change(changed)
                        self._compaction = None
                        break
                for op in ops:  # the new store and graph are this thread's alone until the swap
                    _replay(c.store, graph, op, self.num_threads)
        except BaseException as exc:  # the old store and graph are untouched: drop the compaction, keep serving
            c.error = exc
            with self._updating:
                if self._compaction is c:
                    self._compaction = None
            if c.background:
                warnings.warn(
                    f"the index's compaction failed ({exc!r}); it keeps its deleted slots", RuntimeWarning, stacklevel=1
                )
        finally:
            c.journal, c.kept, c.store, graph = [], {}, None, None
            if c.error is None:
                # glibc keeps most of the freed graph as free heap (its upper-layer link lists are small
                # allocations spread over the arenas of the insertion threads): hand those pages back
                malloc_trim()
            c.done.set()

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


def _put(store: DocStore, graph: MeanGraph, mean, var, ids, texts, num_threads) -> np.ndarray:
    """Store documents in new slots and link their means into ``graph``; returns the slots."""
    slots = store.put(mean, var, ids, texts)
    _fit_graph(store, graph)
    graph.add(mean, slots, num_threads=num_threads)
    return slots


def _drop(store: DocStore, graph: MeanGraph, slots: np.ndarray) -> None:
    """Free live ``slots`` in the store and mark their graph nodes deleted."""
    graph.mark_deleted(slots)
    store.drop(slots)


def _op_rows(op: Tuple) -> int:
    """Documents a journaled update touches."""
    return 0 if op[0] == "reserve" else len(op[1] if op[0] == "drop" else op[3])


def _replay(store: DocStore, graph: MeanGraph, op: Tuple, num_threads) -> None:
    """Apply one journaled update to a compaction's store and graph."""
    if op[0] == "drop":
        _drop(store, graph, store.slots_of(op[1]))
    elif op[0] == "put":
        _put(store, graph, *op[1:], num_threads)
    else:
        store.reserve(op[1])
        _fit_graph(store, graph)


def _fit_graph(store: DocStore, graph: MeanGraph) -> None:
    """Room in ``graph`` for every slot ``store`` has room for."""
    if store.capacity > graph.max_elements:
        graph.resize(store.capacity)
