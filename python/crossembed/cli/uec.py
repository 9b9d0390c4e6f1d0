"""CLI: ``encode``, ``index build|search``, ``uec-eval`` and ``uec-perf``."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path

import numpy as np

from crossembed._validation import INT_MAX
from crossembed.cli.options import (
    add_num_threads,
    add_output_flags,
    add_seed,
    command_line,
    float_arg,
    int_arg,
    parse_ints,
    print_result,
    read_lines,
    split_list,
)

__all__ = ["register"]


def _prior(text: str):
    """The argparse ``type`` of ``--prior-precision``: ``marglik``, ``nll`` or a finite number > 0."""
    if text in ("marglik", "nll"):
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be 'marglik', 'nll' or a number > 0, got {text[:40]!r}")
    return value


def _load_encoder(name: str, num_threads):
    from crossembed.encoders import load_encoder

    # only pass num_threads when given: callables and custom factories need not take it
    return load_encoder(name, **({"num_threads": num_threads} if num_threads else {}))


# --------------------------------------------------------------------------- encode
def _encode(args) -> int:
    from crossembed._io import atomic_write

    texts = read_lines(args.texts, "texts")
    enc = _load_encoder(args.model, args.num_threads)
    emb = enc.encode(texts, batch_size=args.batch_size, show_progress_bar=not args.quiet, role=args.role)
    buf = io.BytesIO()
    np.save(buf, np.asarray(emb, dtype=np.float32))
    atomic_write(args.output, buf.getvalue())
    info = {"output": str(args.output), "n": len(texts), "dim": int(emb.shape[1]), "model": args.model}
    print_result(info, args.json, lambda i: f"wrote {i['n']} x {i['dim']} embeddings to {i['output']}")
    return 0


# --------------------------------------------------------------------------- index
def _fit_pairs(args) -> list:
    if args.fit_pairs:
        pairs = []
        for i, line in enumerate(read_lines(args.fit_pairs, "fit-pairs"), 1):
            parts = line.split("\t")
            if len(parts) != 2:
                raise ValueError(f"{args.fit_pairs}:{i}: expected 'anchor<TAB>positive'")
            pairs.append((parts[0], parts[1]))
        return pairs
    from experiments.tasks import wordnet_task

    return wordnet_task(seed=args.seed).fit_pairs  # WordNet example/gloss pairs of the fit split


def _ensemble(args, embedders):
    """The ensemble ``--uncertainty``, ``--rules``, ``--temperature``, ``--mixing``, ``--hubness`` and ``--no-query-head`` name."""
    from experiments.uec_configs import build_ensemble

    if args.mixing == "embedding" and args.hubness:
        raise ValueError("--hubness needs --mixing score (per-model scores)")
    return build_ensemble(
        embedders,
        uncertainty=args.uncertainty,
        rules=args.rules,
        temperature=args.temperature,
        mixing=args.mixing,
        hubness=args.hubness,
        query_head=None if args.query_head else False,
    )


def _fit_embedders(args, models, pairs) -> list:
    from crossembed.encoders.cache import default_cache_dir
    from crossembed.uec import LaplaceEmbedder

    embedders = []
    for name in models:
        # the loaded model is reused for the documents; its name is what the index file records
        lap = LaplaceEmbedder(
            _load_encoder(name, args.num_threads),
            hessian=args.hessian,
            prior_precision=args.prior_precision,
            random_state=args.seed,
            query_head=args.query_head,
        ).fit(pairs, cache_dir=default_cache_dir(), batch_size=32, show_progress_bar=not args.quiet)
        embedders.append(lap)
    return embedders


def _index_build(args) -> int:
    from crossembed.uec import UECIndex

    docs = read_lines(args.docs, "docs")
    models = split_list(args.models, "models")
    pairs = _fit_pairs(args)
    embedders = _fit_embedders(args, models, pairs)
    ens = _ensemble(args, embedders)
    index = UECIndex.build(
        ens,
        docs,
        M=args.M,
        ef_construction=args.ef_construction,
        rerank=args.rerank,
        dtype=args.dtype,
        random_state=args.seed,
        num_threads=args.num_threads,
        show_progress_bar=not args.quiet,
    )
    index.save(args.output)
    info = {
        "output": str(args.output),
        "n_docs": len(docs),
        "dim": index.dim,
        "models": models,
        "fit_pairs": len(pairs),
        "prior_precision": [e.prior_precision_ for e in embedders],
        "query_head": ens.mixing.get_config().get("query_head") is True,
    }
    print_result(info, args.json, lambda i: f"wrote a {i['n_docs']}-document UEC index ({i['dim']}-d) to {i['output']}")
    return 0


def _index_search(args) -> int:
    from crossembed.uec import UECIndex

    if bool(args.query) == bool(args.queries):
        raise ValueError("give either --query TEXT (repeatable) or --queries FILE")
    if args.output and not args.queries:
        raise ValueError("--output streams the results of --queries FILE")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    index = UECIndex.load(args.index, mmap=True, num_threads=args.num_threads)
    k = min(args.k, len(index))
    options = {"exact": args.exact, "rerank": args.rerank, "ef": args.ef}
    if args.output:
        from crossembed.cli.batch_search import stream_search

        info = stream_search(
            index, args.queries, args.output, k, batch_size=args.batch_size, progress=not args.quiet, **options
        )
        print_result(
            info, args.json, lambda i: f"wrote top-{i['k']} results of {i['n_queries']} queries to {i['output']}"
        )
        return 0
    queries = list(args.query) if args.query else read_lines(args.queries, "queries")
    scores, ids = index.search(queries, k, **options)
    out = []
    for q, s_row, i_row in zip(queries, scores, ids):
        texts = index.get_texts(i_row)
        hits = [
            {"rank": r + 1, "doc": int(i), "score": float(s), **({"text": t} if t is not None else {})}
            for r, (s, i, t) in enumerate(zip(s_row, i_row, texts))
            if i >= 0
        ]
        out.append({"query": q, "hits": hits})
    print_result(out, args.json, _render_hits)
    return 0


def _render_hits(out) -> str:
    lines = []
    for item in out:
        lines.append(f"query: {item['query']}")
        lines += [f"  {h['rank']:>3}  {h['score']:.4f}  [{h['doc']}] {h.get('text', '')}" for h in item["hits"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------- evaluation
_EVAL_TASKS = ("wordnet", "wordnet-verb", "freedict", "languages", "sts")


def _eval_task(name: str, args):
    """The UECTask ``--tasks`` names (``sts`` is fitted on the WordNet noun task's pairs)."""
    from experiments.tasks import freedict_task, wordnet_task
    from experiments.uec_languages import unseen_language_task

    if name == "freedict":
        return freedict_task(seed=args.seed, n_per_language=args.n_per_language)
    if name == "languages":
        return unseen_language_task(
            dev_languages=split_list(args.dev_languages, "dev-languages"),
            test_languages=split_list(args.test_languages, "test-languages"),
            n_per_language=args.n_per_language,
            seed=args.seed,
        )
    return wordnet_task(seed=args.seed, pos="verb" if name == "wordnet-verb" else "noun")


def _sts_result(args, models, task, emb) -> dict:
    from crossembed.data.sts import load_rated_pairs
    from crossembed.encoders import encode_cached
    from experiments.uec_sts import STS_SETS, evaluate_sts

    sets = [load_rated_pairs(name) for name in STS_SETS]
    text_emb: dict = {p.name: {"query": {}, "passage": {}} for p in sets}
    for m in models:
        enc = _load_encoder(m, args.num_threads)
        for p in sets:
            for role in ("query", "passage"):
                text_emb[p.name][role][m] = encode_cached(
                    enc, p.texts, role=role, cache_dir=args.cache_dir, show_progress_bar=not args.quiet
                )
    return evaluate_sts(task, emb, sets, text_emb, models=models, seed=args.seed, prior_precision=args.prior_precision)


def _uec_eval(args) -> int:
    from crossembed._io import atomic_write
    from experiments.uec_eval import embed_task, evaluate_task, plot_coefficients
    from experiments.uec_sts import load_all_results, render_all_markdown

    models = split_list(args.models, "models")
    tasks = split_list(args.tasks, "tasks")
    for t in tasks:
        if t not in _EVAL_TASKS:
            raise ValueError(f"--tasks takes {', '.join(_EVAL_TASKS)}, got {t!r}")
    results = []
    for path in args.from_json:  # results of earlier runs (e.g. one task per process), rendered together
        results.extend(load_all_results(path, "--from-json"))
    if args.from_json:
        tasks = []
    for name in tasks:
        task = _eval_task("wordnet" if name == "sts" else name, args)
        emb = embed_task(
            task,
            models,
            cache_dir=args.cache_dir,
            num_threads=args.num_threads,
            seed=args.seed,
            show_progress_bar=not args.quiet,
        )
        if name == "sts":
            results.append(_sts_result(args, models, task, emb))
        else:
            results.append(
                evaluate_task(
                    task,
                    emb,
                    models=models,
                    n_draws=args.draws,
                    seed=args.seed,
                    prior_precision=args.prior_precision,
                    row_set=args.row_set or ("languages" if name == "languages" else "full"),
                    last_dense=not args.no_last_dense,
                    show_progress_bar=not args.quiet,
                )
            )
        results[-1]["command"] = command_line()
    if args.out:
        note = "Search throughput (exact vs HNSW + rerank) is in [uec_perf.md](uec_perf.md) (`crossembed uec-perf`)."
        atomic_write(args.out, render_all_markdown(results, command=command_line(), perf_note=note).encode())
        atomic_write(Path(args.out).with_suffix(".json"), json.dumps(results, indent=1, default=float).encode())
    if args.plot:
        plot_coefficients([r for r in results if r.get("task") != "sts"], args.plot)
    if args.json or not args.out:
        print_result(results, args.json, render_all_markdown)
    return 0


def _uec_perf(args) -> int:
    from crossembed._io import atomic_write
    from experiments.uec_perf import (
        benchmark_encode,
        benchmark_fit,
        benchmark_search,
        load_runs,
        parse_sizes,
        render_perf_markdown,
    )

    reranks = parse_ints(args.reranks, "reranks", high=INT_MAX)
    efs = parse_ints(args.efs, "efs", high=INT_MAX) if args.efs else None
    if efs is not None and len(efs) != len(reranks):
        raise ValueError(f"--efs must give one value per --reranks value ({len(reranks)}), got {len(efs)}")
    sizes = parse_sizes(args.sizes, "--sizes")
    models = split_list(args.encode_models, "encode-models") if args.encode_models else None
    runs = []
    for path in args.from_json:  # earlier sizes, each run in its own process (per-size peak memory)
        runs.extend(load_runs(path, "--from-json"))
    for n, d in sizes:
        runs.append(
            benchmark_search(
                n,
                d,
                n_queries=args.queries,
                reranks=reranks,
                efs=efs,
                M=args.M,
                ef_construction=args.ef_construction,
                dtype=args.dtype,
                var_scale=args.var_scale,
                seed=args.seed,
                num_threads=args.num_threads,
                show_progress_bar=not args.quiet,
                index_dir=args.index_dir,
            )
        )
        if not args.quiet:  # partial results as they come (the big sizes take minutes)
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    enc = benchmark_encode(models, num_threads=args.num_threads) if models else None
    fits = benchmark_fit(args.fit_pairs) if args.fit_pairs else []
    md = render_perf_markdown(runs, enc, fits=fits, command=command_line())
    if args.out:
        atomic_write(args.out, md.encode())
    print_result({"search": runs, "encode": enc, "fit": fits}, args.json, lambda _: md)
    return 0


# --------------------------------------------------------------------------- registration
def register(subparsers) -> None:
    """Add the UEC sub-commands to the ``crossembed`` CLI."""
    _add_encode(subparsers)
    idx = subparsers.add_parser("index", help="build or search a UEC index (HNSW + exact probit rerank)")
    isub = idx.add_subparsers(dest="index_command", metavar="{build,search}", parser_class=type(idx))
    _add_index_build(isub)
    _add_index_search(isub)
    idx.set_defaults(func=lambda a: (idx.print_help(), 2)[1])
    _add_uec_eval(subparsers)
    _add_uec_perf(subparsers)


def _add_encode(subparsers) -> None:
    p = subparsers.add_parser("encode", help="encode a text file (one text per line) to a .npy matrix")
    p.add_argument("texts", help="UTF-8 text file, one text per line (empty lines skipped)")
    p.add_argument("-o", "--output", required=True, help="output .npy path (written atomically)")
    p.add_argument("--model", default="minilm", help="encoder name or local model path (default: minilm)")
    p.add_argument("--role", choices=("query", "passage"), default="query")
    p.add_argument("--batch-size", type=int_arg(1), default=32)
    add_num_threads(p)
    add_output_flags(p)
    p.set_defaults(func=_encode)


def _add_index_build(isub) -> None:
    b = isub.add_parser("build", help="fit Laplace posteriors and index a text file")
    b.add_argument("docs", help="UTF-8 text file, one document per line")
    b.add_argument("-o", "--output", required=True, help="index file (written atomically, checksummed)")
    b.add_argument("--models", default="minilm,minilm-l3,e5", help="comma-separated encoder names")
    b.add_argument(
        "--fit-pairs", default=None, help="TSV 'anchor<TAB>positive' (default: WordNet example/gloss fit split)"
    )
    b.add_argument("--hessian", choices=("kron", "diag"), default="kron")
    b.add_argument("--mixing", choices=("score", "embedding"), default="score")
    b.add_argument(
        "--temperature",
        type=float_arg(0, above=True),
        default=None,
        help="T of the coefficients (default: chosen on dev for the rules/uncertainty, docs/uec.md)",
    )
    b.add_argument("--rules", choices=("paper", "official"), default="paper", help="UEC rule set (docs/uec.md)")
    b.add_argument(
        "--uncertainty",
        choices=("language", "rank", "confidence", "laplace", "confidence*laplace"),
        default=None,
        help="what routes the queries (default: the library's, 'language' when a model reads only some "
        "languages, else 'rank'): each model's predicted rank and whether it reads the query's language, its "
        "predicted rank alone, retrieval confidence over the indexed documents, or the Laplace posterior "
        "(docs/uec.md)",
    )
    b.add_argument(
        "--hubness",
        type=float_arg(0),
        default=None,
        help="weight of each document's hubness taken off its per-model scores (default 0.5, CSLS, for score "
        "mixing under the paper's rules; 0 turns it off)",
    )
    b.add_argument(
        "--no-query-head",
        dest="query_head",
        action="store_false",
        help="fit no query heads (a linear map of each model's queries, fitted on the pairs and used by default "
        "for score mixing under the paper's rules; docs/uec.md)",
    )
    b.add_argument("--prior-precision", type=_prior, default="marglik", help="'marglik', 'nll' or a number")
    b.add_argument("--M", type=int_arg(2), default=32)
    b.add_argument("--ef-construction", type=int_arg(1), default=200)
    b.add_argument("--rerank", type=int_arg(1), default=100)
    b.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="document store precision")
    add_num_threads(b)
    add_seed(b, "random seed (batches, default fit split, HNSW graph)")
    add_output_flags(b)
    b.set_defaults(func=_index_build)


def _add_index_search(isub) -> None:
    s = isub.add_parser("search", help="search an index with text or Gaussian queries")
    s.add_argument("index", help="index file from `crossembed index build` (memory-mapped)")
    s.add_argument("--query", action="append", default=[], help="a query text (repeatable)")
    s.add_argument(
        "--queries",
        default=None,
        help="one query text per line, or Gaussians: .npy of shape (2, Q, D) (means, variances) / .npz mean+var",
    )
    s.add_argument(
        "-o", "--output", default=None, help="stream the results of --queries to .npy (id, score fields) or .jsonl"
    )
    s.add_argument("--batch-size", type=int_arg(1), default=1024, help="queries per search call with --output")
    s.add_argument("-k", type=int_arg(1), default=10)
    s.add_argument("--exact", action="store_true", help="brute-force probit search instead of HNSW + rerank")
    s.add_argument("--rerank", type=int_arg(1), default=None, help="ANN candidates reranked per query")
    s.add_argument("--ef", type=int_arg(1), default=None, help="HNSW search breadth (default 2 x rerank)")
    add_num_threads(s)
    add_output_flags(s)
    s.set_defaults(func=_index_search)


def _add_uec_eval(subparsers) -> None:
    from experiments.uec_languages import DEV_LANGUAGES, TEST_LANGUAGES

    e = subparsers.add_parser("uec-eval", help="reproduce the UEC retrieval tables (docs/uec.md)")
    e.add_argument(
        "--tasks",
        default="wordnet,freedict",
        help="comma-separated: wordnet, freedict, wordnet-verb (a held-out check: WordNet verbs, no default was "
        "chosen on them), languages (English-only fit pairs, queries in languages the fit never saw), sts "
        "(Spearman against human ratings of word and document pairs; fitted on the wordnet pairs)",
    )
    e.add_argument(
        "--dev-languages",
        default=",".join(DEV_LANGUAGES),
        help="the languages task's dev languages (settings may be chosen on them)",
    )
    e.add_argument(
        "--test-languages", default=",".join(TEST_LANGUAGES), help="the languages task's test languages (only scored)"
    )
    e.add_argument("--models", default="minilm,minilm-l3,e5")
    e.add_argument("--draws", type=int_arg(1), default=3, help="random dev/test halves")
    e.add_argument(
        "--n-per-language", type=int_arg(1), default=400, help="FreeDict queries per language (freedict, languages)"
    )
    e.add_argument("--prior-precision", type=_prior, default="marglik", help="'marglik', 'nll' or a number")
    e.add_argument("--cache-dir", default=None, help="embedding cache (default ~/.cache/crossembed)")
    e.add_argument(
        "--row-set",
        choices=("full", "core", "routing", "languages"),
        default=None,
        help="every row (default; 'languages' for the languages task), the single models plus the rules/routing "
        "rows the issue asks for (core), the uniform mixes and routings only (routing), or those plus the "
        "language routing's ablations and bounds (languages)",
    )
    e.add_argument(
        "--no-last-dense",
        action="store_true",
        help="skip the layer='last_dense' rows (they re-encode every text through the torch models: slow)",
    )
    add_num_threads(e)
    e.add_argument("--out", default=None, help="markdown report (a .json with the raw numbers goes next to it)")
    e.add_argument("--plot", default=None, help="PNG heat map of the per-language coefficients")
    e.add_argument(
        "--from-json",
        action="append",
        default=[],
        help="render these saved results (the .json next to an earlier --out) instead of evaluating; repeatable",
    )
    add_seed(e, "random seed (task splits, dev/test draws, Laplace batches)")
    add_output_flags(e)
    e.set_defaults(func=_uec_eval)


def _add_uec_perf(subparsers) -> None:
    f = subparsers.add_parser("uec-perf", help="UEC search throughput: exact vs HNSW + rerank")
    f.add_argument("--sizes", default="100000x1152,1000000x384", help="comma-separated NxD of synthetic documents")
    f.add_argument("--queries", type=int_arg(1), default=500)
    f.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="document store")
    f.add_argument("--M", type=int_arg(2), default=32, help="HNSW links per node")
    f.add_argument(
        "--var-scale",
        type=float_arg(0.0, 1000.0),
        default=0.0,
        help="document and query variances var_scale x U(0.5, 1.5) (default 0: none, as the default ensemble)",
    )
    f.add_argument("--ef-construction", type=int_arg(1), default=200)
    f.add_argument("--reranks", default="50,100,200", help="comma-separated ANN candidates reranked per query")
    f.add_argument("--efs", default=None, help="HNSW ef per rerank value (default 2 x rerank)")
    f.add_argument(
        "--index-dir",
        default=None,
        help="save each built index here, and reuse one built with the same size, dtype, variances, graph and seed",
    )
    f.add_argument("--from-json", action="append", default=[], help="also render the runs of an earlier --json output")
    f.add_argument("--encode-models", default="", help="also time ensemble encoding with these models")
    f.add_argument(
        "--fit-pairs", type=int_arg(0), default=10000, help="also time Laplace fits on this many pairs (0: skip)"
    )
    add_num_threads(f)
    f.add_argument("--out", default=None, help="markdown table")
    add_seed(f, "random seed (synthetic documents)")
    add_output_flags(f)
    f.set_defaults(func=_uec_perf)
