"""A readers-writer lock: many readers at once, or one writer, phase-fair.

A writer that is waiting keeps new readers out, so a steady stream of
searches cannot starve an update; readers already inside finish first. When
a writer releases, the readers that were waiting then go in before the next
writer, so a writer taking the lock again and again (an update applied in
chunks) cannot starve searches either: a reader waits for at most one hold.
Not reentrant: a thread holding either side must not acquire again.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    """Shared (:meth:`read`) and exclusive (:meth:`write`) sections, alternating fairly between the two."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._read_turn = 0  # readers still to let in ahead of writers (those waiting when a writer released)
        self.reads = 0  # shared sections entered so far (a writer reads it to tell whether anyone searches)

    @contextmanager
    def read(self) -> Iterator[None]:
        """Hold the lock shared for the ``with`` block."""
        with self._cond:
            self._readers_waiting += 1
            while self._writing or (self._writers_waiting and not self._read_turn):
                self._cond.wait()
            self._readers_waiting -= 1
            self._read_turn = max(0, self._read_turn - 1)
            self._readers += 1
            self.reads += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        """Hold the lock exclusively for the ``with`` block."""
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers or self._read_turn:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._read_turn = self._readers_waiting
                self._cond.notify_all()
