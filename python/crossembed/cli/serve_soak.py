"""``crossembed bench serve --soak MINUTES``: the real server under mixed load for minutes, sampled over time.

Starts ``crossembed serve`` on loopback with a synthetic vector index
(:func:`crossembed.cli.serve_bench.synthetic_chunks`), then for ``minutes``
keeps ``concurrency`` connections sending single-query searches (each as soon
as its last was answered, or paced to ``search_rate`` a second in all) and one
connection writing at ``write_rate`` requests/s, cycling add (a new
document), upsert (a document it added, new vectors) and remove (the oldest
it added once ``window`` are live), so the live set stays near its size while
the index churns and compacts. Every ``sample_s`` seconds it records the
server's resident memory (``/proc/PID/status``), its ``/metrics``
(documents, deleted slots), searches and writes done, p50/p99 search latency
and error counts (non-200 and 5xx) in that interval. The index has no
ensemble: requests are vectors, not texts.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from crossembed.cli import serve_bench
from crossembed.cli.serve_load import Connection, http_request
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index_config import IndexConfig

__all__ = ["plot_soak", "render_soak", "soak_serve"]


@dataclass
class _Tally:
    """What happened since the last sample."""

    latencies: List[float] = field(default_factory=list)
    errors: int = 0
    server_errors: int = 0
    writes: int = 0
    write_errors: int = 0

    def count(self, status: int) -> None:
        self.errors += status != 200
        self.server_errors += status >= 500


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _doc_body(doc: GaussianEmbedding, i: int, doc_id: int) -> Dict[str, Any]:
    return {"mean": [doc.mean[i].tolist()], "var": [doc.var[i].tolist()], "ids": [doc_id]}


async def _search(
    conn: Connection, requests: Sequence[bytes], tally: List[_Tally], stop: asyncio.Event, start: int, period: float
):
    """Searches in turn; ``period``: seconds from one request's start to the next's (0: at once)."""
    next_at = time.perf_counter()
    for i in itertools.count(start):
        if stop.is_set():
            return
        t0 = time.perf_counter()
        status, _ = await conn.send(requests[i % len(requests)])
        tally[0].latencies.append(time.perf_counter() - t0)
        tally[0].count(status)
        if period > 0:
            next_at = max(next_at + period, time.perf_counter() - period)  # no burst after a slow answer
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))


async def _write(conn, pool: GaussianEmbedding, first_id: int, window: int, rate: float, tally, stop) -> None:
    """add, upsert, remove in turn (a removal only once ``window`` added documents are live)."""
    live: List[int] = []
    rng = np.random.default_rng(0)
    next_id, period, next_at = first_id, 1.0 / rate, time.perf_counter()
    for step in itertools.count():
        if stop.is_set():
            break
        kind = step % 3
        if kind == 0 or not live:
            i = next_id % len(pool)
            request = http_request("/add", _doc_body(pool, i, next_id))
            live.append(next_id)
            next_id += 1
        elif kind == 1:
            doc_id = live[int(rng.integers(len(live)))]
            request = http_request("/upsert", _doc_body(pool, int(rng.integers(len(pool))), doc_id))
        elif len(live) >= window:
            request = http_request("/remove", {"ids": [live.pop(0)]})
        else:
            continue
        status, _ = await conn.send(request)
        tally[0].writes += 1
        tally[0].write_errors += status != 200
        tally[0].count(status)
        next_at += period
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    if live:  # leave the saved index's documents as they were
        status, _ = await conn.send(http_request("/remove", {"ids": live}))
        tally[0].count(status)


async def _metric(port: int, name: str) -> float:
    conn = await Connection.open(serve_bench._HOST, port)
    try:
        _, body = await conn.send(http_request("/metrics", method="GET"))
    finally:
        await conn.close()
    found = re.search(rf"^{name} (\S+)$", body.decode(), re.M)
    return float(found.group(1)) if found else float("nan")


async def _soak(port: int, pid: int, requests, pool, plan: Dict[str, Any]) -> List[Dict[str, Any]]:
    conns = [await Connection.open(serve_bench._HOST, port) for _ in range(plan["concurrency"] + 1)]
    stop, tally, samples = asyncio.Event(), [_Tally()], []
    period = plan["concurrency"] / plan["search_rate"] if plan["search_rate"] > 0 else 0.0
    tasks = [asyncio.create_task(_search(c, requests, tally, stop, 97 * i, period)) for i, c in enumerate(conns[1:])]
    if plan["write_rate"] > 0:
        writing = _write(conns[0], pool, plan["first_id"], plan["window"], plan["write_rate"], tally, stop)
        tasks.append(asyncio.create_task(writing))
    began = time.perf_counter()
    try:
        while time.perf_counter() - began < plan["seconds"]:
            await asyncio.sleep(min(plan["sample_s"], max(0.0, plan["seconds"] - (time.perf_counter() - began))))
            done, tally[0] = tally[0], _Tally()
            lat = np.asarray(done.latencies) * 1e3
            samples.append(
                {
                    "minute": (time.perf_counter() - began) / 60,
                    "rss_mib": _rss_mib(pid),
                    "documents": await _metric(port, "crossembed_documents"),
                    "deleted_slots": await _metric(port, "crossembed_index_deleted_slots"),
                    "searches": len(lat),
                    "writes": done.writes,
                    "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
                    "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
                    "errors": done.errors,
                    "server_errors": done.server_errors,
                    "write_errors": done.write_errors,
                }
            )
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for c in conns:
            await c.close()
    return samples


def soak_serve(
    minutes: float,
    *,
    n_docs: int = 100_000,
    dim: int = 128,
    concurrency: int = 8,
    search_rate: float = 0.0,
    write_rate: float = 20.0,
    window: int = 1000,
    sample_s: float = 30.0,
    M: int = 16,
    ef_construction: int = 100,
    rerank: int = 20,
    index_path: Optional[str] = None,
    server_threads: Optional[int] = None,
    seed: int = 0,
) -> Dict[str, Any]:
    """``minutes`` of mixed load on a served ``n_docs x dim`` index; returns the samples and the server's exit.

    ``search_rate``: searches per second over all connections (0: each connection sends its next as soon as
    the last was answered); ``write_rate``: write requests per second (add, upsert, remove in turn; 0: searches
    only); ``window``:
    documents the writer keeps added before it removes the oldest; ``sample_s``: seconds per sample.
    """
    if not minutes > 0:
        raise ValueError(f"minutes must be > 0, got {minutes}")
    if not sample_s > 0:
        raise ValueError(f"sample_s must be > 0, got {sample_s}")
    if not search_rate >= 0:
        raise ValueError(f"search_rate must be >= 0, got {search_rate}")
    docs, rest = serve_bench._data(n_docs, dim, 1000, seed)
    queries, pool = rest[:1000], rest[1000:]
    config = IndexConfig(M=M, ef_construction=ef_construction, rerank=rerank)
    requests = serve_bench._requests(queries, 10, {"rerank": rerank})
    plan = {"concurrency": concurrency, "write_rate": write_rate, "window": window, "sample_s": sample_s}
    plan["search_rate"] = search_rate
    plan.update(seconds=60.0 * minutes, first_id=n_docs + 1_000_000)
    with tempfile.TemporaryDirectory(prefix="crossembed-soak-") as tmp:
        path = Path(index_path) if index_path is not None else Path(tmp) / "index.uec"
        index, build_s = serve_bench._index(docs, path, config)
        del index
        port = serve_bench._free_port()
        proc = serve_bench._start_server(path, port, server_threads)
        try:
            asyncio.run(serve_bench._wait_ready(port, proc))
            samples = asyncio.run(_soak(port, proc.pid, requests, pool, plan))
        finally:
            code = serve_bench._stop_server(proc)
    settings = {"n_docs": n_docs, "dim": dim, "concurrency": concurrency, "write_rate": write_rate}
    settings["search_rate"] = search_rate
    settings.update(window=window, minutes=minutes, M=M, rerank=rerank, build_seconds=build_s)
    return {"config": settings, "samples": samples, "server_exit_code": code}


def _rate(search_rate: float) -> str:
    return f"paced to {search_rate:g} searches/s in all" if search_rate > 0 else "each sends on its last answer"


def _verdict(samples: List[Dict[str, Any]]) -> str:
    """RSS flatness (the last third of the run against the sample at its first third), p99 drift, 5xx."""
    if len(samples) < 3:
        return "too few samples to judge flatness"
    ref = samples[len(samples) // 3 - 1] if len(samples) >= 3 else samples[0]
    tail = samples[-max(1, len(samples) // 3) :]
    drift = max(abs(s["rss_mib"] / ref["rss_mib"] - 1) for s in tail)
    p99 = max(s["p99_ms"] for s in tail) / samples[0]["p99_ms"]
    errors = sum(s["server_errors"] for s in samples)
    return (
        f"RSS over the last third within {100 * drift:.1f} % of minute {ref['minute']:.1f}'s; "
        f"worst p99 of the last third {p99:.2f}x the first sample's; 5xx responses: {errors}"
    )


def render_soak(result: Dict[str, Any]) -> str:
    """A markdown table of the samples and the verdict line."""
    c = result["config"]
    lines = [
        f"{c['n_docs']:,} x {c['dim']} documents (M={c['M']}, rerank={c['rerank']}), {c['concurrency']} search "
        f"connections ({_rate(c['search_rate'])}), writer {c['write_rate']:g} requests/s "
        f"(add / upsert / remove, window {c['window']}), "
        f"{c['minutes']:g} minutes",
        "",
        "| minute | server RSS MiB | documents | deleted slots | searches | writes | p50 ms | p99 ms | errors | 5xx |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result["samples"]:
        lines.append(
            f"| {s['minute']:.1f} | {s['rss_mib']:.1f} | {s['documents']:.0f} | {s['deleted_slots']:.0f} "
            f"| {s['searches']} | {s['writes']} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['errors']} "
            f"| {s['server_errors']} |"
        )
    lines += ["", _verdict(result["samples"]) + f"; server exit status {result['server_exit_code']}."]
    return "\n".join(lines)


def plot_soak(result: Dict[str, Any], path: str) -> None:
    """RSS and p50/p99 over time as a PNG at ``path`` (needs matplotlib: the ``plot`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["samples"]
    minutes = [x["minute"] for x in s]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    top.plot(minutes, [x["rss_mib"] for x in s], marker=".")
    top.set_ylabel("server RSS, MiB")
    bottom.plot(minutes, [x["p50_ms"] for x in s], marker=".", label="p50")
    bottom.plot(minutes, [x["p99_ms"] for x in s], marker=".", label="p99")
    bottom.set_ylabel("search latency, ms")
    bottom.set_xlabel("minute")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
