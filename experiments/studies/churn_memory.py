"""Resident memory of a UECIndex under churn, against a fresh build of the same live set.

Builds an index of ``--n`` random unit means (dimension ``--dim``, zero
variances), then runs rounds that remove ``--batch`` random live ids and add
``--batch`` new documents until ``--churn`` documents were added (as many were
removed). Every ``--report`` added documents it records the process's RSS
(``/proc/self/status``), what :meth:`UECIndex.stats` reports (live, deleted
slots, bytes by part) and glibc's heap (in use / free but held, ``mallinfo2``).
At the end: the reachability check (:meth:`UECIndex.unreachable`), ANN
recall@10 against exact search on ``--queries`` live documents as queries,
and the RSS of a fresh build of the final live set in a new process (the same
imports, the same build). Prints a markdown table. The highest RSS is taken
after every round, with the slowest round (a compaction runs inside the
removal that crosses ``compact_at``); ``--max-seconds`` ends the churn early
(the summary says how far it got).

    python -m experiments.studies.churn_memory --n 20000 --churn 240000 --batch 1000
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex

_MIB = 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
        + ("keepcost",)
    ]


def _heap() -> tuple:
    """glibc's heap in MiB: (in use, free but held by the allocator); (nan, nan) without mallinfo2."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return float("nan"), float("nan")
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / _MIB, info.fordblks / _MIB


def rss_mib() -> float:
    """This process's resident set size, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def unit_docs(rng, n: int, dim: int) -> GaussianEmbedding:
    m = rng.standard_normal((n, dim), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return GaussianEmbedding(m, np.zeros_like(m))


def fresh_rss(means: np.ndarray, config: IndexConfig) -> float:
    """RSS (MiB) of a new process that builds an index of ``means`` with ``config`` (zero variances)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "means.npy"
        np.save(path, means)
        code = (
            "import numpy as np, sys\n"
            "from crossembed.uec import GaussianEmbedding, IndexConfig, UECIndex\n"
            "from experiments.studies.churn_memory import rss_mib\n"
            f"m = np.load({str(path)!r})\n"
            f"index = UECIndex(GaussianEmbedding(m, np.zeros_like(m)), config=IndexConfig(**{config.get_config()!r}))\n"
            "del m\n"
            "print(rss_mib())\n"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000, help="live documents (default 20000)")
    p.add_argument("--dim", type=int, default=128, help="dimension (default 128)")
    p.add_argument("--batch", type=int, default=1000, help="removed and added per round (default 1000)")
    p.add_argument("--churn", type=int, default=240000, help="documents added in all (as many removed)")
    p.add_argument("--report", type=int, default=30000, help="a row every this many added documents")
    p.add_argument("--compact-at", type=float, default=0.25, help="IndexConfig.compact_at (<= 0: None)")
    p.add_argument("--queries", type=int, default=500, help="live documents used as queries for recall@10")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="end the churn this long after the start, build included (default: none)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    config = IndexConfig(compact_at=args.compact_at if args.compact_at > 0 else None)
    built_from = time.perf_counter()
    index = UECIndex(unit_docs(rng, args.n, args.dim), config=config)
    live, next_id, added, began = np.arange(args.n), args.n, 0, time.perf_counter()
    build_s = began - built_from
    rows = []

    def record() -> None:
        s = index.stats()
        used, free = _heap()
        rows.append((added, rss_mib(), s["live"], s["deleted"], s["bytes"]["graph"] / _MIB, used, free))
        print(
            f"added {added}: rss {rows[-1][1]:.1f} MiB, {s}, heap in use {used:.1f} free {free:.1f} MiB, "
            f"{time.perf_counter() - began:.0f} s",
            flush=True,
        )

    record()
    peak = rows[0][1]
    slowest, compactions = 0.0, 0
    while added < args.churn:
        gone = rng.choice(live, args.batch, replace=False)
        round_began, deleted = time.perf_counter(), index.stats()["deleted"]
        index.remove(gone)
        compactions += index.stats()["deleted"] < deleted + args.batch
        new = np.arange(next_id, next_id + args.batch)
        index.add(unit_docs(rng, args.batch, args.dim), ids=new)
        live = np.concatenate([np.setdiff1d(live, gone), new])
        next_id += args.batch
        added += args.batch
        slowest = max(slowest, time.perf_counter() - round_began)
        peak = max(peak, rss_mib())
        over = args.max_seconds is not None and time.perf_counter() - built_from > args.max_seconds
        if added % args.report == 0 or added >= args.churn or over:
            record()
        if over:
            break
    unreachable = len(index.unreachable())
    qids = rng.choice(live, min(args.queries, len(live)), replace=False)
    q = index.get_docs(qids)
    _, exact = index.search(q, 10, exact=True)
    _, ann = index.search(q, 10)
    recall = float(np.mean([len(np.intersect1d(a, e)) / 10 for a, e in zip(ann, exact)]))
    self_hit = float(np.mean(exact[:, 0] == qids))
    fresh = fresh_rss(index.get_docs(np.sort(live)).mean, config)
    print()
    print("| added (= removed) | RSS, MiB | live | deleted slots | graph, MiB | heap in use, MiB | heap free, MiB |")
    print("|---|---|---|---|---|---|---|")
    for a, rss, n_live, deleted, graph, used, free in rows:
        print(f"| {a} | {rss:.1f} | {n_live} | {deleted} | {graph:.1f} | {used:.1f} | {free:.1f} |")
    print()
    print(
        f"build {build_s:.0f} s; churn {added} adds + {added} removes of {args.churn}, {compactions} compactions "
        f"(slowest round {slowest:.1f} s); "
        f"fresh build of the final {len(live)} documents: RSS {fresh:.1f} MiB; after churn {rows[-1][1]:.1f} MiB "
        f"({rows[-1][1] / fresh:.3f}x), highest after any round {peak:.1f} MiB ({peak / fresh:.3f}x); "
        f"unreachable live documents {unreachable}; exact top hit is the query's own document for {self_hit:.3f}; "
        f"ANN recall@10 vs exact {recall:.4f} "
        f"({len(q)} queries); {time.perf_counter() - began:.0f} s"
    )


if __name__ == "__main__":
    main()
