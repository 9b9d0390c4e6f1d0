"""``crossembed bench serve --text``: one-text search requests against a WordNet-gloss index, next to in-process.

The index holds WordNet noun glosses (Debian ``wordnet-base``), built by
``crossembed index build`` with its defaults (the minilm + minilm-l3 + e5
ensemble) unless ``index_path`` already holds it; the queries are WordNet
example sentences. In process, on the loaded index: the encoders alone
(:meth:`UECEnsemble.encode` of all queries), all queries in one
:meth:`UECIndex.search` call, and one query a call. Served
(``crossembed serve`` on loopback): single-text ``/search`` requests at each
concurrency, with the texts per encoder call and queries per index call from
``/metrics``. Every figure is measured ``runs`` times (mean and std), the
rows of a run side by side, so a shared machine's load hits them alike.

Same answers: each query's ids and scores from the server under concurrent
load (its text encoded in a batch with others) against the same query
searched alone in process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from crossembed._validation import check_int
from crossembed.cli.serve_bench import _HOST, _free_port, _start_server, _stop_server, _wait_ready
from crossembed.cli.serve_load import Connection, http_request, run_load
from crossembed.uec.index import UECIndex

__all__ = ["benchmark_serve_text", "render_text", "wordnet_texts"]


def wordnet_texts(n_docs: int, n_queries: int) -> Tuple[List[str], List[str]]:
    """``n_docs`` noun glosses (synsets with example sentences first) and ``n_queries`` first examples."""
    from crossembed.data import read_synsets

    synsets = read_synsets("noun")
    with_examples = [s for s in synsets if s.examples]
    if n_queries > len(with_examples):
        raise ValueError(f"n_queries: WordNet has {len(with_examples)} noun synsets with examples, got {n_queries}")
    ordered = with_examples + [s for s in synsets if not s.examples]
    if n_docs > len(ordered):
        raise ValueError(f"n_docs: WordNet has {len(ordered)} noun synsets, got {n_docs}")
    one_line = lambda t: " ".join(t.split())  # noqa: E731 - the gloss file has one document a line
    return [one_line(s.gloss) for s in ordered[:n_docs]], [one_line(s.examples[0]) for s in with_examples[:n_queries]]


def _index(path: Path, docs: List[str], seed: int) -> Tuple[UECIndex, float]:
    """The index of ``docs`` at ``path``, built there (``crossembed index build``) unless it holds them."""
    if path.is_file():
        index = UECIndex.load(path)
        if index.ensemble is not None and index.texts == docs:
            return index, 0.0
    with tempfile.TemporaryDirectory(prefix="crossembed-bench-") as tmp:
        gloss_file = Path(tmp) / "docs.txt"
        gloss_file.write_text("\n".join(docs) + "\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "crossembed", "index", "build", str(gloss_file), "-o", str(path), "--quiet"]
        start = time.perf_counter()
        subprocess.run(cmd + ["--seed", str(seed)], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        build_s = time.perf_counter() - start
    return UECIndex.load(path), build_s


def _in_process(index: UECIndex, queries: List[str], k: int) -> Dict[str, Any]:
    """Encoders alone, all queries in one search call, one query a call (with each query's answer alone)."""
    index.ensemble.encode(queries[:8], role="query", show_progress_bar=False)  # encoders load on first use
    start = time.perf_counter()
    index.ensemble.encode(queries, role="query", show_progress_bar=False)
    encode_s = time.perf_counter() - start
    start = time.perf_counter()
    index.search(queries, k)
    batch_s = time.perf_counter() - start
    alone = []
    start = time.perf_counter()
    for q in queries:
        alone.append(index.search([q], k))
    single_s = time.perf_counter() - start
    n = len(queries)
    return {
        "encode_qps": n / encode_s,
        "batch_qps": n / batch_s,
        "single_qps": n / single_s,
        "alone": (np.concatenate([s for s, _ in alone]), np.concatenate([i for _, i in alone])),
    }


async def _metric(port: int, name: str) -> Tuple[float, float]:
    """(sum, count) of the server's histogram ``name``."""
    conn = await Connection.open(_HOST, port)
    _, body = await conn.send(http_request("/metrics", method="GET"))
    await conn.close()
    text = body.decode()
    total = re.search(rf"^{name}_sum ([0-9.e+]+)$", text, re.M)
    count = re.search(rf"^{name}_count ([0-9.e+]+)$", text, re.M)
    return (float(total.group(1)), float(count.group(1))) if total and count else (0.0, 0.0)


async def _served_answers(port: int, requests: Sequence[bytes], concurrency: int) -> Tuple[np.ndarray, np.ndarray]:
    """Every request's answer, sent by ``concurrency`` connections at once (their texts share encoder calls)."""
    conns = [await Connection.open(_HOST, port) for _ in range(concurrency)]
    out: List[Optional[Dict[str, Any]]] = [None] * len(requests)

    async def worker(c: int) -> None:
        for i in range(c, len(requests), concurrency):
            status, body = await conns[c].send(requests[i])
            out[i] = json.loads(body) if status == 200 else None

    try:
        await asyncio.gather(*(worker(c) for c in range(len(conns))))
    finally:
        for conn in conns:
            await conn.close()
    if any(o is None for o in out):
        raise RuntimeError("the server refused a query of the same-answers check")
    scores = np.array([[np.nan if s is None else s for s in o["scores"][0]] for o in out], np.float64)
    return scores, np.array([o["ids"][0] for o in out], np.int64)


def _same_answers(served: Tuple[np.ndarray, np.ndarray], alone: Tuple[np.ndarray, np.ndarray]) -> Dict[str, Any]:
    scores, ids = served
    equal = (ids == alone[1]).all(axis=1)
    diff = np.abs(scores - alone[0].astype(np.float64))
    return {
        "queries": len(ids),
        "ids_equal": int(equal.sum()),
        "max_score_diff": float(np.nanmax(diff)),
        "max_score_diff_ids_equal": float(np.nanmax(diff[equal])) if equal.any() else float("nan"),
    }


async def _load_rows(port: int, requests: Sequence[bytes], plan: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for concurrency in plan["concurrencies"]:
        e0, s0 = (
            await _metric(port, "crossembed_encode_batch_texts"),
            await _metric(port, "crossembed_search_batch_queries"),
        )
        result = await run_load(
            _HOST, port, requests, concurrency=concurrency, duration_s=plan["duration_s"], warmup_s=plan["warmup_s"]
        )
        e1, s1 = (
            await _metric(port, "crossembed_encode_batch_texts"),
            await _metric(port, "crossembed_search_batch_queries"),
        )
        rows.append(
            {
                **result.summary(),
                "texts_per_encode": (e1[0] - e0[0]) / max(e1[1] - e0[1], 1),
                "queries_per_search": (s1[0] - s0[0]) / max(s1[1] - s0[1], 1),
            }
        )
    return rows


def _mean_std(values: Sequence[float]) -> Dict[str, float]:
    v = np.asarray(values, np.float64)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}


def benchmark_serve_text(
    *,
    n_docs: int = 20_000,
    n_queries: int = 300,
    k: int = 10,
    concurrencies: Sequence[int] = (1, 8, 32, 64),
    duration_s: float = 15.0,
    warmup_s: float = 3.0,
    runs: int = 3,
    index_path: Optional[str] = None,
    server_args: Sequence[str] = (),
    seed: int = 0,
) -> Dict[str, Any]:
    """Served vs in-process text search of ``n_queries`` WordNet examples over ``n_docs`` glosses.

    ``index_path``: where the index is built, and reused when it already holds these
    glosses (building 20,000 with three encoders takes minutes). ``runs``: repetitions of
    every row. ``server_args``: more ``crossembed serve`` options (e.g. ``--max-batch-tokens``).
    """
    for name, value in (("n_docs", n_docs), ("n_queries", n_queries), ("k", k), ("runs", runs)):
        check_int(value, name, low=1)
    docs, queries = wordnet_texts(n_docs, n_queries)
    with tempfile.TemporaryDirectory(prefix="crossembed-bench-") as tmp:
        path = Path(index_path) if index_path is not None else Path(tmp) / "glosses.uec"
        index, build_s = _index(path, docs, seed)
        requests = [http_request("/search", {"queries": [q], "k": k}) for q in queries]
        plan = {"concurrencies": list(concurrencies), "duration_s": duration_s, "warmup_s": warmup_s}
        port = _free_port()
        proc = _start_server(path, port, None, list(server_args))
        local_runs, served_runs, same, loads = [], [], None, []
        try:
            asyncio.run(_wait_ready(port, proc))
            for run in range(runs):  # in-process first: the idle server holds no core meanwhile
                loads.append(os.getloadavg()[0])  # a shared machine's other work, beside the run's figures
                local_runs.append(_in_process(index, queries, k))
                if run == 0:
                    alone = local_runs[0]["alone"]
                    same = _same_answers(asyncio.run(_served_answers(port, requests, 32)), alone)
                served_runs.append(asyncio.run(_load_rows(port, requests, plan)))
        finally:
            code = _stop_server(proc)
    local = {key: _mean_std([r[key] for r in local_runs]) for key in ("encode_qps", "batch_qps", "single_qps")}
    rows = []
    for i, concurrency in enumerate(concurrencies):
        per_run = [r[i] for r in served_runs]
        row = {"concurrency": concurrency, "errors": sum(r["errors"] for r in per_run)}
        for key in ("qps", "p50_ms", "p99_ms", "texts_per_encode", "queries_per_search"):
            row[key] = _mean_std([r[key] for r in per_run])
        rows.append(row)
    config = {"n_docs": n_docs, "n_queries": n_queries, "k": k, "runs": runs, "duration_s": duration_s}
    config.update(build_seconds=build_s, models=[e.encoder_name for e in index.ensemble.embedders])
    config.update(server_args=list(server_args), load_average=loads)
    return {
        "config": config,
        "in_process": local,
        "rows": rows,
        "same_answers": same,
        "server_exit_code": code,
        "cpus": os.cpu_count(),
    }


def _pm(v: Dict[str, float], fmt: str = ",.1f") -> str:
    return f"{v['mean']:{fmt}} ± {v['std']:{fmt}}"


def render_text(result: Dict[str, Any]) -> str:
    """A markdown table of the in-process and served rows (mean ± std over the runs)."""
    c, local, same = result["config"], result["in_process"], result["same_answers"]
    enc = local["encode_qps"]["mean"]
    lines = [
        f"{c['n_docs']:,} WordNet noun glosses, {'+'.join(c['models'])}, {c['n_queries']} example-sentence "
        f"queries, k={c['k']}, {result['cpus']} CPUs; mean ± std of {c['runs']} runs (1-minute load average "
        f"at each run's start: {', '.join(f'{x:.1f}' for x in c['load_average'])})",
        "",
        "| path | concurrency | queries/s | x encoders | p50 ms | p99 ms | texts per encoder call | "
        "queries per index call | errors |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| in-process, encoders alone | - | {_pm(local['encode_qps'])} | 1.00 | - | - | {c['n_queries']} | - | - |",
        f"| in-process, all texts in one call | - | {_pm(local['batch_qps'])} | "
        f"{local['batch_qps']['mean'] / enc:.2f} | - | - | {c['n_queries']} | {c['n_queries']} | - |",
        f"| in-process, one text a call | 1 | {_pm(local['single_qps'])} | "
        f"{local['single_qps']['mean'] / enc:.2f} | - | - | 1 | 1 | - |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| HTTP | {r['concurrency']} | {_pm(r['qps'])} | {r['qps']['mean'] / enc:.2f} | {_pm(r['p50_ms'], ',.0f')} "
            f"| {_pm(r['p99_ms'], ',.0f')} | {r['texts_per_encode']['mean']:.1f} | "
            f"{r['queries_per_search']['mean']:.1f} | {r['errors']} |"
        )
    lines.append("")
    lines.append(
        f"Same answers (served at concurrency 32 vs each query alone in process): ids equal on "
        f"{same['ids_equal']}/{same['queries']} queries; largest score difference {same['max_score_diff']:.2e} "
        f"({same['max_score_diff_ids_equal']:.2e} where the ids are equal). "
        f"Server exit status after SIGTERM: {result['server_exit_code']}."
    )
    return "\n".join(lines)
