"""ANN recall@10 against exact search of a freshly built UECIndex of random unit means, by rerank.

The baseline of :mod:`experiments.studies.churn_memory`'s recall: the same documents (``--n`` random
unit means of dimension ``--dim``, zero variances, seed ``--seed``, default :class:`IndexConfig`), no
churn; ``--queries`` documents as queries, ``ef`` at its default of twice ``rerank``.

    python -m experiments.studies.fresh_recall --n 200000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from crossembed.uec import IndexConfig, UECIndex
from experiments.studies.churn_memory import unit_docs


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200000, help="documents (default 200000)")
    p.add_argument("--dim", type=int, default=128, help="dimension (default 128)")
    p.add_argument("--queries", type=int, default=500, help="documents used as queries (default 500)")
    p.add_argument("--rerank", default="100,200,400", help="comma-separated rerank values (default 100,200,400)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    began = time.perf_counter()
    index = UECIndex(unit_docs(rng, args.n, args.dim), config=IndexConfig())
    print(f"build {time.perf_counter() - began:.0f} s", flush=True)
    qids = rng.choice(args.n, min(args.queries, args.n), replace=False)
    q = index.get_docs(qids)
    _, exact = index.search(q, 10, exact=True)
    for rerank in (int(r) for r in args.rerank.split(",")):
        _, ann = index.search(q, 10, rerank=rerank)
        recall = np.mean([len(np.intersect1d(a, e)) / 10 for a, e in zip(ann, exact)])
        print(f"{args.n} x {args.dim}: rerank {rerank} (ef {2 * rerank}) recall@10 {recall:.4f}", flush=True)


if __name__ == "__main__":
    main()
