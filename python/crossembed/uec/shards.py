"""The shards of a :class:`~crossembed.uec.sharded.ShardedUECIndex` on Dask workers, with bounded calls
and recovery of lost shards.

A shard is a whole :class:`~crossembed.uec.UECIndex` in one worker's memory,
pinned there (every task on it names that worker). :class:`ShardSet` runs
one task per shard and waits at most until a :class:`Deadline`; while it
waits it asks the scheduler for the live workers every quarter second, and a
shard whose worker left is lost. A shard with a file (its last save, or the
file it was loaded from) is reloaded from it on a surviving worker, the
updates sent to it since that file are replayed from the driver's per-shard
log, and the interrupted part of the call is retried once; a shard never
saved raises :class:`ShardLostError`. Each shard counts the updates applied to
it and every task names the count the driver expects, so a shard Dask rebuilt
from its original task (a worker restarted under the same address) is caught,
never served stale.

The task functions (``build_shard``, ``shard_search``, ...) run on the workers.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._validation import check_int
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex

__all__ = ["Deadline", "ShardError", "ShardLostError", "ShardSet", "ShardTimeoutError", "live_workers", "placement"]

_POLL_S = 0.25  # seconds between checks of the live workers while a call waits


class ShardError(RuntimeError):
    """Shards of a :class:`ShardedUECIndex` did not answer; ``shards`` (ints) and ``workers`` (addresses) name them."""

    def __init__(self, message: str, shards: Sequence[int], workers: Sequence[str]):
        super().__init__(message)
        self.shards = [int(s) for s in shards]
        self.workers = [str(w) for w in workers]


class ShardLostError(ShardError):
    """Shards lost with their worker and not recovered (never saved, unreadable file, no worker left)."""


class ShardTimeoutError(ShardError, TimeoutError):
    """Shards that did not answer within the call's ``timeout`` (their workers still listed as live)."""


class _StaleShardError(RuntimeError):
    """Raised on a worker by a shard whose update count is not the one the driver expects."""


def live_workers(client, timeout: float) -> List[str]:
    """The addresses of the workers the scheduler lists now, sorted (a fresh scheduler call, not a cache)."""
    return sorted(client.nthreads(callback_timeout=timeout))


def placement(client, n_shards: Optional[int], timeout: float) -> List[str]:
    """The worker of each shard at the start: shard ``s`` on the ``s % n``-th live worker (sorted addresses)."""
    if not hasattr(client, "submit") or not hasattr(client, "nthreads"):
        raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__}")
    workers = live_workers(client, timeout)
    if not workers:
        raise ValueError("the Dask cluster has no workers")
    n_shards = len(workers) if n_shards is None else check_int(n_shards, "n_shards", low=1)
    return [workers[s % len(workers)] for s in range(n_shards)]


# --------------------------------------------------------------------------- worker-side tasks
class _Shard:
    """A shard as its worker holds it: the index and the number of updates applied to it."""

    def __init__(self, index: UECIndex, version: int):
        self.index = index
        self.version = version


def apply_update(index: UECIndex, op: tuple) -> None:
    """One logged update: ``("add" | "upsert", mean, var, ids, texts)`` or ``("remove", ids)``."""
    if op[0] == "remove":
        index.remove(op[1])
    else:
        update = index.add if op[0] == "add" else index.upsert
        update(GaussianEmbedding(op[1], op[2]), ids=op[3], texts=op[4])


def build_shard(mean, var, ids, texts, options) -> _Shard:
    """A new shard of these documents (``options``: the :class:`UECIndex` keywords scoring, config, num_threads)."""
    return _Shard(UECIndex(GaussianEmbedding(mean, var), ids=ids, texts=texts, **options), 0)


def restore_shard(path: str, log: List[tuple], version: int, num_threads) -> _Shard:
    """The shard saved at ``path`` with the updates of ``log`` applied (its update count set to ``version``)."""
    index = UECIndex.load(path, mmap=True, num_threads=num_threads)
    for op in log:
        apply_update(index, op)
    return _Shard(index, version)


def _checked(shard: _Shard, version: int, *, at_least: bool) -> UECIndex:
    stale = shard.version < version if at_least else shard.version != version
    if stale:
        raise _StaleShardError(
            f"the shard holds {shard.version} updates, the driver expects {version}: its worker restarted "
            "or an update that timed out completed later"
        )
    return shard.index


def shard_info(shard: _Shard, version: int) -> Tuple[int, int]:
    """``(live documents, dimension)`` of a shard."""
    index = _checked(shard, version, at_least=True)
    return len(index), index.dim


def shard_stats(shard: _Shard, version: int) -> Dict[str, Any]:
    """What the shard holds (:meth:`UECIndex.stats`)."""
    return _checked(shard, version, at_least=True).stats()


def shard_contains(shard: _Shard, version: int, ids) -> np.ndarray:
    """Which of ``ids`` the shard holds."""
    return _checked(shard, version, at_least=False).contains(ids)


def shard_search(shard: _Shard, version: int, mean, var, k, allowed, options) -> Tuple[np.ndarray, np.ndarray]:
    """The shard's own top-``k`` (:meth:`UECIndex.search` with ``filter=allowed`` and ``options``)."""
    index = _checked(shard, version, at_least=True)
    return index.search(GaussianEmbedding(mean, var), k, filter=allowed, **options)


def shard_update(shard: _Shard, version: int, op: tuple) -> int:
    """Apply one update (see :func:`apply_update`); returns the shard's live documents."""
    apply_update(_checked(shard, version, at_least=False), op)
    shard.version += 1
    return len(shard.index)


def shard_save(shard: _Shard, version: int, path: str) -> str:
    """Save the shard to ``path`` (atomic); returns the path."""
    return str(_checked(shard, version, at_least=False).save(path))


# --------------------------------------------------------------------------- driver
class Deadline:
    """The end of a call that may take ``seconds``."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


class ShardSet:
    """Shard futures on their workers, run with bounded waits and recovered from files when lost.

    Parameters
    ----------
    client : dask.distributed.Client
        The cluster.
    shards : list of Future
        Shard ``s``'s future (a task that builds or loads it on ``workers[s]``).
    workers : list of str
        The worker address holding each shard.
    sources : list of str or None
        Each shard's file (its recovery point), None for a shard never saved.
    num_threads : int, optional
        Threads of a reloaded shard's searches (default: all cores of its worker).

    Threads: any number may :meth:`run`; updates, saves and recoveries hold :meth:`updating`, one at a time.
    """

    def __init__(self, client, shards: List, workers: List[str], sources: List[Optional[str]], num_threads=None):
        self._client = client
        self._shards, self._workers, self._versions = list(shards), list(workers), [0] * len(shards)
        self._sources: List[Optional[str]] = list(sources)
        self._logs: List[List[tuple]] = [[] for _ in shards]
        self._num_threads = num_threads
        self._state_lock = threading.Lock()  # the shard table above: held for reads and swaps only
        self._write_lock = threading.RLock()  # updates, saves and recoveries, one at a time

    def __len__(self) -> int:
        return len(self._shards)

    def workers(self) -> List[str]:
        """The address of the worker holding each shard now (changes when a shard is recovered)."""
        with self._state_lock:
            return list(self._workers)

    def applied(self, s: int, op: tuple) -> None:
        """Count an update ``op`` shard ``s`` applied, and log it when the shard has a file."""
        with self._state_lock:
            self._versions[s] += 1
            if self._sources[s] is not None:
                self._logs[s].append(op)

    def saved(self, s: int, path: str) -> None:
        """Shard ``s`` was written to ``path``: its new recovery point, with an empty log."""
        with self._state_lock:
            self._sources[s], self._logs[s] = path, []

    @contextmanager
    def updating(self, deadline: Deadline) -> Iterator[None]:
        if not self._write_lock.acquire(timeout=max(deadline.left(), 0)):
            raise ShardTimeoutError(
                f"another update, save or recovery held the index past the timeout of {deadline.seconds:g} s", [], []
            )
        try:
            yield
        finally:
            self._write_lock.release()

    def run(self, fn, jobs: Dict[int, tuple], deadline: Deadline, on_done: Optional[Callable] = None) -> Dict:
        """``fn(shard, version, *jobs[s])`` on each shard ``s`` of ``jobs``; lost shards are recovered and
        their part retried once. ``on_done(s, result)`` runs as each shard's part succeeds."""
        results: Dict[int, Any] = {}
        for attempt in range(2):
            with self._state_lock:
                table = {s: (self._shards[s], self._workers[s], self._versions[s]) for s in jobs}
            futures = {
                s: self._client.submit(fn, f, v, *jobs[s], workers=[w], pure=False) for s, (f, w, v) in table.items()
            }
            done, lost = self._collect(futures, {s: table[s][1] for s in table}, deadline, on_done)
            results.update(done)
            if not lost:
                return results
            workers = [table[s][1] for s in lost]
            if attempt:
                raise ShardLostError(f"shards {lost} were lost again (workers {workers}) after recovery", lost, workers)
            self._recover({s: table[s][0] for s in lost}, workers, deadline)
            jobs = {s: jobs[s] for s in lost}
        raise AssertionError("unreachable")

    def _collect(self, futures: Dict[int, Any], workers: Dict[int, str], deadline: Deadline, on_done) -> Tuple:
        """Results of per-shard futures and the shards found lost; waits for every part, then raises the
        first task error, or :class:`ShardTimeoutError` past the deadline."""
        pending, done, lost, error = dict(futures), {}, [], None
        finished = threading.Condition()  # notified by Dask as each future finishes (no global client state)

        def notify(_future) -> None:
            with finished:
                finished.notify_all()

        for f in futures.values():
            f.add_done_callback(notify)
        while pending:
            left = deadline.left()
            if left <= 0:
                for f in pending.values():  # forget the parts still queued (no blocking call to the scheduler)
                    f.release()
                shards = sorted(pending)
                where = [workers[s] for s in shards]
                raise ShardTimeoutError(
                    f"shards {shards} (workers {where}) did not answer within the timeout of {deadline.seconds:g} s",
                    shards,
                    where,
                )
            with finished:  # every part back, or a poll interval: then collect and ask which workers are live
                finished.wait_for(lambda: all(f.done() for f in pending.values()), min(_POLL_S, left))
            for s in [s for s, f in pending.items() if f.done()]:
                try:
                    done[s] = pending[s].result(timeout=max(deadline.left(), 1e-3))
                except _StaleShardError:
                    lost.append(s)
                except TimeoutError:
                    if pending[s].status != "error":
                        continue  # the answer's worker left while sending it: checked below or timed out
                    error = error or pending[s].exception()
                except Exception as exc:  # the task's own error, raised once every part is back
                    error = error or exc
                else:
                    if on_done is not None:
                        on_done(s, done[s])
                del pending[s]
            if pending:
                live = set(live_workers(self._client, max(deadline.left(), _POLL_S)))
                for s in [s for s in pending if workers[s] not in live]:
                    lost.append(s)
                    del pending[s]
        if error is not None:
            raise error
        return done, sorted(lost)

    def _recover(self, lost: Dict[int, Any], workers: List[str], deadline: Deadline) -> None:
        """Reload the ``lost`` shards (shard -> the future found lost) from their files on surviving
        workers and replay their logs; shards another thread already recovered are left as they are."""
        if not self._write_lock.acquire(timeout=max(deadline.left(), 0)):
            shards = sorted(lost)
            raise ShardTimeoutError(f"shards {shards} were not recovered within the timeout", shards, workers)
        try:
            with self._state_lock:
                todo = [s for s in lost if self._shards[s] is lost[s]]
            unsaved = [s for s in todo if self._sources[s] is None]
            if unsaved:
                where = [self._workers[s] for s in unsaved]
                raise ShardLostError(
                    f"shards {unsaved} were lost with their workers {where} and cannot be recovered: they were "
                    "never saved (call save(pattern) with a path every worker can read to make shards recoverable)",
                    unsaved,
                    where,
                )
            if todo:
                self._reload(todo, deadline)
        finally:
            self._write_lock.release()

    def _reload(self, shards: List[int], deadline: Deadline) -> None:
        """Load each shard's file on a live worker, replay its log, and swap it in once every one answers."""
        live = live_workers(self._client, max(deadline.left(), _POLL_S))
        if not live:
            where = [self._workers[s] for s in shards]
            raise ShardLostError(f"shards {shards} were lost and no worker is left to reload them", shards, where)
        held = {w: sum(x == w for x in self._workers) for w in live}
        target = {}
        for s in shards:  # the surviving worker holding the fewest shards, then the lowest address
            target[s] = min(live, key=lambda w: (held[w], w))
            held[target[s]] += 1
        new = {
            s: self._client.submit(
                restore_shard,
                self._sources[s],
                list(self._logs[s]),
                self._versions[s],
                self._num_threads,
                workers=[target[s]],
                pure=False,
            )
            for s in shards
        }
        checks = {
            s: self._client.submit(shard_info, new[s], self._versions[s], workers=[target[s]], pure=False) for s in new
        }
        try:
            _, lost = self._collect(checks, target, deadline, None)
        except ShardError:
            raise
        except (OSError, ValueError) as exc:
            where = [target[s] for s in shards]
            raise ShardLostError(
                f"shards {shards} could not be reloaded from {[self._sources[s] for s in shards]} on workers "
                f"{where} ({type(exc).__name__}: {exc}); shard files must be on storage every worker can read",
                shards,
                where,
            ) from exc
        if lost:
            raise ShardLostError(f"shards {lost} were lost again while being reloaded", lost, [target[s] for s in lost])
        with self._state_lock:
            for s in shards:
                self._shards[s], self._workers[s] = new[s], target[s]
