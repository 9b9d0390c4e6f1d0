"""Recall of float16 document storage: ProbitDocs(storage="float16") top-k against the float32 top-k.

    python benchmarks/recall_probit_float16.py            # Q=1000, N=100k, D=384, k=10
    python benchmarks/recall_probit_float16.py --n 20000  # smaller

Variances as in bench_probit.py's ``kron`` regime, 0.016 U(0.5, 1.5), for
queries and documents. Two kinds of unit means: ``isotropic`` (random unit
rows, bench_probit.py's data: every cosine is ~N(0, 1/D), so the top 10 are
packed close together - the hard case for a lossy store) and ``clustered``
(real-ish: a shared mean direction, 500 topic centroids and a decaying
spectrum, queries near a document). Recall@k is |top-k(float16) & top-k(float32)| / k
averaged over queries; the exact top-k is the float32 kernel's (itself exact
for its float32 inputs up to float32 rounding). Times are the best of
``--rounds`` calls of ``top_k`` on prepared documents, in the same process.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import crossembed as ce
from _bench import clustered_unit_rows

KRON = (0.016 * 0.5, 0.016 * 1.5)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def means(kind: str, rng: np.random.Generator, q: int, n: int, d: int):
    """(query means, document means), unit rows."""
    if kind == "isotropic":
        return _unit(rng.standard_normal((q, d), dtype=np.float32)), _unit(
            rng.standard_normal((n, d), dtype=np.float32)
        )
    if kind != "clustered":
        raise ValueError(f"kind must be 'isotropic' or 'clustered', got {kind!r}")
    return clustered_unit_rows(rng, q, n, d)


def _best_time(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(
    kind: str = "isotropic",
    *,
    q: int = 1000,
    n: int = 100_000,
    d: int = 384,
    k: int = 10,
    seed: int = 0,
    rounds: int = 3,
    num_threads=None,
) -> dict:
    """Recall@k of float16 storage against float32, both storages' nbytes and top_k times."""
    rng = np.random.default_rng(seed)
    mu_q, mu_c = means(kind, rng, q, n, d)
    v_q = rng.uniform(*KRON, (q, d)).astype(np.float32)
    v_c = rng.uniform(*KRON, (n, d)).astype(np.float32)
    out = {"kind": kind, "q": q, "n": n, "d": d, "k": k}
    found = {}
    for storage in ("float32", "float16"):
        docs = ce.ProbitDocs(mu_c, v_c, storage=storage)
        found[storage] = docs.top_k(mu_q, v_q, k, num_threads=num_threads)
        out[f"time_{storage}"] = _best_time(lambda docs=docs: docs.top_k(mu_q, v_q, k, num_threads=num_threads), rounds)
        out[f"nbytes_{storage}"] = docs.nbytes
        del docs
    (s32, i32), (s16, i16) = found["float32"], found["float16"]
    out["recall"] = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(i32.tolist(), i16.tolist())]))
    out["exact_rows"] = float(np.mean((i32 == i16).all(axis=1)))  # same list in the same order
    out["max_score_diff"] = float(np.abs(s32.astype(np.float64) - s16).max())
    out["time_ratio"] = out["time_float16"] / out["time_float32"]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--q", type=int, default=1000)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--d", type=int, default=384)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--kinds", default="isotropic,clustered")
    a = p.parse_args(argv)
    print(f"simd {ce.simd_level()}, Q={a.q} N={a.n} D={a.d} k={a.k}, kron variances 0.016 U(0.5, 1.5)")
    print("| means | recall@k | same list | max |score diff| | float32 | float16 | time ratio | nbytes f16/f32 |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in a.kinds.split(","):
        r = measure(kind, q=a.q, n=a.n, d=a.d, k=a.k, rounds=a.rounds, num_threads=a.threads)
        print(
            f"| {kind} | {r['recall']:.4f} | {r['exact_rows']:.3f} | {r['max_score_diff']:.2e} "
            f"| {r['time_float32'] * 1e3:.0f} ms | {r['time_float16'] * 1e3:.0f} ms | {r['time_ratio']:.2f} "
            f"| {r['nbytes_float16'] / r['nbytes_float32']:.3f} |"
        )


if __name__ == "__main__":
    main()
