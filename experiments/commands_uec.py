"""``python -m experiments uec-eval`` and ``uec-perf``: the UEC retrieval tables and search throughput."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from crossembed.cli.options import (
    INT_MAX,
    add_num_threads,
    add_output_flags,
    add_seed,
    command_line,
    float_arg,
    int_arg,
    parse_ints,
    print_result,
    prior_precision_arg,
    split_list,
    write_file,
)
from experiments import PROG
from experiments._report import replace_block

__all__ = ["register"]

_EVAL_TASKS = ("wordnet", "wordnet-verb", "freedict", "languages", "sts")


def _load_encoder(name: str, num_threads):
    from crossembed.encoders import load_encoder

    # only pass num_threads when given: callables and custom factories need not take it
    return load_encoder(name, **({"num_threads": num_threads} if num_threads else {}))


# --------------------------------------------------------------------------- uec-eval
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
    from crossembed.encoders import encode_cached
    from experiments.rated_pairs import load_rated_pairs
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
    weak = split_list(args.weak_members, "weak-members") if args.weak_members else []
    for name in tasks:
        task = _eval_task("wordnet" if name == "sts" else name, args)
        emb = embed_task(
            task,
            models + (weak if name != "sts" else []),
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
                    routings=args.routing,
                    confidence=args.confidence,
                    weak_members=weak,
                    last_dense=not args.no_last_dense,
                    show_progress_bar=not args.quiet,
                )
            )
        results[-1]["command"] = command_line(PROG)
    if args.out:
        note = f"Search throughput (exact vs HNSW + rerank) is in [uec_perf.md](uec_perf.md) (`{PROG} uec-perf`)."
        write_file(args.out, render_all_markdown(results, command=command_line(PROG), perf_note=note))
        write_file(Path(args.out).with_suffix(".json"), json.dumps(results, indent=1, default=float))
    if args.plot:
        plot_coefficients([r for r in results if r.get("task") != "sts"], args.plot)
    if args.confidence_plot:
        from experiments.uec_confidence import plot_confidence

        plot_confidence(results, args.confidence_plot)
    if args.json or not args.out:
        print_result(results, args.json, render_all_markdown)
    return 0


# --------------------------------------------------------------------------- uec-perf
def _uec_perf(args) -> int:
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
    if args.mmap and not args.index_dir:
        raise ValueError("--mmap reads an index saved by an earlier run: give --index-dir")
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
                mmap=args.mmap,
            )
        )
        if not args.quiet:  # partial results as they come (the big sizes take minutes)
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    enc = benchmark_encode(models, num_threads=args.num_threads) if models else None
    fits = benchmark_fit(args.fit_pairs) if args.fit_pairs else []
    md = render_perf_markdown(runs, enc, fits=fits, command=command_line(PROG))
    if args.out:  # docs/uec_perf.md keeps its guide around the uec-perf block
        replace_block(args.out, "uec-perf", md, title="UEC throughput")
    print_result({"search": runs, "encode": enc, "fit": fits}, args.json, lambda _: md)
    return 0


# --------------------------------------------------------------------------- registration
def register(subparsers) -> None:
    """Add ``uec-eval`` and ``uec-perf`` to the harness's parser."""
    _add_uec_eval(subparsers)
    _add_uec_perf(subparsers)


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
    e.add_argument(
        "--prior-precision", type=prior_precision_arg, default="marglik", help="'marglik', 'nll' or a number"
    )
    e.add_argument("--cache-dir", default=None, help="embedding cache (default ~/.cache/crossembed)")
    e.add_argument(
        "--row-set",
        choices=("full", "core", "routing", "languages", "minimal"),
        default=None,
        help="every row (default; 'languages' for the languages task), the single models plus the rules/routing "
        "rows the issue asks for (core), the uniform mixes and routings only (routing), those plus the "
        "language routing's ablations and bounds (languages), or the single models, the default, the rank head "
        "and the uniform mix with the same heads and hubness (minimal)",
    )
    e.add_argument(
        "--confidence",
        action="store_true",
        help="also report the default's top-hit confidence (calibrated on the fit pairs): AUROC against the top-1 "
        "score and margin, ECE, risk-coverage",
    )
    e.add_argument("--confidence-plot", default=None, help="PNG: reliability diagram and risk-coverage per task")
    e.add_argument(
        "--weak-members",
        default="",
        help="comma-separated weak models each added to the default and the uniform ensemble: "
        "trigram, minilm-rot13, minilm-l3-rotated (experiments/uec_weak.py)",
    )
    e.add_argument(
        "--routing",
        action="append",
        default=[],
        help="a routing class to evaluate beside the table's rows, by importable name 'package.module:Class' "
        "(T chosen on dev when it has one); repeatable",
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
    f.add_argument(
        "--dtype", choices=("float32", "float16", "int8", "bf16"), default="float32", help="the index's dtype"
    )
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
    f.add_argument(
        "--mmap", action="store_true", help="read a reused --index-dir index memory-mapped (UECIndex.load(mmap=True))"
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
