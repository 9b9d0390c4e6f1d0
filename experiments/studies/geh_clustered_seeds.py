"""GEH at 100k rows a side (minilm <-> USE, all glosses, alpha 0.714, draw 0) with 15 seeds from one neighbourhood.

The seeds are the 15 true pairs whose A rows are nearest one pair's A row: an
adversarial draw for the seed-nearest row sample of ``GEHLinker(sample=RowSample(near_seeds=True))``.
The other true pairs are what the links are scored against.

    python -m experiments.studies.geh_clustered_seeds --row-sample seeds     # or: random
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from crossembed.linking import GEHLinker, RowSample, evaluate_links, make_partial_overlap
from experiments.corpora import embed_corpus
from experiments.studies.geh_scale_run import n_glosses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row-sample", default="seeds", choices=("seeds", "random"))
    p.add_argument("--max-iter", type=int, default=30)
    args = p.parse_args()
    n = n_glosses()
    XA, XB = embed_corpus("minilm", n), embed_corpus("use", n)
    split = make_partial_overlap(n, alpha=0.714, n_seeds=15, random_state=0)
    A, B = XA[split.rows_a], XB[split.rows_b]
    pairs = np.concatenate([split.seeds, split.truth])
    near = A[pairs[:, 0]] @ A[pairs[0, 0]]
    pick = np.argsort(-near)[:15]
    seeds, truth = pairs[pick], np.delete(pairs, pick, axis=0)
    print(f"seed cosines to the centre: {near[pick].min():.2f} - {near[pick].max():.2f}", flush=True)
    tic = time.perf_counter()
    sample = RowSample(near_seeds=args.row_sample == "seeds")
    linker = GEHLinker(random_state=0, max_iter=args.max_iter, show_progress_bar=False, sample=sample)
    res = linker.link(A, B, seeds)
    m = evaluate_links(res.links, truth)
    print(
        f"{args.row_sample}: F1 {100 * m['f1']:.1f} P {100 * m['precision']:.1f} R {100 * m['recall']:.1f} "
        f"{time.perf_counter() - tic:.0f}s rounds {len(res.history)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
