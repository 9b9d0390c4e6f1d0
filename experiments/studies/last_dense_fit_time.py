"""Time ``LaplaceEmbedder(layer="last_dense").fit`` on WordNet (example, gloss) pairs.

Pairs: every WordNet noun and verb example with its synset's gloss
(``example_gloss_pairs(all_examples=True)``), shuffled with a fixed seed, the
first ``--pairs`` of them. One JSON line per posterior form with the total fit
time, the forward passes alone, the curvature + prior search, the selected
prior precision and the trace statistics.

    CROSSEMBED_NUM_THREADS=1 python -m experiments.studies.last_dense_fit_time --model minilm --pairs 10000
"""

from __future__ import annotations

import argparse
import json
import platform

import numpy as np

from crossembed.data.wordnet import example_gloss_pairs
from crossembed.encoders import load_encoder
from crossembed.encoders.base import default_num_threads
from crossembed.uec import LaplaceEmbedder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--pairs", type=int, default=10000)
    ap.add_argument("--hessian", nargs="+", default=["diag", "kron"])
    ap.add_argument("--curvature", default="ggn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    pairs = example_gloss_pairs("noun", all_examples=True) + example_gloss_pairs("verb", all_examples=True)
    rng = np.random.default_rng(args.seed)
    pairs = [pairs[i] for i in rng.permutation(len(pairs))[: args.pairs]]
    encoder = load_encoder(args.model)
    for hessian in args.hessian:
        lap = LaplaceEmbedder(encoder, layer="last_dense", hessian=hessian, curvature=args.curvature)
        lap.fit(pairs, show_progress_bar=False)
        print(
            json.dumps(
                {
                    "model": args.model,
                    "hessian": hessian,
                    "curvature": args.curvature,
                    "pairs": len(pairs),
                    "threads": default_num_threads(),
                    "cpu": platform.processor() or platform.machine(),
                    "fit_seconds": round(lap.fit_seconds_, 1),
                    "forward_seconds": round(lap.fit_forward_seconds_, 1),
                    "curvature_seconds": round(lap.fit_seconds_ - lap.fit_forward_seconds_, 1),
                    "prior_precision": lap.prior_precision_,
                    "trace_mean": lap.heads_.trace_mean,
                    "trace_rel_std": lap.heads_.trace_std / lap.heads_.trace_mean,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
