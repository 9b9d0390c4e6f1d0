"""What a map-based no-partner decision can reach at low overlap, measured with half of the answer.

For each draw of the link table (``--n-objects`` glosses of the first 20,000,
the partial-overlap protocol at ``--alpha``), half of the true pairs are given
away: a ridge map is fitted on them (and the seeds), every other row is linked
by mutual CSLS nearest neighbours through it, and the links are scored against
the other half. The threshold is then chosen *with* the answers: the best F1,
and the best F1 among thresholds that keep precision >= 85 %. No method that
decides from these scores can do better on those rows; a GEH fit starts from 15
seeds, not from half of the truth.

Two maps: one way (A mapped into B, as ``MapPass``) and both ways (each side's
rows beside the other side's rows mapped into them, compared as one vector).

    python scripts/geh_low_overlap_ceiling.py --pairs minilm:use,minilm:e5 --alpha 0.1 --draws 0,1,2
"""

from __future__ import annotations

import argparse

import numpy as np

from crossembed import kernels
from crossembed.experiments.corpora import embed_corpus
from crossembed.linking import make_partial_overlap
from crossembed.linking.preprocess import Center
from crossembed.linking.refine import ridge_map


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _features(A: np.ndarray, B: np.ndarray, fit: np.ndarray, both: bool):
    FA = _unit(A @ ridge_map(A[fit[:, 0]], B[fit[:, 1]]))
    if not both:
        return FA, _unit(B)
    GB = _unit(B @ ridge_map(B[fit[:, 1]], A[fit[:, 0]]))
    return _unit(np.hstack([FA, _unit(A)])), _unit(np.hstack([_unit(B), GB]))


def ceiling(A: np.ndarray, B: np.ndarray, fit: np.ndarray, held_out: np.ndarray, both: bool) -> dict:
    """Best F1 (and its P, R) and the best F1 at precision >= 0.85 on ``held_out``, with the oracle threshold."""
    FA, FB = _features(A, B, fit, both)
    pairs, scores = kernels.csls_mutual_topk(FA, FB, k=1, csls_k=10, exclude_a=fit[:, 0], exclude_b=fit[:, 1])
    truth = set(map(tuple, held_out.tolist()))
    right = np.array([tuple(p) in truth for p in pairs.tolist()], bool)
    hits = np.cumsum(right[np.argsort(-scores, kind="stable")])
    precision = hits / np.arange(1, len(hits) + 1)
    recall = hits / len(held_out)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    best = int(f1.argmax())
    strict = np.flatnonzero(precision >= 0.85)
    return {
        "f1": float(f1[best]),
        "precision": float(precision[best]),
        "recall": float(recall[best]),
        "f1_at_p85": float(f1[strict].max()) if len(strict) else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="minilm:use,minilm:e5,minilm:minilm-l3")
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--draws", default="0,1,2")
    parser.add_argument("--n-objects", type=int, default=10_000)
    parser.add_argument("--corpus", type=int, default=20_000)
    args = parser.parse_args()
    for pair in args.pairs.split(","):
        a, b = pair.split(":")
        XA, XB = embed_corpus(a, args.corpus), embed_corpus(b, args.corpus)
        rows = {False: [], True: []}
        for draw in map(int, args.draws.split(",")):
            rng = np.random.default_rng(draw)
            objects = np.sort(rng.choice(len(XA), size=args.n_objects, replace=False))
            split = make_partial_overlap(args.n_objects, alpha=args.alpha, n_seeds=15, random_state=draw)
            A, B = Center().apply(XA[objects[split.rows_a]]), Center().apply(XB[objects[split.rows_b]])
            truth = np.asarray(split.truth)
            order = np.random.default_rng(1000 + draw).permutation(len(truth))
            fit = np.concatenate([split.seeds, truth[order[: len(truth) // 2]]])
            held_out = truth[order[len(truth) // 2 :]]
            for both in (False, True):
                rows[both].append(ceiling(A, B, fit, held_out, both))
        for both, runs in rows.items():
            stats = {k: (np.mean([r[k] for r in runs]), np.std([r[k] for r in runs])) for k in runs[0]}
            print(
                f"{a} <-> {b}  alpha {args.alpha}  {'both ways' if both else 'one way '}  ({len(runs)} draws)  "
                + "  ".join(f"{k} {100 * m:.1f} ± {100 * s:.1f}" for k, (m, s) in stats.items()),
                flush=True,
            )


if __name__ == "__main__":
    main()
