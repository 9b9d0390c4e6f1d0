"""UEC throughput: exact vs HNSW + rerank search, ensemble encoding, Laplace fits.

Behind ``python -m experiments uec-perf`` and ``docs/uec_perf.md``; the documents are
synthetic Gaussians of the size of real kron posteriors
(:func:`synthetic_gaussians`), so the search numbers need no model.
"""

from __future__ import annotations

import gc
import io
import math
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed import kernels
from crossembed.cli.options import write_file
from crossembed.cli.serve_bench import synthetic_chunks, synthetic_gaussians
from crossembed.uec.ensemble import UECEnsemble
from crossembed.uec.gaussian import GaussianEmbedding
from crossembed.uec.index import UECIndex
from crossembed.uec.index_config import IndexConfig
from crossembed.uec.laplace import LaplaceEmbedder
from crossembed.uec.rerank import merge_topk
from experiments._records import read_checked
from experiments.uec_eval import DEFAULT_MODELS

__all__ = [
    "RUNS_SHAPE",
    "benchmark_encode",
    "benchmark_fit",
    "benchmark_search",
    "load_runs",
    "parse_sizes",
    "render_perf_markdown",
]


# --------------------------------------------------------------------------- inputs
#: What :func:`render_perf_markdown` reads of a saved ``--json`` output (see ``_records``).
RUNS_SHAPE = {
    "search": [
        {
            "n_docs": "int",
            "dim": "int",
            "dtype": "str",
            "var_scale": "number",
            "M": "int",
            "ef_construction": "int",
            "build_seconds": "number",
            "build_peak_rss_bytes": "number",
            "store_bytes_per_doc": "number",
            "graph_bytes_per_doc": "number",
            "exact_qps": "number",
            "exact_cold_qps": "number",
            "search_peak_rss_bytes": "number",
            "index_rss_bytes?": "number",
            "raw_mean_bytes?": "number",
            "file_bytes?": "number",
            "float16_exact_recall@10?": "number",
            "ann": [
                {"rerank": "int", "ef": "int", "qps": "number", "speedup": "number", "recall@10_vs_exact": "number"}
            ],
        }
    ]
}


def load_runs(path, source: str = "--from-json") -> List[Dict[str, Any]]:
    """The search runs of an earlier ``--json`` output, shape-checked (``source`` names the file in errors)."""
    return read_checked(path, source, RUNS_SHAPE)["search"]


_MAX_DOCS, _MAX_DIM = 2**40, 65536


def _whole_number(text: str) -> Optional[int]:
    """``"1000"`` or ``"1e5"`` as an int; None for anything else (fractions, nan, inf, words)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def parse_sizes(text: str, source: str = "--sizes", *, min_docs: int = 10) -> List[Tuple[int, int]]:
    """``"100000x1152,1e6"`` -> ``[(100000, 1152), (1000000, 384)]``: documents x dimension (default 384).

    ``min_docs <= N <= 2**40`` (the k of the benchmark up to what any machine could index) and
    ``1 <= D <= 65536``; an empty list is allowed.
    """
    out = []
    for spec in (item.strip() for item in text.split(",")):
        if not spec:
            continue
        n_text, _, d_text = spec.partition("x")
        n, d = _whole_number(n_text.strip()), _whole_number(d_text.strip() or "384")
        if n is None or d is None:
            raise ValueError(f"{source}: {spec!r} is not NxD with whole numbers (e.g. 100000x384)")
        if not min_docs <= n <= _MAX_DOCS or not 1 <= d <= _MAX_DIM:
            raise ValueError(f"{source}: {spec!r} needs {min_docs} <= N <= 2**40 and 1 <= D <= {_MAX_DIM}")
        out.append((n, d))
    return out


# --------------------------------------------------------------------------- throughput
def _peak_rss() -> int:
    """Peak resident memory of this process so far, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss() -> int:
    """Resident memory of this process now, bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _file_bytes(index: UECIndex) -> int:
    """Size of the index's saved file (written to a temporary directory and deleted)."""
    with tempfile.TemporaryDirectory() as tmp:
        return index.save(Path(tmp) / "index.uec").stat().st_size


def _recall(got: np.ndarray, expected: np.ndarray) -> float:
    k = expected.shape[1]
    return float(np.mean([len(set(a) & set(e)) / k for a, e in zip(got, expected)]))


def _float16_exact(index: UECIndex, queries: GaussianEmbedding, k: int) -> np.ndarray:
    """Exact top-``k`` ids over the index's documents rounded to float16 (the recall cost of dtype='float16')."""
    ids, scores, found = index.ids, [], []
    for s in range(0, len(ids), 16384):
        part = index.get_docs(ids[s : s + 16384])
        half = kernels.ProbitDocs(
            part.mean.astype(np.float16).astype(np.float32), part.var.astype(np.float16).astype(np.float32)
        )
        sc, pos = half.top_k(queries.mean, queries.var, min(k, len(part)))
        scores.append(sc)
        found.append(ids[s : s + 16384][pos])
    return merge_topk(np.concatenate(scores, axis=1), np.concatenate(found, axis=1), k)[1]


def _index_in_chunks(
    chunks: Iterator[GaussianEmbedding], n_docs: int, options: Dict[str, Any], show_progress_bar: bool
) -> Tuple[UECIndex, GaussianEmbedding]:
    """Index the first ``n_docs`` rows of ``chunks`` (room reserved once for all); the rest are the queries."""
    index, queries, done = None, [], 0
    bar = tqdm(total=n_docs, desc=f"build N={n_docs}", unit="doc", disable=not show_progress_bar)
    for part in chunks:
        take = min(len(part), n_docs - done)
        if take:
            docs = part[:take]
            if index is None:
                index = UECIndex(docs, **options)
                index.reserve(n_docs)
            else:
                index.add(docs)
            done += take
            bar.update(take)
        if take < len(part):
            queries.append(part[take:])
        del part
    bar.close()
    q = GaussianEmbedding(np.concatenate([p.mean for p in queries]), np.concatenate([p.var for p in queries]))
    return index, q


def _saved_name(n_docs: int, dim: int, dtype: str, var_scale: float, M: int, ef_construction: int, seed: int) -> str:
    return f"uec_perf_{n_docs}x{dim}_{dtype}_var{var_scale:g}_M{M}_efc{ef_construction}_seed{seed}.uec"


def _run_file(path: Path) -> Path:
    return path.with_name(path.name + ".run")


def _save(path: Path, index: UECIndex, q: GaussianEmbedding, built: Dict[str, Any]) -> None:
    """The index, and beside it (``<path>.run``, an .npz) its queries and build record, each written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    index.save(path)
    buf = io.BytesIO()
    np.savez(buf, mean=q.mean, var=q.var, **{key: np.float64(value) for key, value in built.items()})
    write_file(_run_file(path), buf.getvalue())


def _load_saved(path: Path, n_docs: int, num_threads, mmap: bool) -> Tuple[UECIndex, GaussianEmbedding, Dict[str, Any]]:
    """A saved index (``mmap``: its store memory-mapped), its queries and its build record (the synthetic rows
    are not generated again)."""
    try:
        with np.load(_run_file(path)) as run:
            built = {key: float(run[key]) for key in ("build_seconds", "build_peak_rss_bytes")}
            q = GaussianEmbedding(run["mean"], run["var"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"index_dir: {_run_file(path)} is missing or unreadable ({exc}); delete {path} to rebuild"
        ) from exc
    index = UECIndex.load(path, num_threads=num_threads, mmap=mmap)
    if len(index) != n_docs:
        raise ValueError(f"index_dir: {path} holds {len(index)} documents, expected {n_docs}; delete it to rebuild")
    return index, q, built


def _built_index(
    chunks: Iterator[GaussianEmbedding],
    n_docs: int,
    options: Dict[str, Any],
    saved: Optional[Path],
    progress: bool,
    mmap: bool,
) -> Tuple[UECIndex, GaussianEmbedding, Dict[str, Any]]:
    """The index, the queries and the build record: read from ``saved`` when it exists (``mmap``: its store
    memory-mapped), else built (and saved there)."""
    if saved is not None and saved.exists():
        return _load_saved(saved, n_docs, options["num_threads"], mmap)
    t0 = time.perf_counter()
    index, q = _index_in_chunks(chunks, n_docs, options, progress)
    built = {"build_seconds": time.perf_counter() - t0, "build_peak_rss_bytes": _peak_rss()}
    if saved is not None:
        _save(saved, index, q, built)
    return index, q, built


def _memory_record(index: UECIndex, n_docs: int, dim: int) -> Dict[str, Any]:
    """The index's own account of its memory, per document, and the raw float32 means it holds."""
    mem = index.memory_usage()
    return {
        "store_bytes_per_doc": mem["store"] / n_docs,
        "graph_bytes_per_doc": mem["graph"] / n_docs,
        "panel_bytes": mem["panels"],
        "raw_mean_bytes": 4 * n_docs * dim,
    }


def _time_exact(index: UECIndex, q: GaussianEmbedding, k: int, num_threads) -> Tuple[np.ndarray, float, float]:
    """Exact top-``k`` ids, the first call's seconds, and a second call's when blocks are cached (else the first)."""
    t0 = time.perf_counter()
    _, exact = index.search(q, k, exact=True, num_threads=num_threads)
    cold_s = time.perf_counter() - t0
    warm_s = cold_s
    if index.memory_usage()["panels"]:  # prepared blocks cached: time the kernel itself
        t0 = time.perf_counter()
        index.search(q, k, exact=True, num_threads=num_threads)
        warm_s = time.perf_counter() - t0
    return exact, cold_s, warm_s


def _time_ann(index: UECIndex, q: GaussianEmbedding, exact: np.ndarray, settings, num_threads) -> Dict[str, Any]:
    """Q/s and recall@k against ``exact`` of one ``(rerank, ef)`` setting."""
    m, ef = settings
    t0 = time.perf_counter()
    _, ann = index.search(q, exact.shape[1], rerank=m, ef=ef, num_threads=num_threads)
    s = time.perf_counter() - t0
    return {"rerank": m, "ef": ef, "qps": len(q) / s, "recall@10_vs_exact": _recall(ann, exact)}


def benchmark_search(
    n_docs: int,
    dim: int,
    *,
    n_queries: int = 500,
    k: int = 10,
    reranks: Sequence[int] = (50, 100, 200),
    efs: Optional[Sequence[int]] = None,
    M: int = 32,
    ef_construction: int = 200,
    dtype: str = "float32",
    var_scale: float = 0.0,
    panel_cache_bytes: int = 6 << 30,
    seed: int = 0,
    num_threads: Optional[int] = None,
    show_progress_bar: bool = True,
    index_dir=None,
    mmap: bool = False,
) -> Dict[str, Any]:
    """Exact vs HNSW + rerank probit search on synthetic Gaussians: build time, QPS, recall@k, memory.

    Documents are generated and indexed in chunks of 25,000 (room for all of
    them reserved once), so only the store and the graph ever hold all of them.
    ``efs[i]`` is the HNSW breadth for ``reranks[i]`` (default ``2 * rerank``).
    With the prepared blocks of all documents within ``panel_cache_bytes``
    they are kept (both paths score on them) and exact QPS is that of a second
    call (the kernel's throughput); else both paths prepare per call and exact
    QPS is the first call's. Peak memory is this process's peak RSS (run one
    size per process for per-size figures). ``index_dir`` (default None: build
    every time) keeps built indexes: one built with the same size, dtype,
    variances, graph and seed is read from there (its recorded build time and
    build peak reported), a new one is saved there; ``mmap`` reads it with
    ``UECIndex.load(mmap=True)`` (the float32 means of an int8 or bf16 index
    then stay in the file: "index resident" is what the load made resident).
    """
    efs = [2 * m for m in reranks] if efs is None else list(efs)
    if len(efs) != len(reranks):
        raise ValueError(f"efs must have one value per rerank ({len(reranks)}), got {len(efs)}")
    chunks = synthetic_chunks(n_docs + n_queries, dim, var_scale=var_scale, seed=seed, chunk=25_000)
    config = IndexConfig(
        M=M, ef_construction=ef_construction, rerank=max(reranks), dtype=dtype, panel_cache_bytes=panel_cache_bytes
    )
    options = {"config": config, "num_threads": num_threads}
    rss0, now0 = _peak_rss(), _rss()
    name = _saved_name(n_docs, dim, dtype, var_scale, M, ef_construction, seed)
    saved = None if index_dir is None else Path(index_dir) / name
    index, q, built = _built_index(chunks, n_docs, options, saved, show_progress_bar, mmap)
    gc.collect()
    index_rss = _rss() - now0 - q.mean.nbytes - q.var.nbytes  # what building left resident: the index
    exact, exact_cold_s, exact_s = _time_exact(index, q, k, num_threads)
    out: Dict[str, Any] = {
        **dict(n_docs=n_docs, dim=dim, dtype=dtype, var_scale=var_scale, n_queries=n_queries, k=k, M=M),
        "ef_construction": ef_construction,
        "mmap": bool(mmap and saved is not None and saved.exists()),
        "build_seconds": built["build_seconds"],
        "exact_qps": n_queries / exact_s,
        "exact_cold_qps": n_queries / exact_cold_s,
        **_memory_record(index, n_docs, dim),
        "build_peak_rss_bytes": built["build_peak_rss_bytes"],
        "start_peak_rss_bytes": rss0,
        "index_rss_bytes": index_rss,
        "ann": [],
    }
    for setting in tqdm(list(zip(reranks, efs)), desc=f"ANN N={n_docs}", disable=not show_progress_bar):
        row = _time_ann(index, q, exact, setting, num_threads)
        out["ann"].append({**row, "speedup": row["qps"] / out["exact_qps"]})
    out["search_peak_rss_bytes"] = _peak_rss()
    if n_docs <= 200_000:
        out["file_bytes"] = _file_bytes(index)
    if dtype == "float32" and n_docs <= 200_000:
        out["float16_exact_recall@10"] = _recall(_float16_exact(index, q, k), exact)
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
    """Seconds to fit each posterior form on ``n_pairs`` synthetic pair embeddings (encoding excluded).

    The query head (a separate fit, ``docs/uec.md``) is left out: this times the posterior forms.
    """
    g = synthetic_gaussians(2 * n_pairs, dim, seed=seed)
    A, P = g.mean[:n_pairs], g.mean[n_pairs:]
    out = []
    for hessian in ("kron", "diag"):
        for curvature in ("ggn", "ef"):
            e = LaplaceEmbedder(None, hessian=hessian, curvature=curvature, query_head=False).fit_embeddings(A, P)
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


def _memory_note(r: Dict[str, Any]) -> str:
    """One run's memory figures for the note under the table."""
    gb = 1 << 30
    note = (
        f"{r['n_docs']:,} x {r['dim']} ({r['dtype']}, var {r['var_scale']:g}): "
        f"search peak RSS {r['search_peak_rss_bytes'] / gb:.1f} GiB"
    )
    if "index_rss_bytes" in r:
        note += (
            f", index resident{' (loaded memory-mapped)' if r.get('mmap') else ''} "
            f"{r['index_rss_bytes'] / gb:.2f} GiB = {r['index_rss_bytes'] / r['raw_mean_bytes']:.2f}x the raw float32 means"
        )
    if "file_bytes" in r:
        note += f", saved file {r['file_bytes'] / r['raw_mean_bytes']:.2f}x"
    if "float16_exact_recall@10" in r:
        note += f", float16 store keeps exact recall@10 {r['float16_exact_recall@10']:.4f}"
    return note


def render_perf_markdown(
    runs: Sequence[Dict[str, Any]],
    encode: Optional[Dict[str, Any]] = None,
    *,
    fits: Sequence[Dict[str, Any]] = (),
    command: str = "",
) -> str:
    """``docs/uec_perf.md`` from :func:`benchmark_search` runs (and optionally encode and fit timings)."""
    gb = 1 << 30
    lines = [
        "# UEC throughput",
        "",
        "Synthetic documents, stated as such: clustered unit-norm means (1,000 random centres plus a 48-dimensional "
        "spread) with per-dimension variances `var` * U(0.5, 1.5) (0.016 is the size of real kron posteriors; "
        "*none*: no variances, as the default ensemble gives) "
        "(`crossembed.cli.serve_bench.synthetic_chunks`); queries are more rows of the same distribution, "
        "searched in one batch. Recall@10 is that of the HNSW + exact-rerank path against the exact probit "
        "top-10. Exact q/s is the fused kernel over packed blocks (cached when they fit, else packed per call: "
        "*cold*).",
        "",
        "| N docs | D | store | var | M / ef_c | build s | build peak RSS GiB | bytes/doc store + graph | exact q/s "
        "| rerank | ef | ANN q/s | speed-up | recall@10 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        per_doc = f"{r['store_bytes_per_doc']:,.0f} + {r['graph_bytes_per_doc']:,.0f}"
        cold = "" if r["exact_qps"] != r["exact_cold_qps"] else " (cold)"
        var = "none" if r["var_scale"] == 0 else f"{r['var_scale']:g}"
        for a in r["ann"]:
            lines.append(
                f"| {r['n_docs']:,} | {r['dim']} | {r['dtype']} | {var} | {r['M']} / {r['ef_construction']} | "
                f"{r['build_seconds']:.0f} | {r['build_peak_rss_bytes'] / gb:.1f} | {per_doc} | "
                f"{r['exact_qps']:.1f}{cold} | {a['rerank']} | {a['ef']} | {a['qps']:.0f} | {a['speedup']:.1f}x | "
                f"{a['recall@10_vs_exact']:.4f} |"
            )
    lines.append("")
    peaks = [_memory_note(r) for r in runs]
    if peaks:
        lines += ["Peak memory and float16 storage: " + "; ".join(peaks) + ".", ""]
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
