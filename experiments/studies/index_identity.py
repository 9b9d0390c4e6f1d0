"""Do two builds of crossembed return the same UECIndex results on real data? (the default ensemble).

Three steps, so that the searching can run under another checkout of the library:

``encode``
    Fits the library's default ensemble on one real task exactly as ``python -m experiments uec-eval`` does
    (WordNet noun example -> gloss, or the FreeDict multilingual word -> gloss task; models
    minilm, minilm-l3, e5; kron head Laplace posteriors with query heads fitted on the task's fit
    pairs; ``UECEnsemble(embedders)``; seed 0), combines the documents as passages and the
    evaluated queries as queries, checks that every variance is 0 and saves the means and
    variances of both to an ``.npz``.
``search``
    Loads that ``.npz`` with whatever ``crossembed`` is on the path, builds
    ``UECIndex(docs, ensemble=None, num_threads=1)`` with the library's defaults (M, ef_construction,
    rerank, dtype, seed; one thread, so the graph is deterministic) and searches the queries for ``k``
    results, by brute force (``exact=True``) and by the default ANN path; saves ids and scores, and the
    graph's ``rerank`` candidates per query before the rerank (:meth:`UECIndex.candidates`), to an ``.npz``.
``compare``
    Compares two ``search`` outputs: rows whose ids are identical, ids as sets, score bits, the
    largest score difference, for each differing row whether a near-tie explains it, the graph
    candidates, and each build's ANN ids against its own brute force.

Reproduce (from the repository root, an older tree checked out under OLD with its ``_core`` built)::

    python -m experiments.studies.index_identity encode wordnet /tmp/bitcheck/wordnet.npz
    python -m experiments.studies.index_identity search /tmp/bitcheck/wordnet.npz /tmp/bitcheck/wordnet-new.npz
    python -m experiments.studies.index_identity search /tmp/bitcheck/wordnet.npz /tmp/bitcheck/wordnet-old.npz
    python -m experiments.studies.index_identity compare /tmp/bitcheck/wordnet-old.npz /tmp/bitcheck/wordnet-new.npz

and the same with ``freedict``. Encoding reads (and fills) the embedding cache of ``uec-eval``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time

import numpy as np

MODES = ("exact", "ann")


def encode(task_name: str, out: str, seed: int = 0, num_threads: int = 1) -> None:
    """Default-ensemble passage and query Gaussians of one task, saved to ``out``."""
    from crossembed.uec import LaplaceEmbedder, UECEnsemble
    from experiments.tasks import freedict_task, wordnet_task
    from experiments.uec_eval import DEFAULT_MODELS, embed_task

    t0 = time.perf_counter()
    task = freedict_task(seed=seed) if task_name == "freedict" else wordnet_task(seed=seed)
    models = list(DEFAULT_MODELS)
    emb = embed_task(task, models, num_threads=num_threads, show_progress_bar=False)
    embedders = [  # as uec_eval._fit_forms fits the default's (kron) posteriors
        LaplaceEmbedder(m, hessian="kron", random_state=seed, query_head=True).fit_embeddings(
            emb.fit_anchors[m], emb.fit_positives[m], show_progress_bar=False
        )
        for m in models
    ]
    ens = UECEnsemble(embedders)
    if ens.needs_reference:
        raise RuntimeError("the default ensemble is expected to need no reference collection")
    ev = task.eval_queries
    q = ens.combine([e.transform(emb.queries[m][ev]) for e, m in zip(embedders, models)], role="query")
    d = ens.combine([e.transform(emb.docs[m]) for e, m in zip(embedders, models)], role="passage")
    nonzero = {"query": int(np.count_nonzero(q.var)), "passage": int(np.count_nonzero(d.var))}
    info = {
        "task": task.name,
        "models": models,
        "n_docs": len(d),
        "n_queries": len(q),
        "dim": d.dim,
        "nonzero_variances": nonzero,
        "ensemble": type(ens.routing).__name__ + " / " + type(ens.mixing).__name__ + " / " + type(ens.scoring).__name__,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    np.savez(out, doc_mean=d.mean, doc_var=d.var, query_mean=q.mean, query_var=q.var, info=json.dumps(info))
    print(json.dumps(info))
    if any(nonzero.values()):
        raise SystemExit("the default ensemble emitted non-zero variances")


def search(data: str, out: str, k: int = 10) -> None:
    """ids and scores of the default UECIndex over the saved documents, exact and ANN."""
    import crossembed
    from crossembed.uec import GaussianEmbedding, UECIndex

    z = np.load(data)
    docs = GaussianEmbedding(z["doc_mean"], z["doc_var"])
    queries = GaussianEmbedding(z["query_mean"], z["query_var"])
    t0 = time.perf_counter()
    index = UECIndex(docs, ensemble=None, num_threads=1)
    build = time.perf_counter() - t0
    result, seconds = {}, {"build": round(build, 2)}
    for mode in MODES:
        t0 = time.perf_counter()
        result[f"{mode}_scores"], result[f"{mode}_ids"] = index.search(queries, k, exact=mode == "exact")
        seconds[mode] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    result["candidates"] = index.candidates(queries, index.config.rerank)  # the graph's own answer, before the rerank
    seconds["candidates"] = round(time.perf_counter() - t0, 2)
    info = {
        "library": crossembed.__file__,
        "has_variance": getattr(index, "has_variance", None),  # absent in builds that always store variances
        "graph": "crossembed.ann.MeanGraph" if importlib.util.find_spec("crossembed.ann") else "hnswlib",
        "n_docs": len(docs),
        "n_queries": len(queries),
        "k": k,
        "seconds": seconds,
    }
    np.savez(out, info=json.dumps(info), **result)
    print(json.dumps(info))


def _near_tie(scores: np.ndarray, row: int, gap: float) -> bool:
    """Whether row ``row`` of a (Q, k) score matrix has two neighbours within ``gap`` of each other."""
    return bool(np.any(np.abs(np.diff(scores[row].astype(np.float64))) <= gap))


def compare(a_path: str, b_path: str) -> dict:
    """Rows of identical ids, identical id sets and identical score bits between two ``search`` outputs."""
    a, b = np.load(a_path), np.load(b_path)
    report = {"a": json.loads(str(a["info"])), "b": json.loads(str(b["info"]))}
    for mode in MODES:
        ia, ib = a[f"{mode}_ids"], b[f"{mode}_ids"]
        sa, sb = a[f"{mode}_scores"], b[f"{mode}_scores"]
        same = (ia == ib).all(axis=1)
        same_set = np.array([set(x) == set(y) for x, y in zip(ia.tolist(), ib.tolist())])
        bits = (sa.view(np.uint32) == sb.view(np.uint32)).all(axis=1)
        diff_rows = np.flatnonzero(~same)
        report[mode] = {
            "rows": int(len(ia)),
            "identical_id_rows": int(same.sum()),
            "identical_id_sets": int(same_set.sum()),
            "identical_score_bit_rows": int(bits.sum()),
            "max_abs_score_diff": float(np.abs(sa.astype(np.float64) - sb.astype(np.float64)).max()),
            "max_abs_score_diff_same_ids": float(
                np.abs(sa[same].astype(np.float64) - sb[same].astype(np.float64)).max(initial=0.0)
            ),
            "differing_rows": [
                {
                    "row": int(r),
                    "a_ids": ia[r].tolist(),
                    "b_ids": ib[r].tolist(),
                    "a_scores": sa[r].tolist(),
                    "b_scores": sb[r].tolist(),
                    "near_tie_1e-6": _near_tie(sa, r, 1e-6),
                }
                for r in diff_rows[:20]
            ],
        }
    ca, cb = a["candidates"], b["candidates"]
    report["candidates"] = {
        "rows": int(len(ca)),
        "identical_rows": int((ca == cb).all(axis=1).sum()),
        "identical_sets": int(sum(set(x) == set(y) for x, y in zip(ca.tolist(), cb.tolist()))),
    }
    for name, z in (("a", a), ("b", b)):  # each build's ANN against its own brute force
        ann, exact = z["ann_ids"], z["exact_ids"]
        report[name]["ann_ids_equal_exact_rows"] = int((ann == exact).all(axis=1).sum())
        hits = [len(set(x) & set(y)) for x, y in zip(ann.tolist(), exact.tolist())]
        report[name]["ann_recall_vs_exact"] = float(np.mean(hits) / exact.shape[1])
    print(json.dumps(report, indent=1))
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("encode", help="fit the default ensemble on a task and save its Gaussians")
    e.add_argument("task", choices=("wordnet", "freedict"))
    e.add_argument("out")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--num-threads", type=int, default=1, help="encoder threads")
    s = sub.add_parser("search", help="search the saved Gaussians with the crossembed on the path")
    s.add_argument("data")
    s.add_argument("out")
    s.add_argument("-k", type=int, default=10)
    c = sub.add_parser("compare", help="compare two search outputs")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args(argv)
    if args.mode == "encode":
        encode(args.task, args.out, seed=args.seed, num_threads=args.num_threads)
    elif args.mode == "search":
        search(args.data, args.out, k=args.k)
    else:
        compare(args.a, args.b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
