"""What the decoy pass's scores can reach at low overlap, measured with the whole answer.

For each draw of the link table (``--n-objects`` glosses of the first 20,000,
the partial-overlap protocol at ``--alpha``, 15 seeds), the true pairs stand
in for the pass's anchors: A's rows are split into 5 folds as
:func:`crossembed.linking.decoys.decoy_links` splits them, each fold's rows
are linked by mutual CSLS nearest neighbours through scores fitted on the
seeds and the *other* folds' true pairs, and the links (one-to-one over the
folds) are scored against the truth with the threshold chosen *with* the
answers: the best F1, and the best F1 among thresholds that keep precision
>= 85 %. A GEH fit knows neither the pairs nor the threshold, so no pass
deciding from these scores does better. ``--maps`` names the scorers
(:mod:`crossembed.linking.maps`): ``ridge`` (``RidgeMap()``), ``ridge2``
(``TwoWayRidgeMap()``), ``cca`` (``CCAMap()``) and ``cca128``
(``CCAMap(n_components=128)``, the pass's default).

    python -m experiments.studies.geh_low_overlap_ceiling --pairs minilm:use,minilm:e5 --alpha 0.1 --draws 0,1,2
"""

from __future__ import annotations

import argparse

import numpy as np

from crossembed.linking import CCAMap, RidgeMap, make_partial_overlap
from crossembed.linking.pairs import contains
from crossembed.linking.preprocess import Center
from crossembed.linking.verify import relink_out_of_fold
from experiments.corpora import embed_corpus
from experiments.linking_rules import TwoWayRidgeMap

MAPS = {
    "ridge": RidgeMap(),
    "ridge2": TwoWayRidgeMap(),
    "cca": CCAMap(),
    "cca128": CCAMap(n_components=128),
}


def ceiling(links: np.ndarray, scores: np.ndarray, truth: np.ndarray, n_b: int) -> dict:
    """Best F1 (and its P, R) and the best F1 at precision >= 0.85, with the oracle threshold."""
    right = contains(truth, links[np.argsort(-scores, kind="stable")], n_b)
    hits = np.cumsum(right)
    precision = hits / np.arange(1, len(hits) + 1)
    recall = hits / len(truth)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    best = int(f1.argmax())
    strict = np.flatnonzero(precision >= 0.85)
    return {
        "f1": float(f1[best]),
        "precision": float(precision[best]),
        "recall": float(recall[best]),
        "f1_at_p85": float(f1[strict].max()) if len(strict) else 0.0,
        "recall_at_p85": float(recall[strict[f1[strict].argmax()]]) if len(strict) else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="minilm:use,minilm:e5,minilm:minilm-l3,minilm:mpnet,mpnet:use")
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--draws", default="0,1,2")
    parser.add_argument("--maps", default="cca128", help=f"comma-separated, of {', '.join(MAPS)}")
    parser.add_argument("--n-objects", type=int, default=10_000)
    parser.add_argument("--corpus", type=int, default=20_000)
    args = parser.parse_args()
    maps = args.maps.split(",")
    unknown = sorted(set(maps) - set(MAPS))
    if unknown:
        parser.error(f"--maps: unknown {', '.join(unknown)} (known: {', '.join(MAPS)})")
    for pair in args.pairs.split(","):
        a, b = pair.split(":")
        XA, XB = embed_corpus(a, args.corpus), embed_corpus(b, args.corpus)
        rows = {name: [] for name in maps}
        for draw in map(int, args.draws.split(",")):
            # the objects and the split of the link table's draw `draw` (python -m experiments link-table)
            rng = np.random.default_rng(draw)
            objects = np.sort(rng.choice(len(XA), size=args.n_objects, replace=False))
            split = make_partial_overlap(args.n_objects, alpha=args.alpha, n_seeds=15, random_state=draw)
            A, B = Center().apply(XA[objects[split.rows_a]]), Center().apply(XB[objects[split.rows_b]])
            truth, seeds = np.asarray(split.truth), np.asarray(split.seeds)
            for name in maps:
                # A's rows in 5 folds as decoy_links splits them: the true pairs spread evenly
                fold_rng = np.random.default_rng(draw)
                fold_of = fold_rng.integers(0, 5, len(A))
                fold_of[truth[:, 0]] = fold_rng.permutation(len(truth)) % 5
                links, scores = relink_out_of_fold(MAPS[name], A, B, seeds, truth, fold_of, 5)
                rows[name].append(ceiling(links, scores, truth, len(B)))
        for name, runs in rows.items():
            stats = {k: (np.mean([r[k] for r in runs]), np.std([r[k] for r in runs])) for k in runs[0]}
            print(
                f"{a} <-> {b}  alpha {args.alpha}  {name:7s} ({len(runs)} draws)  "
                + "  ".join(f"{k} {100 * m:.1f} ± {100 * s:.1f}" for k, (m, s) in stats.items()),
                flush=True,
            )


if __name__ == "__main__":
    main()
