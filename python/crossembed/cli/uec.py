"""CLI: ``encode`` and ``index build|search``."""

from __future__ import annotations

import io

import numpy as np

from crossembed.cli.options import (
    add_num_threads,
    add_output_flags,
    add_seed,
    float_arg,
    int_arg,
    print_result,
    prior_precision_arg,
    read_lines,
    split_list,
)

__all__ = ["register"]


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
    from crossembed.data import example_gloss_pairs, load_bundled_wordnet

    # (first example, gloss) of every bundled WordNet synset: needs no installed data
    return example_gloss_pairs(synsets=load_bundled_wordnet())


def _routing(args, embedders):
    """The routing ``--uncertainty`` names (None: the library's default routing)."""
    from crossembed.uec import LanguageRouting, LaplaceRouting, RankRouting
    from crossembed.uec.languages import model_languages

    if args.uncertainty == "rank":
        return RankRouting()
    if args.uncertainty == "laplace":
        return LaplaceRouting()
    if args.uncertainty == "language":
        return LanguageRouting([model_languages(e.encoder_name) for e in embedders])
    return None


def _ensemble(args, embedders):
    """The ensemble ``--uncertainty``, ``--mixing``, ``--hubness`` and ``--no-query-head`` name."""
    from crossembed.uec import EmbeddingMixing, ScoreMixing, UECEnsemble

    if args.mixing == "embedding":
        if args.hubness:
            raise ValueError("--hubness needs --mixing score (per-model scores)")
        mixing = EmbeddingMixing()
    else:
        mixing = ScoreMixing(hubness=args.hubness, query_head=None if args.query_head else False)
    return UECEnsemble(embedders, routing=_routing(args, embedders), mixing=mixing)


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


def _calibrated(ens, pairs, docs, args):
    """``ens`` after ``fit_confidence_components`` on the fit pairs, with the indexed documents (their
    per-model Gaussians ``docs``) as the distractors every real search has."""
    progress = not args.quiet
    queries = ens.encode_components([q for q, _ in pairs], role="query", show_progress_bar=progress)
    positives = ens.encode_components([p for _, p in pairs], role="passage", show_progress_bar=progress)
    return ens.fit_confidence_components(
        queries, positives, documents=docs, texts=[q for q, _ in pairs], random_state=args.seed
    )


def _index_build(args) -> int:
    from crossembed.uec import IndexConfig, UECIndex

    docs = read_lines(args.docs, "docs")
    models = split_list(args.models, "models")
    pairs = _fit_pairs(args)
    embedders = _fit_embedders(args, models, pairs)
    ens = _ensemble(args, embedders)
    config = IndexConfig(
        M=args.M, ef_construction=args.ef_construction, rerank=args.rerank, dtype=args.dtype, random_state=args.seed
    )
    progress = not args.quiet
    comps = ens.encode_components(docs, role="passage", show_progress_bar=progress)
    if args.confidence:
        ens = _calibrated(ens, pairs, comps, args)
    if ens.needs_reference and not ens.has_reference:
        ens = ens.with_reference(comps)  # retrieval confidence is measured over the indexed documents
    docs_g = ens.combine(comps, role="passage")
    index = UECIndex(docs_g, ensemble=ens, texts=docs, config=config, num_threads=args.num_threads)
    index.save(args.output)
    info = {
        "output": str(args.output),
        "n_docs": len(docs),
        "dim": index.dim,
        "models": models,
        "fit_pairs": len(pairs),
        "prior_precision": [e.prior_precision_ for e in embedders],
        "query_head": ens.mixing.get_config().get("query_head") is True,
        "confidence": ens.confidence_ is not None,
        "rank_heads_kept": None if ens.routing_check_ is None else ens.routing_check_.kept,
    }
    print_result(info, args.json, lambda i: f"wrote a {i['n_docs']}-document UEC index ({i['dim']}-d) to {i['output']}")
    return 0


def _index_search(args) -> int:
    from crossembed.uec import UECIndex

    if bool(args.query) == bool(args.queries):
        raise ValueError("give either --query TEXT (repeatable) or --queries FILE")
    if args.output and not args.queries:
        raise ValueError("--output streams the results of --queries FILE")
    if args.output and args.confidence:
        raise ValueError("--confidence is printed with the hits; it is not streamed with --output")
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
    if args.confidence:
        scores, ids, confidence = index.search(queries, k, return_confidence=True, **options)
    else:
        (scores, ids), confidence = index.search(queries, k, **options), None
    out = []
    for n, (q, s_row, i_row) in enumerate(zip(queries, scores, ids)):
        texts = index.get_texts(i_row)
        hits = [
            {"rank": r + 1, "doc": int(i), "score": float(s), **({"text": t} if t is not None else {})}
            for r, (s, i, t) in enumerate(zip(s_row, i_row, texts))
            if i >= 0
        ]
        out.append({"query": q, **({} if confidence is None else {"confidence": float(confidence[n])}), "hits": hits})
    print_result(out, args.json, _render_hits)
    return 0


def _render_hits(out) -> str:
    lines = []
    for item in out:
        sure = f"  (top hit right with probability {item['confidence']:.2f})" if "confidence" in item else ""
        lines.append(f"query: {item['query']}{sure}")
        lines += [f"  {h['rank']:>3}  {h['score']:.4f}  [{h['doc']}] {h.get('text', '')}" for h in item["hits"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------- registration
def register(subparsers) -> None:
    """Add the UEC sub-commands to the ``crossembed`` CLI."""
    _add_encode(subparsers)
    idx = subparsers.add_parser("index", help="build or search a UEC index (HNSW + exact probit rerank)")
    isub = idx.add_subparsers(dest="index_command", metavar="{build,search}", parser_class=type(idx))
    _add_index_build(isub)
    _add_index_search(isub)
    idx.set_defaults(func=lambda a: (idx.print_help(), 2)[1])


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
        "--fit-pairs",
        default=None,
        help="TSV 'anchor<TAB>positive' (default: the example/gloss pairs of the bundled WordNet sample)",
    )
    b.add_argument("--hessian", choices=("kron", "diag"), default="kron")
    b.add_argument("--mixing", choices=("score", "embedding"), default="score")
    b.add_argument(
        "--uncertainty",
        choices=("language", "rank", "laplace"),
        default=None,
        help="what routes the queries (default: the library's, 'language' when a model reads only some "
        "languages, else 'rank'): each model's predicted rank and whether it reads the query's language, its "
        "predicted rank alone, or the Laplace posterior's trace",
    )
    b.add_argument(
        "--hubness",
        type=float_arg(0),
        default=None,
        help="weight of each document's hubness taken off its per-model scores (default 0.5, CSLS, for score "
        "mixing; 0 turns it off)",
    )
    b.add_argument(
        "--no-query-head",
        dest="query_head",
        action="store_false",
        help="fit no query heads (a linear map of each model's queries, fitted on the pairs and used by default "
        "for score mixing)",
    )
    b.add_argument(
        "--prior-precision", type=prior_precision_arg, default="marglik", help="'marglik', 'nll' or a number"
    )
    b.add_argument(
        "--no-confidence",
        dest="confidence",
        action="store_false",
        help="skip the calibration on the fit pairs (cross-fitted: it checks the routing on held-out pairs and "
        "fits the top-hit confidence `index search --confidence` reports)",
    )
    b.add_argument("--M", type=int_arg(2), default=32)
    b.add_argument("--ef-construction", type=int_arg(1), default=200)
    b.add_argument("--rerank", type=int_arg(1), default=100)
    b.add_argument(
        "--dtype",
        choices=("float32", "float16", "int8", "bf16"),
        default="float32",
        help="how the graph stores the means (int8, bf16: codes, float32 means kept beside them for the rerank)",
    )
    add_num_threads(b)
    add_seed(b, "random seed (Laplace fit, HNSW graph)")
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
    s.add_argument(
        "--confidence",
        action="store_true",
        help="also print each query's calibrated probability that its top hit is right (an index built with it)",
    )
    add_num_threads(s)
    add_output_flags(s)
    s.set_defaults(func=_index_search)
