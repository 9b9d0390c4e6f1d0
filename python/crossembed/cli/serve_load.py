"""A bounded loopback load generator: keep-alive HTTP/1.1 over asyncio streams, a fixed number of connections.

Kept minimal on purpose (pre-encoded requests, responses read by their
``Content-Length``, bodies only parsed where a check needs them), so the
client's own CPU time stays small next to the server's on a shared machine.
Each of ``concurrency`` connections sends one request at a time for
``duration_s`` seconds after ``warmup_s`` seconds of warm-up; a concurrent
writer may add and remove documents at a fixed rate over its own connection.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Connection", "LoadResult", "Writer", "http_request", "run_load"]


def http_request(path: str, payload: Optional[Dict[str, Any]] = None, *, method: str = "POST") -> bytes:
    """An HTTP/1.1 request as bytes (JSON body)."""
    body = b"" if payload is None else json.dumps(payload).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class Connection:
    """One keep-alive connection; :meth:`send` returns ``(status, body)``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
        return cls(reader, writer)

    async def send(self, request: bytes) -> Tuple[int, bytes]:
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"content-length:")
        if at < 0:
            raise ConnectionError("response without Content-Length")
        length = int(lower[at + 15 : lower.find(b"\r\n", at)])
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass


@dataclass
class Writer:
    """Adds one document per step (``add_requests`` in turn) and, past ``window`` added, removes the oldest.

    ``rate`` is write requests (adds and removes together) per second.
    """

    add_requests: Sequence[Tuple[int, bytes]]  # (id, request)
    rate: float
    window: int = 100
    latencies: List[float] = field(default_factory=list)
    errors: int = 0

    async def run(self, conn: Connection, stop: asyncio.Event) -> None:
        added: List[int] = []
        steps = itertools.cycle(self.add_requests)
        period, next_at = 1.0 / self.rate, time.perf_counter()
        while not stop.is_set():
            if len(added) >= self.window:
                doc_id = added.pop(0)
                request = http_request("/remove", {"ids": [doc_id]})
            else:
                doc_id, request = next(steps)
                if doc_id in added:
                    continue
                added.append(doc_id)
            t0 = time.perf_counter()
            status, _ = await conn.send(request)
            self.latencies.append(time.perf_counter() - t0)
            self.errors += status != 200
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        if added:  # leave the index as it was found
            status, _ = await conn.send(http_request("/remove", {"ids": added}))
            self.errors += status != 200


@dataclass
class LoadResult:
    concurrency: int
    seconds: float
    requests: int
    errors: int
    latencies: np.ndarray  # seconds, of the requests completed in the measured window

    def summary(self) -> Dict[str, Any]:
        lat = self.latencies * 1e3
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "qps": self.requests / self.seconds,
            "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
            "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
        }


async def _worker(conn, requests, counter, window, out: List[float], errors: List[int]) -> None:
    start, end = window
    while True:
        t0 = time.perf_counter()
        if t0 >= end:
            return
        status, _ = await conn.send(requests[next(counter) % len(requests)])
        t1 = time.perf_counter()
        if t0 >= start and t1 <= end:
            out.append(t1 - t0)
            errors[0] += status != 200


async def run_load(
    host: str,
    port: int,
    requests: Sequence[bytes],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 1.0,
    writer: Optional[Writer] = None,
) -> LoadResult:
    """``concurrency`` connections sending ``requests`` in turn; requests started and finished
    inside the ``duration_s`` window after the warm-up count."""
    conns = [await Connection.open(host, port) for _ in range(concurrency)]
    writer_conn = await Connection.open(host, port) if writer is not None else None
    stop = asyncio.Event()
    latencies: List[float] = []
    errors = [0]
    counter = itertools.count()
    now = time.perf_counter()
    window = (now + warmup_s, now + warmup_s + duration_s)
    writing = asyncio.create_task(writer.run(writer_conn, stop)) if writer is not None else None
    try:
        await asyncio.gather(*(_worker(c, requests, counter, window, latencies, errors) for c in conns))
    finally:
        stop.set()
        if writing is not None:
            await writing
        for c in conns + ([writer_conn] if writer_conn is not None else []):
            await c.close()
    return LoadResult(concurrency, duration_s, len(latencies), errors[0], np.asarray(latencies))
