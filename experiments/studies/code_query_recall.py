"""Should a graph over int8 / bf16 codes code its queries too? Candidate recall, brute force, both ways.

An int8 or bf16 :class:`crossembed.ann.MeanGraph` scores a query against its stored codes. Symmetric:
the query is coded the same way (int8: its own row scale), and every distance is one integer dot times
two scales, as during insertion. Asymmetric: the float32 query against the decoded documents. This
scores every document both ways (numpy, no graph, so only the coding differs) on the serve
benchmark's clustered unit-norm means (``synthetic_gaussians``) and prints, per coding, the share of
the exact float32 top-10 found among the top ``m`` by coded score, for m = 10, 20, 50, 100.

    python -m experiments.studies.code_query_recall --n 100000 --dim 384
"""

from __future__ import annotations

import argparse

import numpy as np

from crossembed.cli.serve_bench import synthetic_gaussians

_DEPTHS = (10, 20, 50, 100)


def int8_decoded(x: np.ndarray) -> np.ndarray:
    """Per-row symmetric int8 codes times their scale (s = max|x| / 127, c = round(x / s)), as float64."""
    s = np.abs(x).max(axis=1, keepdims=True).astype(np.float32) / np.float32(127)
    c = np.clip(np.rint(x / np.where(s > 0, s, 1)), -127, 127)
    return (c * s).astype(np.float64)


def bf16_rounded(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (nearest, ties to even), widened to float64."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def candidate_recall(scores: np.ndarray, truth: np.ndarray) -> list:
    order = np.argsort(-scores, axis=1)[:, : max(_DEPTHS)]
    return [float(np.mean([len(set(t) & set(o[:m])) / truth.shape[1] for t, o in zip(truth, order)])) for m in _DEPTHS]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="documents")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=300)
    args = p.parse_args(argv)
    g = synthetic_gaussians(args.n + args.queries, args.dim, seed=1)
    x, q = g.mean[: args.n], g.mean[args.n :]
    truth = np.argsort(-(q.astype(np.float64) @ x.astype(np.float64).T), axis=1)[:, :10]
    codings = {
        "int8, query coded (symmetric)": int8_decoded(q) @ int8_decoded(x).T,
        "int8, float32 query (asymmetric)": q.astype(np.float64) @ int8_decoded(x).T,
        "bf16, query rounded (symmetric)": bf16_rounded(q) @ bf16_rounded(x).T,
        "bf16, float32 query (asymmetric)": q.astype(np.float64) @ bf16_rounded(x).T,
    }
    print(f"{args.n:,} x {args.dim}, {args.queries} queries: exact top-10 found among the top m by coded score\n")
    print("| coding | " + " | ".join(f"m = {m}" for m in _DEPTHS) + " |")
    print("|---|" + "---|" * len(_DEPTHS))
    for name, scores in codings.items():
        print(f"| {name} | " + " | ".join(f"{r:.4f}" for r in candidate_recall(scores, truth)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
