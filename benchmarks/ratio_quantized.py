"""Time ratios of the quantized top-k to faiss IndexFlatIP, rounds interleaved (for a shared machine).

    python benchmarks/ratio_quantized.py                  # Q=1000, N=100k, D=384, k=10, 2 threads, 7 rounds
    python benchmarks/ratio_quantized.py --threads 1

bench_quantized.py times each entry in its own block of rounds, so load from
other processes lands on whichever entry ran at the time. Here every round
times each entry once, one after the other, and the ratio t(entry) /
t(faiss IndexFlatIP) is taken within the round: the mean +- std over rounds
of those ratios is what this prints, with recall@10 against the float32
kernel's top-k. Entries: QuantizedDocs int8 and bf16 (40 candidates), the
float32 kernel (ProbitDocs with zero variances), faiss IndexScalarQuantizer
8-bit (no rescoring), on bench_quantized.py's clustered unit means. Also
ProbitDocs(mu_c, v_c) preparation against its own top-k (kron variances),
the issue-58 preparation target, as t(preparation) / t(top_k) per round,
and the function path ``probit_topk`` (documents prepared in the call) at
Q=256, N=50k against numpy preparing its stacked documents every call:
t(numpy) / t(probit_topk) per round.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import crossembed as ce
from _bench import clustered_unit_rows
from crossembed.cli.kernel_peers import numpy_probit_docs, numpy_probit_topk
from crossembed.kernels import QuantizedDocs


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--q", type=int, default=1000)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--candidates", type=int, default=40)
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(args.threads)
    k, nt = 10, args.threads
    queries, docs = clustered_unit_rows(np.random.default_rng(1), args.q, args.n, args.d)
    zq = np.zeros_like(queries)
    f32 = ce.ProbitDocs(docs, np.zeros_like(docs))
    exact = f32.top_k(queries, zq, k, num_threads=nt)[1]
    flat = faiss.IndexFlatIP(args.d)
    flat.add(docs)
    sq8 = faiss.IndexScalarQuantizer(args.d, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    sq8.train(docs)
    sq8.add(docs)
    int8, bf16 = QuantizedDocs(docs, codes="int8"), QuantizedDocs(docs, codes="bf16")
    m = args.candidates
    entries = {
        "QuantizedDocs int8": lambda: int8.top_k(queries, k, candidates=m, num_threads=nt),
        "QuantizedDocs bf16": lambda: bf16.top_k(queries, k, candidates=m, num_threads=nt),
        "float32 kernel": lambda: f32.top_k(queries, zq, k, num_threads=nt),
        "faiss IndexScalarQuantizer 8-bit": lambda: sq8.search(queries, k),
    }
    recall = {}
    for name, fn in entries.items():
        ids = fn()[1]
        recall[name] = np.mean([len(set(a) & set(b)) / k for a, b in zip(ids, exact)])
    rng = np.random.default_rng(2)
    v_c = rng.uniform(0.016 * 0.5, 0.016 * 1.5, docs.shape).astype(np.float32)
    v_q = rng.uniform(0.016 * 0.5, 0.016 * 1.5, queries.shape).astype(np.float32)
    kron = ce.ProbitDocs(docs, v_c)
    ratios = {name: [] for name in entries}
    prep = []
    for _ in range(args.rounds):
        base = _time(lambda: flat.search(queries, k))
        for name, fn in entries.items():
            ratios[name].append(_time(fn) / base)
        start = time.perf_counter()
        prepared = ce.ProbitDocs(docs, v_c)
        t_prep = time.perf_counter() - start
        del prepared  # freed outside the timing, as a kept index is
        prep.append(t_prep / _time(lambda: kron.top_k(queries, v_q, k, num_threads=nt)))
    print(f"Q={args.q} N={args.n} D={args.d} k={k}, {nt} threads, {args.rounds} rounds, {m} candidates")
    print("| entry | time / faiss IndexFlatIP (mean +- std) | recall@10 |")
    print("|---|---|---|")
    for name in entries:
        r = np.asarray(ratios[name])
        print(f"| {name} | {r.mean():.2f} +- {r.std():.2f} | {recall[name]:.4f} |")
    p = np.asarray(prep)
    print(f"\nProbitDocs(mu_c, v_c) preparation / its top_k (kron): {p.mean():.2f} +- {p.std():.2f}")
    # the function path of bench_probit.py's function group: documents prepared inside every call
    fq, fn = min(256, args.q), min(50_000, args.n)
    fdocs, fv = docs[:fn], v_c[:fn]
    speedup = []
    for _ in range(args.rounds):
        t_np = _time(lambda: numpy_probit_topk(queries[:fq], v_q[:fq], numpy_probit_docs(fdocs, fv), k))
        speedup.append(t_np / _time(lambda: ce.probit_topk(queries[:fq], v_q[:fq], fdocs, fv, k, num_threads=nt)))
    f = np.asarray(speedup)
    print(f"numpy one call / probit_topk one call (Q={fq}, N={fn}, kron): {f.mean():.2f} +- {f.std():.2f}")


if __name__ == "__main__":
    main()
