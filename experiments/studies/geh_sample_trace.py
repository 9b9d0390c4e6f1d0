"""Why GEH's sampled rounds suffice: the pool inside a row sample, then the map over every row.

Draws the protocol on the whole cached gloss corpus, samples ``--sample``
rows of each side (the seeds kept, as ``GEHLinker(sample=RowSample(...))`` does),
runs the default rounds on the sample with every-row sampling off, printing
each round's pool precision/recall against the truth mapped into the sample,
then fits the ridge map on the sample's final links and links every row
(``map_links``) with 1 and 3 refits.

    python -m experiments.studies.geh_sample_trace --pair minilm:use --alpha 0.714 --sample 20000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from crossembed.linking import Center, GEHLinker, RowSample, ValidatedPromotion, evaluate_links, make_partial_overlap
from crossembed.linking.refine import map_links
from experiments.corpora import embed_corpus
from experiments.studies.geh_scale_run import _Traced, n_glosses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="minilm:use")
    p.add_argument("--alpha", type=float, default=0.714)
    p.add_argument("--sample", type=int, default=20_000)
    p.add_argument("--draw", type=int, default=0)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--row-sample", default="seeds", choices=("seeds", "random"))
    args = p.parse_args()
    enc_a, enc_b = args.pair.split(":")
    n = n_glosses()
    XA, XB = embed_corpus(enc_a, n), embed_corpus(enc_b, n)
    split = make_partial_overlap(n, alpha=args.alpha, n_seeds=15, random_state=args.draw)
    A, B = XA[split.rows_a], XB[split.rows_b]
    rng = np.random.default_rng(args.draw)
    # as GEHLinker(sample=RowSample(...)) draws them
    sample = RowSample(rows=args.sample, near_seeds=args.row_sample == "seeds")
    ia = sample.draw(A, split.seeds[:, 0], rng)
    ib = sample.draw(B, split.seeds[:, 1], rng)
    pa, pb = np.full(len(A), -1), np.full(len(B), -1)
    pa[ia], pb[ib] = np.arange(len(ia)), np.arange(len(ib))
    seeds = np.stack([pa[split.seeds[:, 0]], pb[split.seeds[:, 1]]], 1)
    truth = np.stack([pa[split.truth[:, 0]], pb[split.truth[:, 1]]], 1)
    truth = truth[(truth >= 0).all(axis=1)]
    print(f"{len(A)} x {len(B)} rows; sample {args.sample} a side holds {len(truth)} true pairs", flush=True)
    tic = time.perf_counter()
    rule = _Traced(ValidatedPromotion(), truth, len(ia), len(ib), print)
    res = GEHLinker(
        promotion=rule, sample=None, random_state=args.draw, max_iter=args.max_iter, show_progress_bar=False
    ).link(A[ia], B[ib], seeds)
    links = np.stack([ia[res.links[:, 0]], ib[res.links[:, 1]]], 1)
    m = evaluate_links(links, split.truth)
    print(
        f"sample rounds: {len(res.history)} rounds {time.perf_counter() - tic:.0f}s, {len(links)} links "
        f"at precision {m['precision']:.3f}",
        flush=True,
    )
    FA, FB = Center().apply(A), Center().apply(B)
    for refits in (1, 3):
        tic = time.perf_counter()
        final, _, _ = map_links(
            FA,
            FB,
            np.concatenate([split.seeds, links]),
            exclude_a=split.seeds[:, 0],
            exclude_b=split.seeds[:, 1],
            cells=True,
            refits=refits,
        )
        m = evaluate_links(final, split.truth)
        print(
            f"map over every row, {refits} refit(s): {time.perf_counter() - tic:.0f}s, {len(final)} links, "
            f"P {m['precision']:.4f} R {m['recall']:.4f} F1 {m['f1']:.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
