"""The search half of a text query on each index dtype: the graph walk and the whole search, timed side by side.

The index of a ``crossembed index build`` with the three default encoders holds 1,155-d means with
variances, searched with the default ``rerank=100`` (``ef=200``); most of a search is the HNSW walk
over those means. This builds the same geometry (``synthetic_gaussians(--n + --queries, --dim)``, the
serve benchmark's clustered Gaussians; M 32, ef_construction 200) once per ``--dtypes`` entry and
times, in rounds that alternate the dtypes (so a change in the machine's load reaches every dtype
alike), the graph's candidates alone (:meth:`UECIndex.candidates`, ``m = 100``, ``ef = 200``) and the
whole default search of ``--queries`` queries. Prints a markdown table: build seconds, graph bytes
per document, the median seconds of each and their ratio to the first dtype's, recall@10 against
exact search and the share of the first dtype's top-10 ids found.

    python -m experiments.studies.text_search_store --dtypes float32,int8,bf16
"""

from __future__ import annotations

import argparse
import time
from typing import Dict, List

import numpy as np

from crossembed.cli.serve_bench import synthetic_gaussians
from crossembed.uec import IndexConfig, UECIndex


def _overlap(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / ref.shape[1] for a, b in zip(got, ref)]))


def _seconds(fn, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000, help="documents")
    p.add_argument("--dim", type=int, default=1155, help="dimension of the means")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--dtypes", default="float32,int8,bf16", help="index dtypes; ratios are to the first")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (each times every dtype once)")
    p.add_argument("--num-threads", type=int, default=None)
    args = p.parse_args(argv)
    dtypes = args.dtypes.split(",")
    g = synthetic_gaussians(args.n + args.queries, args.dim, seed=1)
    docs, q = g[: args.n], g[args.n :]
    indexes: Dict[str, UECIndex] = {}
    rows: Dict[str, Dict[str, float]] = {}
    for dt in dtypes:
        config = IndexConfig(M=32, ef_construction=200, rerank=100, dtype=dt)
        t0 = time.perf_counter()
        indexes[dt] = UECIndex(docs, config=config, num_threads=args.num_threads)
        rows[dt] = {"build_s": time.perf_counter() - t0, "graph_b": indexes[dt].memory_usage()["graph"] / args.n}
    exact = indexes[dtypes[0]].search(q, 10, exact=True)[1]
    times: Dict[str, Dict[str, List[float]]] = {dt: {"graph": [], "search": []} for dt in dtypes}
    results = {dt: indexes[dt].search(q, 10)[1] for dt in dtypes}  # a warm-up call each (the panel cache)
    for _ in range(args.rounds):
        for dt in dtypes:
            times[dt]["graph"].append(_seconds(indexes[dt].candidates, q, 100, ef=200))
            times[dt]["search"].append(_seconds(indexes[dt].search, q, 10))
    base = {part: float(np.median(times[dtypes[0]][part])) for part in ("graph", "search")}
    print(
        f"{args.n:,} x {args.dim}, {args.queries} queries, M 32 / ef_construction 200, rerank 100 / ef 200, "
        f"median of {args.rounds} rounds\n"
    )
    print(
        "| dtype | build s | graph bytes/doc | graph walk s | ratio | whole search s | ratio | recall@10 "
        f"| top-10 shared with {dtypes[0]} |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for dt in dtypes:
        gs, ss = float(np.median(times[dt]["graph"])), float(np.median(times[dt]["search"]))
        print(
            f"| {dt} | {rows[dt]['build_s']:.0f} | {rows[dt]['graph_b']:,.0f} | {gs:.3f} | {gs / base['graph']:.2f}x "
            f"| {ss:.3f} | {ss / base['search']:.2f}x | {_overlap(results[dt], exact):.4f} "
            f"| {_overlap(results[dt], results[dtypes[0]]):.4f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
