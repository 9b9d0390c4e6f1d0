"""``crossembed bench serve``: the HTTP service under load, next to in-process search of the same queries.

Starts ``crossembed serve`` as a subprocess on loopback with a synthetic
index (clustered unit means with small variances,
:func:`synthetic_chunks`), checks that its
answers equal in-process :meth:`UECIndex.search` on the same queries, then
drives it from this process with :func:`crossembed.cli.serve_load.run_load`
(single-query vector requests, ``concurrency`` keep-alive connections, a
fixed duration): requests/s, p50/p99 latency and the mean queries per index
call (from the server's ``/metrics``), without and with a concurrent writer
(one-document adds and removes at a fixed rate). The in-process figures are
the same queries searched in one batch and one at a time. The server is
stopped with SIGTERM and must exit 0.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._validation import check_int
from crossembed.cli.serve_load import Connection, Writer, http_request, run_load
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex
from crossembed.uec.index_config import IndexConfig

__all__ = ["SIZES", "benchmark_serve", "render", "synthetic_chunks", "synthetic_gaussians"]

#: Problem sizes: ``small`` runs in seconds (CI's smoke), ``full`` is the issue's 100k x 384.
SIZES = {
    "small": {"n_docs": 4000, "dim": 64, "n_queries": 200, "duration_s": 1.0, "warmup_s": 0.3},
    "full": {"n_docs": 100_000, "dim": 384, "n_queries": 2000, "duration_s": 10.0, "warmup_s": 2.0},
}
_HOST = "127.0.0.1"


# --------------------------------------------------------------------------- synthetic documents
def synthetic_chunks(
    n: int,
    dim: int,
    *,
    n_clusters: int = 1000,
    intrinsic: int = 48,
    var_scale: float = 0.016,
    seed: int = 0,
    chunk: int = 100_000,
) -> Iterator[GaussianEmbedding]:
    """:func:`synthetic_gaussians` in chunks of ``chunk`` rows (for sizes that must not exist twice in memory)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_clusters, dim))
    intrinsic = min(intrinsic, dim)
    basis = np.linalg.qr(rng.normal(size=(dim, intrinsic)))[0].T  # (intrinsic, dim)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = centers[rng.integers(0, n_clusters, m)] / math.sqrt(dim) * 2.0
        x += rng.normal(size=(m, intrinsic)) @ basis * 0.25 + rng.normal(size=(m, dim)) * (0.02 / math.sqrt(dim))
        means = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        yield GaussianEmbedding(means, (var_scale * rng.uniform(0.5, 1.5, size=(m, dim))).astype(np.float32))


def synthetic_gaussians(n: int, dim: int, **kwargs) -> GaussianEmbedding:
    """Clustered unit-norm means (a 48-dimensional spread around 1,000 random centres) with
    per-dimension variances ``var_scale * U(0.5, 1.5)`` - the size of real kron variances."""
    parts = list(synthetic_chunks(n, dim, **kwargs))
    return GaussianEmbedding(np.concatenate([p.mean for p in parts]), np.concatenate([p.var for p in parts]))


def _data(n_docs: int, dim: int, n_queries: int, seed: int) -> Tuple[GaussianEmbedding, GaussianEmbedding]:
    parts = list(synthetic_chunks(n_docs + 2 * n_queries, dim, seed=seed, chunk=25_000))
    g = GaussianEmbedding(np.concatenate([p.mean for p in parts]), np.concatenate([p.var for p in parts]))
    return g[:n_docs], g[n_docs:]  # documents; queries (first half) and documents for the writer (second)


def _index(docs: GaussianEmbedding, path: Path, config: IndexConfig) -> Tuple[UECIndex, float]:
    """The index of ``docs`` saved at ``path`` (loaded from there when it holds the same documents)."""
    if path.is_file():
        index = UECIndex.load(path)
        same = len(index) == len(docs) and index.dim == docs.dim
        if same and np.array_equal(index.get_docs([0, len(docs) - 1]).mean, docs.mean[[0, -1]]):
            return index, 0.0
    start = time.perf_counter()
    index = UECIndex(docs, config=config)
    build_s = time.perf_counter() - start
    index.save(path)
    return index, build_s


def _in_process(index: UECIndex, queries: GaussianEmbedding, k: int, settings: Dict[str, Any]) -> Dict[str, Any]:
    """One batch and one-at-a-time search of ``queries``, and recall@k against exact search."""
    start = time.perf_counter()
    scores, ids = index.search(queries, k, **settings)
    batch_s = time.perf_counter() - start
    n_single = min(len(queries), 300)
    start = time.perf_counter()
    for i in range(n_single):
        index.search(queries[i : i + 1], k, **settings)
    single_s = time.perf_counter() - start
    exact = index.search(queries, k, exact=True)[1]
    recall = float(np.mean([len(set(a) & set(e)) / k for a, e in zip(ids, exact)]))
    return {"batch_qps": len(queries) / batch_s, "single_qps": n_single / single_s, "recall": recall, "ids": ids}


def _start_server(path: Path, port: int, threads: Optional[int], extra: Sequence[str] = ()) -> subprocess.Popen:
    """``crossembed serve path`` on ``port`` (``extra``: more of its options)."""
    cmd = [sys.executable, "-m", "crossembed", "serve", str(path), "--port", str(port), "--log-level", "warning"]
    if threads:
        cmd += ["--num-threads", str(threads)]
    cmd += list(extra)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def _wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"crossembed serve exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            conn = await Connection.open(_HOST, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        status, _ = await conn.send(http_request("/healthz", method="GET"))
        await conn.close()
        if status == 200:
            return
    raise RuntimeError(f"crossembed serve did not answer /healthz within {timeout_s:.0f} s")


def _stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


async def _batch_stats(port: int) -> Tuple[float, float]:
    """(sum, count) of the server's queries-per-index-call histogram (a fresh connection: an idle
    one is closed by the server's keep-alive timeout)."""
    conn = await Connection.open(_HOST, port)
    _, body = await conn.send(http_request("/metrics", method="GET"))
    await conn.close()
    text = body.decode()
    total = re.search(r"^crossembed_search_batch_queries_sum ([0-9.e+]+)$", text, re.M)
    count = re.search(r"^crossembed_search_batch_queries_count ([0-9.e+]+)$", text, re.M)
    return float(total.group(1)), float(count.group(1))


async def _check_answers(port: int, requests: Sequence[bytes], expected: np.ndarray) -> int:
    """Requests whose served ids differ from in-process search (sent one at a time)."""
    import json

    conn = await Connection.open(_HOST, port)
    bad = 0
    for request, ids in zip(requests, expected):
        status, body = await conn.send(request)
        bad += status != 200 or json.loads(body)["ids"][0] != ids.tolist()
    await conn.close()
    return bad


def _requests(queries: GaussianEmbedding, k: int, settings: Dict[str, Any]) -> List[bytes]:
    extra = {key: v for key, v in settings.items() if v is not None}
    return [
        http_request("/search", {"mean": [m.tolist()], "var": [v.tolist()], "k": k, **extra})
        for m, v in zip(queries.mean, queries.var)
    ]


def _writer(extra_docs: GaussianEmbedding, first_id: int, rate: float) -> Writer:
    adds = [
        (first_id + i, http_request("/add", {"mean": [m.tolist()], "var": [v.tolist()], "ids": [first_id + i]}))
        for i, (m, v) in enumerate(zip(extra_docs.mean, extra_docs.var))
    ]
    return Writer(adds, rate=rate, window=max(1, len(adds) // 2))


async def _load_rows(port, requests, writer_docs, plan: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for write_rate in plan["write_rates"]:
        for concurrency in plan["concurrencies"]:
            writer = _writer(writer_docs, plan["first_id"], write_rate) if write_rate else None
            s0, c0 = await _batch_stats(port)
            result = await run_load(
                _HOST,
                port,
                requests,
                concurrency=concurrency,
                duration_s=plan["duration_s"],
                warmup_s=plan["warmup_s"],
                writer=writer,
            )
            s1, c1 = await _batch_stats(port)
            row = {**result.summary(), "write_rate": write_rate, "mean_batch": (s1 - s0) / max(c1 - c0, 1)}
            if writer is not None:
                lat = np.asarray(writer.latencies) * 1e3
                row.update(
                    write_qps=len(lat) / (plan["warmup_s"] + plan["duration_s"]),
                    write_errors=writer.errors,
                    write_p99_ms=float(np.percentile(lat, 99)) if len(lat) else float("nan"),
                )
            rows.append(row)
    return rows


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((_HOST, 0))
        return s.getsockname()[1]


def _serve_and_load(path: Path, queries, writer_docs, expected, plan: Dict[str, Any]) -> Dict[str, Any]:
    port = _free_port()
    requests = _requests(queries, plan["k"], plan["settings"])
    proc = _start_server(path, port, plan["server_threads"])
    try:
        asyncio.run(_wait_ready(port, proc))
        mismatches = asyncio.run(_check_answers(port, requests, expected))
        rows = asyncio.run(_load_rows(port, requests, writer_docs, plan))
    finally:
        code = _stop_server(proc)
    return {"served_mismatches": mismatches, "rows": rows, "server_exit_code": code}


def benchmark_serve(
    n_docs: int,
    dim: int,
    *,
    n_queries: int = 1000,
    k: int = 10,
    rerank: Optional[int] = 20,
    ef: Optional[int] = None,
    concurrencies: Sequence[int] = (1, 8, 64),
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
    write_rate: float = 20.0,
    M: int = 16,
    ef_construction: int = 100,
    index_path: Optional[str] = None,
    server_threads: Optional[int] = None,
    seed: int = 0,
) -> Dict[str, Any]:
    """Served vs in-process search of ``n_queries`` single-query requests on an ``n_docs x dim`` index.

    ``index_path``: where the index is saved, and reused when it already holds
    these documents (a 100k x 384 build takes minutes). ``write_rate``: write
    requests per second of the concurrent writer (0: no writer runs).
    """
    for name, value in (("n_docs", n_docs), ("dim", dim), ("n_queries", n_queries), ("k", k)):
        check_int(value, name, low=1)
    docs, rest = _data(n_docs, dim, n_queries, seed)
    queries, writer_docs = rest[:n_queries], rest[n_queries:]
    config = IndexConfig(M=M, ef_construction=ef_construction, rerank=rerank or 100)
    settings = {"rerank": rerank, "ef": ef}
    plan = {
        "k": k,
        "settings": settings,
        "concurrencies": list(concurrencies),
        "write_rates": [0.0] + ([write_rate] if write_rate > 0 else []),
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "first_id": n_docs + 1_000_000,
        "server_threads": server_threads,
    }
    with tempfile.TemporaryDirectory(prefix="crossembed-bench-") as tmp:
        path = Path(index_path) if index_path is not None else Path(tmp) / "index.uec"
        index, build_s = _index(docs, path, config)
        local = _in_process(index, queries, k, {key: v for key, v in settings.items() if v is not None})
        del index  # the server holds its own copy
        served = _serve_and_load(path, queries, writer_docs, local.pop("ids"), plan)
    config = {"n_docs": n_docs, "dim": dim, "n_queries": n_queries, "k": k, "rerank": rerank, "ef": ef}
    config.update(M=M, ef_construction=ef_construction, duration_s=duration_s, build_seconds=build_s)
    return {"config": config, "in_process": local, **served, "cpus": os.cpu_count()}


def render(result: Dict[str, Any]) -> str:
    """A markdown table of the served rows and the in-process figures."""
    c, local = result["config"], result["in_process"]
    lines = [
        f"{c['n_docs']:,} x {c['dim']} documents (M={c['M']}, ef_construction={c['ef_construction']}), "
        f"k={c['k']}, rerank={c['rerank']}, ef={c['ef'] or 'default'}, {result['cpus']} CPUs; "
        f"recall@{c['k']} vs exact {local['recall']:.4f}",
        "",
        "| path | concurrency | writes/s | queries/s | p50 ms | p99 ms | queries per index call | errors |",
        "|---|---|---|---|---|---|---|---|",
        f"| in-process, one batch | - | - | {local['batch_qps']:,.0f} | - | - | {c['n_queries']} | - |",
        f"| in-process, one query per call | 1 | - | {local['single_qps']:,.0f} | - | - | 1 | - |",
    ]
    for r in result["rows"]:
        writes = f"{r['write_qps']:.0f} (p99 {r['write_p99_ms']:.1f} ms)" if r["write_rate"] else "0"
        errors = r["errors"] + r.get("write_errors", 0)
        lines.append(
            f"| HTTP | {r['concurrency']} | {writes} | {r['qps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['mean_batch']:.1f} | {errors} |"
        )
    lines.append("")
    lines.append(
        f"Served answers equal to in-process search: {c['n_queries'] - result['served_mismatches']}/{c['n_queries']}; "
        f"server exit status after SIGTERM: {result['server_exit_code']}."
    )
    return "\n".join(lines)
