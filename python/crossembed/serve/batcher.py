"""Micro-batching: concurrent searches with the same settings share one index call.

Requests queue while an index call runs on the batcher's thread; the next call
takes the queued requests whose :class:`SearchKey` matches the oldest one's,
up to ``max_batch`` queries, with ``k`` the largest they ask for, and each
request gets its rows cut to its own ``k``. That equals the requests' own
calls because a search's rows do not depend on each other and a top-``k`` is
a prefix of a top-``k'`` for ``k' > k`` when the candidates are the same:
the key fixes the candidate count (``rerank``) and the graph breadth
(``ef``) that :meth:`UECIndex.search` would derive from each request, and
the allowed ids of a ``filter``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["QueueThread", "QueuedSearch", "SearchBatcher", "SearchKey"]

Result = Tuple[np.ndarray, np.ndarray]

logger = logging.getLogger("crossembed.serve")


@dataclass(frozen=True)
class SearchKey:
    """The settings that must agree for searches to share a call (``rerank``/``ef`` 0 for exact;
    ``filter`` the sorted distinct allowed ids as int64 bytes, or None)."""

    exact: bool
    rerank: int
    ef: int
    filter: Optional[bytes] = None


@dataclass
class QueuedSearch:
    """One search request waiting for an index call: its queries, ``k``, key, and the future to settle
    on ``loop`` (created there by whoever queues it)."""

    mean: np.ndarray
    var: np.ndarray
    k: int
    key: SearchKey
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class QueueThread:
    """A queue of requests served one group at a time by a thread of its own (base of the batchers).

    The thread starts with the first request and runs ``thread_init()``
    first; :meth:`_take` (called holding the lock) picks the next group and
    :meth:`_call` runs it (without the lock) and settles its futures. Each
    queued item has ``future`` and ``loop``; a fault of the thread itself
    fails the waiting requests rather than hanging them.
    """

    _name = "crossembed-queue"

    def __init__(self, *, thread_init: Optional[Callable[[], None]] = None):
        self._thread_init = thread_init
        self._pending: Deque = deque()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closing = False

    @property
    def queued(self) -> int:
        """Requests waiting for the thread."""
        return len(self._pending)

    def enqueue(self, items: Sequence) -> None:
        """Queue ``items`` (from any thread) at once: the thread sees all of them or none."""
        with self._cond:
            self._pending.extend(items)
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    async def close(self) -> None:
        """Finish the queued requests and stop the thread (a later request starts a new one)."""
        with self._cond:
            thread, self._closing = self._thread, True
            self._cond.notify()
        if thread is not None:
            await asyncio.to_thread(thread.join)

    @staticmethod
    def _settle_all(done) -> None:
        """Hand each ``(request, result, exc)`` its outcome on its event loop's thread: one wake-up per
        loop, not per request (a loop that has closed is gone with its clients)."""
        loops = {}
        for item in done:
            loops.setdefault(item[0].loop, []).append(item)
        for loop, items in loops.items():
            try:
                loop.call_soon_threadsafe(_set_all, items)
            except RuntimeError:
                pass

    @classmethod
    def _settle(cls, p, result=None, exc: Optional[BaseException] = None) -> None:
        cls._settle_all([(p, result, exc)])

    def _take(self) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    def _call(self, group: list) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _work(self) -> None:
        try:
            if self._thread_init is not None:
                self._thread_init()
            while True:
                with self._cond:
                    while not self._pending and not self._closing:
                        self._cond.wait()
                    if not self._pending:  # closing, nothing left
                        self._thread = None
                        return
                    group = self._take()
                self._call(group)
        except Exception as exc:
            logger.error("the %s thread failed", self._name, exc_info=exc)
            with self._cond:
                self._thread = None
                pending, self._pending = list(self._pending), deque()
            error = RuntimeError(f"the {self._name} thread failed ({type(exc).__name__}: {exc})")
            self._settle_all([(p, None, error) for p in pending])


class SearchBatcher(QueueThread):
    """Coalesces :meth:`search` calls into calls of ``run(mean, var, k, key) -> (scores, ids)``.

    The calls run one at a time on the batcher's own thread, which takes the
    next batch from the queue as soon as a call returns: it never waits for
    the event loop, which only queues requests and hands out results (so a
    busy loop does not leave the search thread idle, and updates waiting in
    the loop's default executor never hold searches up). The thread runs
    ``thread_init()`` first. ``wait_s`` (bounded) lets a call wait for more
    requests while fewer than ``max_batch`` queries are queued. A request of
    more than ``max_batch`` queries is a call of its own.
    ``on_batch(n_queries)`` is told the size of every call (from the thread).
    :meth:`enqueue` takes :class:`QueuedSearch` items from other threads
    (the text batcher hands over the searches of one encoded batch at once).
    """

    _name = "crossembed-search"

    def __init__(
        self,
        run: Callable[[np.ndarray, np.ndarray, int, SearchKey], Result],
        *,
        max_batch: int,
        wait_s: float = 0.0,
        on_batch: Optional[Callable[[int], None]] = None,
        thread_init: Optional[Callable[[], None]] = None,
    ):
        super().__init__(thread_init=thread_init)
        self._run = run
        self._max_batch = max_batch
        self._wait_s = wait_s
        self._on_batch = on_batch

    async def search(self, mean: np.ndarray, var: np.ndarray, k: int, key: SearchKey) -> Result:
        """Top-``k`` of the queries ``(mean, var)`` under ``key``, as the index would return them alone."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.enqueue([QueuedSearch(mean, var, k, key, future, loop)])
        return await future

    def _gather(self) -> None:
        """Wait (holding the condition, at most ``wait_s``) while fewer than ``max_batch`` queries are queued."""
        deadline = time.monotonic() + self._wait_s
        while sum(len(p.mean) for p in self._pending) < self._max_batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def _group(self, pending: Deque[QueuedSearch]) -> List[QueuedSearch]:
        """Take from ``pending`` its oldest request and the ones with its key, up to ``max_batch`` queries."""
        first = pending.popleft()
        group, rows, rest = [first], len(first.mean), deque()
        while pending:
            p = pending.popleft()
            if p.key == first.key and rows + len(p.mean) <= self._max_batch:
                group.append(p)
                rows += len(p.mean)
            else:
                rest.append(p)
        pending.extendleft(reversed(rest))
        return group

    def _take(self) -> List[QueuedSearch]:
        """The oldest request and the queued ones with its key, up to ``max_batch`` queries."""
        if self._wait_s > 0:
            self._gather()
        return self._group(self._pending)

    def search_now(self, items: Sequence[QueuedSearch]) -> None:
        """Run ``items`` on the calling thread, those with equal keys in shared calls as the queue would
        group them, and settle their futures; the queue and its thread are not involved."""
        pending = deque(items)
        while pending:
            self._call(self._group(pending))

    def _call(self, group: List[QueuedSearch]) -> None:
        mean = group[0].mean if len(group) == 1 else np.concatenate([p.mean for p in group])
        var = group[0].var if len(group) == 1 else np.concatenate([p.var for p in group])
        k = max(p.k for p in group)
        if self._on_batch is not None:
            self._on_batch(len(mean))
        try:
            scores, ids = self._run(mean, var, k, group[0].key)
        except Exception as exc:
            if len(group) == 1:
                self._settle(group[0], exc=exc)
            else:
                for p in group:  # one request's fault must not fail the others: retry each alone
                    self._call([p])
            return
        done, start = [], 0
        for p in group:
            stop = start + len(p.mean)
            done.append((p, (scores[start:stop, : p.k], ids[start:stop, : p.k]), None))
            start = stop
        self._settle_all(done)


def _set_all(done) -> None:
    for p, result, exc in done:
        if p.future.done():  # the client went away and its request was cancelled
            continue
        if exc is not None:
            p.future.set_exception(exc)
        else:
            p.future.set_result(result)
