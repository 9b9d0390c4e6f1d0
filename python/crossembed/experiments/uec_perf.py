"""UEC throughput: exact vs hnswlib + rerank search, ensemble encoding, Laplace fits.

Behind ``crossembed uec-perf`` and ``docs/uec_perf.md``; the documents are
synthetic Gaussians of the size of real kron posteriors
(:func:`synthetic_gaussians`), so the search numbers need no model.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from crossembed.experiments.uec_eval import DEFAULT_MODELS
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex
from crossembed.uec.laplace import LaplaceEmbedder

__all__ = ["benchmark_encode", "benchmark_fit", "benchmark_search", "render_perf_markdown", "synthetic_gaussians"]


# --------------------------------------------------------------------------- throughput
def synthetic_gaussians(
    n: int,
    dim: int,
    *,
    n_clusters: int = 1000,
    intrinsic: int = 48,
    var_scale: float = 0.016,
    seed: int = 0,
    chunk: int = 100_000,
) -> GaussianEmbedding:
    """Clustered unit-norm means (a low-dimensional spread around random centres) with
    per-dimension variances ``var_scale * U(0.5, 1.5)`` - the size of real kron variances."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_clusters, dim))
    basis = np.linalg.qr(rng.normal(size=(dim, intrinsic)))[0].T  # (intrinsic, dim)
    means = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = centers[rng.integers(0, n_clusters, m)] / math.sqrt(dim) * 2.0
        x += rng.normal(size=(m, intrinsic)) @ basis * 0.25 + rng.normal(size=(m, dim)) * (0.02 / math.sqrt(dim))
        means[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    var = (var_scale * rng.uniform(0.5, 1.5, size=(n, dim))).astype(np.float32)
    return GaussianEmbedding(means, var)


def benchmark_search(
    n_docs: int,
    dim: int,
    *,
    n_queries: int = 500,
    k: int = 10,
    reranks: Sequence[int] = (50, 100, 200),
    M: int = 16,
    ef_construction: int = 100,
    seed: int = 0,
    num_threads: Optional[int] = None,
    show_progress_bar: bool = True,
) -> Dict[str, Any]:
    """Exact vs hnswlib+rerank probit search on synthetic Gaussians: QPS and recall@k of the ANN path."""
    allg = synthetic_gaussians(n_docs + n_queries, dim, seed=seed)  # queries share the clusters
    docs, queries = allg[:n_docs], allg[n_docs:]
    del allg
    t0 = time.perf_counter()
    index = UECIndex(docs, M=M, ef_construction=ef_construction, rerank=max(reranks), num_threads=num_threads)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, exact = index.search(queries, k, exact=True, num_threads=num_threads)
    exact_s = time.perf_counter() - t0
    out: Dict[str, Any] = {
        "n_docs": n_docs,
        "dim": dim,
        "n_queries": n_queries,
        "k": k,
        "M": M,
        "ef_construction": ef_construction,
        "build_seconds": build_s,
        "exact_qps": n_queries / exact_s,
        "ann": [],
    }
    for m in tqdm(list(reranks), desc=f"ANN N={n_docs}", disable=not show_progress_bar):
        t0 = time.perf_counter()
        _, ann = index.search(queries, k, rerank=m, num_threads=num_threads)
        s = time.perf_counter() - t0
        recall = float(np.mean([len(set(a) & set(e)) / k for a, e in zip(ann, exact)]))
        out["ann"].append(
            {
                "rerank": m,
                "ef": 2 * m,
                "qps": n_queries / s,
                "recall@10_vs_exact": recall,
                "speedup": (n_queries / s) / out["exact_qps"],
            }
        )
    return out


def benchmark_encode(
    models: Sequence[str] = DEFAULT_MODELS, *, n_texts: int = 256, num_threads: Optional[int] = None, seed: int = 0
) -> Dict[str, Any]:
    """Texts/s of :meth:`UECEnsemble.encode` (K real models + Laplace heads), uncached WordNet glosses."""
    from crossembed.data.wordnet import synsets_with_examples
    from crossembed.encoders import load_encoder

    syn = synsets_with_examples("noun")
    rng = np.random.default_rng(seed)
    texts = [syn[i].gloss for i in rng.permutation(len(syn))[: 2 * n_texts]]
    fit, timed = texts[:n_texts], texts[n_texts:]
    embedders = []
    for m in models:
        enc = load_encoder(m, **({"num_threads": num_threads} if num_threads else {}))
        x = enc.encode(fit, role="passage")
        embedders.append(LaplaceEmbedder(enc).fit_embeddings(x[::2], x[1::2]))  # posterior only needs to exist
    ens = UECEnsemble(embedders)
    t0 = time.perf_counter()
    ens.encode(timed, role="query", show_progress_bar=False)
    s = time.perf_counter() - t0
    return {"models": list(models), "n_texts": n_texts, "seconds": s, "texts_per_s": n_texts / s}


def benchmark_fit(n_pairs: int = 10_000, dim: int = 384, *, seed: int = 0) -> List[Dict[str, Any]]:
    """Seconds to fit each posterior form on ``n_pairs`` synthetic pair embeddings (encoding excluded)."""
    g = synthetic_gaussians(2 * n_pairs, dim, seed=seed)
    A, P = g.mean[:n_pairs], g.mean[n_pairs:]
    out = []
    for hessian in ("kron", "diag"):
        for curvature in ("ggn", "ef"):
            e = LaplaceEmbedder(None, hessian=hessian, curvature=curvature).fit_embeddings(A, P)
            out.append(
                {
                    "hessian": hessian,
                    "curvature": curvature,
                    "n_pairs": n_pairs,
                    "dim": dim,
                    "seconds": e.fit_seconds_,
                    "prior_precision": e.prior_precision_,
                }
            )
    return out


def render_perf_markdown(
    runs: Sequence[Dict[str, Any]],
    encode: Optional[Dict[str, Any]] = None,
    *,
    fits: Sequence[Dict[str, Any]] = (),
    command: str = "",
) -> str:
    """``docs/uec_perf.md`` from :func:`benchmark_search` runs (and optionally encode and fit timings)."""
    lines = [
        "# UEC throughput",
        "",
        "Synthetic clustered unit-norm means with per-dimension variances of the size of real kron posteriors "
        "(`crossembed.experiments.uec_perf.synthetic_gaussians`); 1 query batch, hnswlib M=16, ef_construction=100; "
        "recall@10 of the hnswlib + exact-rerank path against the exact probit top-10.",
        "",
        "| N docs | D | build s | exact q/s | rerank M (ef=2M) | ANN q/s | speed-up | ANN recall@10 vs exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        for a in r["ann"]:
            lines.append(
                f"| {r['n_docs']:,} | {r['dim']} | {r['build_seconds']:.0f} | {r['exact_qps']:.1f} | {a['rerank']} | "
                f"{a['qps']:.0f} | {a['speedup']:.0f}x | {a['recall@10_vs_exact']:.4f} |"
            )
    lines.append("")
    if fits:
        lines += [
            "Laplace fit time (pair embeddings given, batch 64, prior by marginal likelihood):",
            "",
            "| posterior | curvature | pairs | D | seconds |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {f['hessian']} | {f['curvature']} | {f['n_pairs']:,} | {f['dim']} | {f['seconds']:.1f} |" for f in fits
        ]
        lines.append("")
    if encode:
        lines += [
            f"Ensemble encode ({', '.join(encode['models'])}, Laplace heads, uncached): "
            f"{encode['texts_per_s']:.1f} texts/s ({encode['n_texts']} WordNet glosses in {encode['seconds']:.1f} s).",
            "",
        ]
    if command:
        lines += [f"Produced by `{command}`.", ""]
    return "\n".join(lines)
