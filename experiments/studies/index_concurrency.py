"""Search throughput of a UECIndex with and without a concurrent writer (in-process, threads).

Builds (or loads) an index of synthetic clustered Gaussians
(:func:`crossembed.cli.serve_bench.synthetic_gaussians`), then for each
setting runs ``--searchers`` threads of single-query (or ``--batch``-query)
searches for ``--seconds``, alone and beside one writer thread that adds
``--write-batch`` new documents and removes as many old ones every
``--write-interval`` seconds. Prints a markdown table: searches/s, queries/s,
p50/p99 latency, documents written per second.

    python -m experiments.studies.index_concurrency --n 100000 --dim 384 --seconds 10
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import numpy as np

from crossembed.cli.serve_bench import synthetic_gaussians
from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex


def _searchers(index, queries, batch, k, rerank, n_threads, seconds):
    latencies, stop = [[] for _ in range(n_threads)], time.perf_counter() + seconds

    def run(t):
        i = t * 97
        while time.perf_counter() < stop:
            s = (i * batch) % (len(queries) - batch)
            t0 = time.perf_counter()
            index.search(queries[s : s + batch], k, rerank=rerank)
            latencies[t].append(time.perf_counter() - t0)
            i += 1

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return np.concatenate([np.asarray(x) for x in latencies])


def _writer(index, pool, batch, interval, done, written):
    rng = np.random.default_rng(1)
    next_id = 10**9
    while not done.is_set():
        t0 = time.perf_counter()
        rows = rng.choice(len(pool), batch, replace=False)
        index.add(GaussianEmbedding(pool.mean[rows], pool.var[rows]), ids=np.arange(next_id, next_id + batch))
        next_id += batch
        old = index.ids[:batch]
        index.remove(old)
        written[0] += 2 * batch
        time.sleep(max(0.0, interval - (time.perf_counter() - t0)))


def measure(index, queries, pool, args, with_writer: bool):
    done, written = threading.Event(), [0]
    writer = threading.Thread(target=_writer, args=(index, pool, args.write_batch, args.write_interval, done, written))
    if with_writer:
        writer.start()
    t0 = time.perf_counter()
    lat = _searchers(index, queries, args.batch, args.k, args.rerank, args.searchers, args.seconds)
    elapsed = time.perf_counter() - t0
    done.set()
    if with_writer:
        writer.join()
    return {
        "writer": with_writer,
        "searches_per_s": len(lat) / elapsed,
        "queries_per_s": len(lat) * args.batch / elapsed,
        "p50_ms": 1e3 * float(np.percentile(lat, 50)),
        "p99_ms": 1e3 * float(np.percentile(lat, 99)),
        "docs_written_per_s": written[0] / elapsed,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--index", type=Path, help="load this index instead of building one (then --n is ignored)")
    p.add_argument("--M", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=100)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--rerank", type=int, default=20)
    p.add_argument("--searchers", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--write-batch", type=int, default=100)
    p.add_argument("--write-interval", type=float, default=0.1)
    args = p.parse_args()
    if args.index:
        index = UECIndex.load(args.index)
    else:
        config = IndexConfig(M=args.M, ef_construction=args.ef_construction)
        index = UECIndex(synthetic_gaussians(args.n, args.dim, seed=0), config=config)
    queries = synthetic_gaussians(2000, index.dim, seed=1)
    pool = synthetic_gaussians(5000, index.dim, seed=2)
    index.search(queries[:64], args.k, rerank=args.rerank)  # warm the cached panels
    print(
        f"{len(index):,} x {index.dim} documents, {args.searchers} searcher threads, {args.batch} query/search, "
        f"k={args.k}, rerank={args.rerank}; writer: +{args.write_batch} / -{args.write_batch} documents every "
        f"{args.write_interval} s\n"
    )
    print("| writer | searches/s | queries/s | p50 ms | p99 ms | documents written/s |")
    print("|---|---|---|---|---|---|")
    for with_writer in (False, True):
        r = measure(index, queries, pool, args, with_writer)
        print(
            f"| {'yes' if with_writer else 'no'} | {r['searches_per_s']:.0f} | {r['queries_per_s']:.0f} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['docs_written_per_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
