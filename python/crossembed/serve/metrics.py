"""Prometheus metrics of one app (its own ``CollectorRegistry``) and the ASGI middleware that records them."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, FrozenSet, Iterator, Tuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily

__all__ = ["MetricsMiddleware", "ServeMetrics"]

logger = logging.getLogger("crossembed.serve")

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class _IndexCollector:
    """What the index holds, from one ``stats()`` call per collection (:meth:`UECIndex.stats`)."""

    def __init__(self, stats: Callable[[], Dict[str, Any]]):
        self.stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.stats()
        yield GaugeMetricFamily("crossembed_documents", "documents in the index", value=s["live"])
        yield GaugeMetricFamily(
            "crossembed_index_deleted_slots",
            "removed or replaced documents whose graph node is held until the index compacts",
            value=s["deleted"],
        )
        yield GaugeMetricFamily(
            "crossembed_index_compacting", "1 while a compaction builds the index's new graph", value=s["compacting"]
        )
        part = GaugeMetricFamily("crossembed_index_bytes", "bytes the index holds, by part", labels=("part",))
        for name, nbytes in s["bytes"].items():
            part.add_metric((name,), nbytes)
        yield part


class ServeMetrics:
    """Requests by route and status, latency by route, queries per index call, texts per encoder call,
    what the index holds (documents, deleted slots, bytes by part), queue length and the process's
    resident memory and CPU time (``process_*``).

    ``index_stats`` (a :meth:`UECIndex.stats`) and ``queued`` are read when the metrics are collected.
    """

    def __init__(self, index_stats: Callable[[], Dict[str, Any]], queued: Callable[[], float]):
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.registry.register(_IndexCollector(index_stats))
        self.requests = Counter(
            "crossembed_requests", "HTTP requests by route and status", ("route", "status"), registry=self.registry
        )
        self.latency = Histogram(
            "crossembed_request_seconds",
            "HTTP request latency by route",
            ("route",),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch = Histogram(
            "crossembed_search_batch_queries",
            "queries per index search call (micro-batching)",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.encode_batch = Histogram(
            "crossembed_encode_batch_texts",
            "texts per encoder call (requests' texts encoded together)",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        Gauge(
            "crossembed_search_queued", "search requests waiting for an index call", registry=self.registry
        ).set_function(queued)
        self._children: Dict[Tuple[str, int], Tuple[object, object]] = {}

    def observe(self, route: str, status: int, seconds: float) -> None:
        child = self._children.get((route, status))
        if child is None:
            child = (self.requests.labels(route, str(status)), self.latency.labels(route))
            self._children[(route, status)] = child
        child[0].inc()
        child[1].observe(seconds)

    def observe_batch(self, n_queries: int) -> None:
        self.batch.observe(n_queries)

    def observe_encode_batch(self, n_texts: int) -> None:
        self.encode_batch.observe(n_texts)

    def render(self) -> bytes:
        """The Prometheus text exposition (reads the index: call it off the event loop)."""
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Pure ASGI middleware: counts and times every HTTP request, one DEBUG log line each.

    Paths that are not one of ``routes`` are counted as ``other`` (unbounded label values would grow the registry).
    """

    def __init__(self, app, *, metrics: ServeMetrics, routes: FrozenSet[str]):
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - start
            path = scope["path"]
            self.metrics.observe(path if path in self.routes else "other", status, seconds)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s %s %d %.2f ms", scope["method"], path, status, 1e3 * seconds)
