"""Relational starts for a seed search on real encoder pairs: what each gives before any linker runs.

GEH without seeds needs about 15 right pairs. This study measures, on one
encoder pair of the WordNet gloss corpus (``experiments.corpora``), the
relational signals such a search could start from, with the truth known:

* ``cosine_corr``: correlation of the two encoders' cosine matrices over the
  same ``--match-rows`` texts (centred unit rows), the signal every relational
  matching lives on;
* ``vecmap_init``: precision of the mutual CSLS pairs of VecMap's
  unsupervised start (each row's sorted similarities, ``sqrt(X X')``) on those
  texts, every row partnered;
* ``gw_partnered``: entropic Gromov-Wasserstein (square loss, epsilon 0.01 of
  the largest cost, 30 steps of 50 Sinkhorn scalings) between the two cosine
  matrices of the same texts, the share of rows whose most-coupled partner is
  right, then ``gw_partnered_refined``: orthogonal Procrustes from the
  coupling's weighted means in each side's 128 principal directions,
  refined 5 times on the best-scored half of the mutual CSLS pairs of
  4,000 other texts (every row partnered): the precision of those pairs and of
  their 15 best;
* ``gw_disjoint_refined``: the same from a matching of *different* texts on
  the two sides (a seed search cannot pick partnered samples: it does not
  know the pairs);
* ``start_needed``: how good a start must be: per share ``s`` of
  ``--start-shares``, Procrustes from the same texts' rows paired right for a
  share ``s`` of them and at random otherwise, refined as above;
* ``dense_overlap``: the share of texts among the ``--match-rows`` densest
  (mean cosine to their 50 nearest) of 6,000 on one side that are also among
  the densest on the other (a random pick shares ``match_rows / 6000``).

    python -m experiments.studies.seed_search_relational --pair minilm:use --draws 2 \\
        --out docs/seed_search_relational.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from crossembed import kernels
from crossembed.cli.options import write_file
from crossembed.linking import Center
from experiments.corpora import embed_corpus

_CENTER = Center()
_DIMS, _REFINE, _HELD_OUT, _DENSE_POOL = 128, 5, 4000, 6000


def unit(X: np.ndarray) -> np.ndarray:
    return (X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def entropic_gw(CA: np.ndarray, CB: np.ndarray, epsilon: float = 0.01, steps: int = 30) -> np.ndarray:
    """Entropic GW coupling of two similarity matrices, uniform marginals, from the product coupling."""
    T = np.full((len(CA), len(CB)), 1.0 / (len(CA) * len(CB)))
    for _ in range(steps):
        G = -2.0 * (CA @ T @ CB)  # the square loss linearised at T; its other terms are constant
        K = np.exp(-(G - G.min()) / (epsilon * np.abs(G).max()))
        u, v = np.ones(len(CA)), np.ones(len(CB))
        for _ in range(50):
            u = 1.0 / (len(CA) * (K @ v))
            v = 1.0 / (len(CB) * (K.T @ u))
        T = u[:, None] * K * v[None, :]
    return T


def orthogonal(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    U, _, Vt = np.linalg.svd(X.astype(np.float64).T @ Y.astype(np.float64))
    return (U @ Vt).astype(np.float32)


def mutual(XA: np.ndarray, XB: np.ndarray) -> np.ndarray:
    return kernels.csls_mutual_topk(XA, XB, k=1, csls_k=10)[0]


def refined(T: np.ndarray, MA: np.ndarray, MB: np.ndarray, EA: np.ndarray, EB: np.ndarray) -> dict:
    """Procrustes from the coupling ``T`` of the matched rows ``MA``, ``MB``, refined on the partnered rows
    ``EA[i] <-> EB[i]``; all four in their side's principal directions."""
    W = orthogonal(MA, (T / T.sum(axis=1, keepdims=True)) @ MB)
    for _ in range(_REFINE):
        pairs = mutual(unit(EA @ W), EB)
        best = pairs[: len(pairs) // 2]
        W = orthogonal(EA[best[:, 0]], EB[best[:, 1]])
    pairs = mutual(unit(EA @ W), EB)
    right = pairs[:, 0] == pairs[:, 1]
    return {"pairs": int(len(pairs)), "precision": float(right.mean()), "top15": float(right[:15].mean())}


def dense(X: np.ndarray, n: int) -> np.ndarray:
    S = X @ X.T
    return np.argsort(-np.partition(S, -51, axis=1)[:, -51:].mean(axis=1))[:n]


def one_draw(XA: np.ndarray, XB: np.ndarray, n: int, draw: int, shares=()) -> dict:
    rng = np.random.default_rng(draw)
    ids = rng.permutation(len(XA))
    held, match, other = ids[:_HELD_OUT], ids[_HELD_OUT : _HELD_OUT + n], ids[_HELD_OUT + n : _HELD_OUT + 2 * n]
    A, B = _CENTER.apply(XA), _CENTER.apply(XB)
    VA = np.linalg.svd(A[held].astype(np.float64), full_matrices=False)[2][:_DIMS].T
    VB = np.linalg.svd(B[held].astype(np.float64), full_matrices=False)[2][:_DIMS].T
    pa, pb = (lambda r: unit(A[r] @ VA)), (lambda r: unit(B[r] @ VB))
    CA, CB = (A[match] @ A[match].T).astype(np.float64), (B[match] @ B[match].T).astype(np.float64)
    out = {"draw": draw, "cosine_corr": float(np.corrcoef(CA.ravel(), CB.ravel())[0, 1])}
    init = mutual(_sorted_similarities(A[match]), _sorted_similarities(B[match]))
    out["vecmap_init"] = float(np.mean(init[:, 0] == init[:, 1]))
    T = entropic_gw(CA, CB)
    out["gw_partnered"] = float(np.mean(T.argmax(axis=1) == np.arange(n)))
    out["gw_partnered_refined"] = refined(T, pa(match), pb(match), pa(held), pb(held))
    CO = (B[other] @ B[other].T).astype(np.float64)
    out["gw_disjoint_refined"] = refined(entropic_gw(CA, CO), pa(match), pb(other), pa(held), pb(held))
    out["start_needed"] = {}
    for share in shares:
        wrong = rng.random(n) >= share
        partner = np.arange(n)
        partner[wrong] = rng.permutation(partner[wrong])
        out["start_needed"][str(share)] = refined(np.eye(n)[partner], pa(match), pb(match), pa(held), pb(held))
    pool = ids[:_DENSE_POOL]
    shared = np.intersect1d(pool[dense(A[pool], n)], pool[dense(B[pool], n)])
    out["dense_overlap"] = len(shared) / n
    return out


def _sorted_similarities(X: np.ndarray) -> np.ndarray:
    U, s, _ = np.linalg.svd(X.astype(np.float64), full_matrices=False)
    return _CENTER.apply(-np.sort(-((U * s) @ U.T), axis=1).astype(np.float32))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="minilm:use", help="encA:encB")
    p.add_argument("--corpus", type=int, default=20000, help="glosses embedded")
    p.add_argument("--match-rows", type=int, default=1000, help="rows a side of the matchings")
    p.add_argument("--draws", type=int, default=2)
    p.add_argument("--start-shares", default="0.02,0.05,0.1,0.2", help="right shares of the simulated starts")
    p.add_argument("--out", default=None, help="write the records as JSON here")
    args = p.parse_args()
    a, b = args.pair.split(":")
    XA, XB = (
        embed_corpus(a, args.corpus, show_progress_bar=False),
        embed_corpus(b, args.corpus, show_progress_bar=False),
    )
    records = []
    for draw in range(args.draws):
        records.append(
            {
                "pair": args.pair,
                **one_draw(XA, XB, args.match_rows, draw, [float(x) for x in args.start_shares.split(",")]),
            }
        )
        print(json.dumps(records[-1]), flush=True)
    if args.out:
        write_file(args.out, json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
