"""How long a compaction holds writers (and searches) of a UECIndex.

Builds an index of ``--n`` random unit means (dimension ``--dim``, zero
variances, default :class:`IndexConfig`), adds and removes, in bulk, all
but ``--margin`` of the documents that bring the deleted slots to the
compaction threshold (``compact_at`` times the live documents), then runs a
writer thread of single-document updates (remove one random live id, add one
new document, each call timed) beside a thread of single-query searches until
the writer's update has started a compaction, the new graph is swapped in
(``stats()["compacting"]`` falls) and ``--after`` more updates ran. Prints the
latency of writes and searches before, during and after the build: the update
that crosses the threshold only starts it, later updates go on during it
(journaled, replayed before the swap), searches wait only for the swap.

    python -m experiments.studies.compaction_stall --n 20000
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time

import numpy as np

from crossembed.uec import IndexConfig, UECIndex
from experiments.studies.churn_memory import unit_docs


def _summary(name: str, seconds: list) -> str:
    if not seconds:
        return f"| {name} | 0 | | | |"
    ms = 1e3 * np.asarray(seconds)
    return f"| {name} | {len(ms)} | {np.percentile(ms, 50):.2f} | {np.percentile(ms, 99):.2f} | {ms.max():.1f} |"


def _search(index, queries, stop: threading.Event, out: list) -> None:
    for i in itertools.count():
        if stop.is_set():
            return
        began = time.perf_counter()
        index.search(queries[i % len(queries) : i % len(queries) + 1], 10)
        out.append((began, time.perf_counter() - began))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000, help="live documents (default 20000)")
    p.add_argument("--dim", type=int, default=128, help="dimension (default 128)")
    p.add_argument("--margin", type=int, default=300, help="single-document updates before the threshold")
    p.add_argument("--after", type=int, default=300, help="single-document updates after the compaction")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    config = IndexConfig()
    began = time.perf_counter()
    index = UECIndex(unit_docs(rng, args.n, args.dim), config=config)
    build_s = time.perf_counter() - began
    bulk = int(config.compact_at * args.n) - args.margin
    live = rng.permutation(args.n)
    index.add(unit_docs(rng, bulk, args.dim), ids=np.arange(args.n, args.n + bulk))  # first: removing first
    index.remove(live[:bulk])  # would cross the threshold of the smaller live set
    live, next_id = np.concatenate([live[bulk:], np.arange(args.n, args.n + bulk)]), args.n + bulk
    print(f"build {build_s:.0f} s, bulk churn {bulk}: {index.stats()}", flush=True)
    queries = index.get_docs(live[-200:])
    stop, searches, writes = threading.Event(), [], []
    searcher = threading.Thread(target=_search, args=(index, queries, stop, searches))
    searcher.start()
    started, swapped, pos = None, None, 0
    try:
        while swapped is None or len(writes) < swapped + args.after:
            t0 = time.perf_counter()
            index.remove(live[pos : pos + 1])
            index.add(unit_docs(rng, 1, args.dim), ids=[next_id])
            writes.append((t0, time.perf_counter() - t0))
            pos, next_id = pos + 1, next_id + 1
            compacting = index.stats()["compacting"]
            if started is None and compacting:
                started = len(writes) - 1
            elif started is not None and swapped is None and not compacting:
                swapped = len(writes) - 1  # the new graph is in place after this write
    finally:
        stop.set()
        searcher.join()
    c0, c1 = writes[started][0], writes[swapped][0] + writes[swapped][1]
    during = [d for t, d in searches if c0 <= t <= c1]
    print()
    print(
        f"{args.n} x {args.dim}, default IndexConfig; write {started} started a compaction, swapped in after "
        f"write {swapped} ({c1 - c0:.1f} s later)"
    )
    print()
    print("| calls | n | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    print(_summary("writes before", [d for _, d in writes[:started]]))
    print(_summary("the write that started it", [writes[started][1]]))
    print(_summary("writes during the build", [d for _, d in writes[started + 1 : swapped + 1]]))
    print(_summary("writes after", [d for _, d in writes[swapped + 1 :]]))
    print(_summary("searches during the build", during))
    print(_summary("searches outside it", [d for t, d in searches if not c0 <= t <= c1]))


if __name__ == "__main__":
    main()
