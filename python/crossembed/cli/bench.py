"""``crossembed bench``: each C++ kernel against its numpy (and torch) baseline on this machine;
``crossembed bench serve``: the HTTP service under load next to in-process search."""

from __future__ import annotations

import sys

from crossembed.cli.options import add_num_threads, add_seed, float_arg, int_arg, parse_ints, print_result

__all__ = ["register"]


def register(sub) -> None:
    from crossembed.cli import kernel_bench

    p = sub.add_parser(
        "bench",
        help="time the C++ kernels against numpy/torch baselines on this machine (bench serve: the HTTP service)",
        description=kernel_bench.__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--kernels",
        default=",".join(kernel_bench.KERNELS),
        help=f"comma-separated kernels to run (default {','.join(kernel_bench.KERNELS)})",
    )
    p.add_argument(
        "--scale",
        choices=kernel_bench.SCALES,
        default="small",
        help="problem sizes: small (seconds), medium (~1/10 of full), full (the issue's sizes)",
    )
    p.add_argument(
        "--repeat", type=int_arg(1, 1000), default=3, help="timed calls per function; the best one counts (default 3)"
    )
    add_num_threads(p)
    add_seed(p, "seed of the generated data")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)
    targets = p.add_subparsers(dest="bench_target", metavar="{serve}", parser_class=type(p))
    _register_serve(targets)


def _register_serve(targets) -> None:
    # serve_bench is imported when the command runs: it pulls in the whole UEC stack
    s = targets.add_parser(
        "serve",
        help="load-test `crossembed serve` on loopback next to in-process search",
        description="Start `crossembed serve` on a synthetic index and drive it with single-query requests at "
        "several concurrencies (with and without a concurrent writer), next to in-process search.",
    )
    s.add_argument("--size", choices=("small", "full"), default="full", help="small: seconds (CI); full: 100k x 384")
    s.add_argument(
        "--text",
        action="store_true",
        help="one-text search requests on a WordNet-gloss index of the default ensemble (needs wordnet-base and "
        "the model packages; --docs default 20000, --queries 300, --concurrency 1,8,32,64, --duration 15)",
    )
    s.add_argument("--runs", type=int_arg(1, 100), default=3, help="--text: repetitions of every row (default 3)")
    s.add_argument("--docs", type=int_arg(1, 10_000_000), help="documents (default: the size's)")
    s.add_argument("--dim", type=int_arg(1, 8192), help="dimension (default: the size's)")
    s.add_argument("--queries", type=int_arg(1, 1_000_000), help="distinct queries sent in turn (default: the size's)")
    s.add_argument(
        "--duration", type=float_arg(0, 3600, above=True), help="measured seconds per row (default: the size's)"
    )
    s.add_argument("--concurrency", help="comma-separated connection counts (default 1,8,64; --text: 1,8,32,64)")
    s.add_argument("--k", type=int_arg(1, 1000), default=10, help="results per query (default 10)")
    s.add_argument("--rerank", type=int_arg(1, 10_000), default=20, help="ANN candidates per query (default 20)")
    s.add_argument("--ef", type=int_arg(1, 10_000), help="HNSW search breadth (default 2 x rerank)")
    s.add_argument("--M", type=int_arg(2, 1024), default=16, help="HNSW links per node of the built index (default 16)")
    s.add_argument("--ef-construction", type=int_arg(1, 10_000), default=100, help="HNSW build breadth (default 100)")
    s.add_argument(
        "--write-rate", type=float_arg(0, 10_000), default=20.0, help="writer's requests/s (0: no writer; default 20)"
    )
    s.add_argument("--index", help="index file to reuse when it holds the same documents (else built and saved there)")
    s.add_argument("--server-threads", type=int_arg(1), help="the server's --num-threads (default all cores)")
    s.add_argument(
        "--soak",
        type=float_arg(0, 10_000, above=True),
        metavar="MINUTES",
        help="instead: MINUTES of mixed search / add / upsert / remove load, the server's RSS, p50/p99 and errors "
        "sampled every 30 s (--docs default 100000, --dim 128, --concurrency 8, --write-rate 20)",
    )
    s.add_argument("--plot", help="--soak: write RSS and latency over time as a PNG here (needs matplotlib)")
    s.add_argument(
        "--search-rate",
        type=float_arg(0, 100_000),
        default=0.0,
        help="--soak: searches/s over all connections (default 0: each sends its next on the last answer)",
    )
    add_seed(s, "seed of the generated documents and queries")
    s.add_argument("--json", action="store_true", help="print the results as JSON")
    s.set_defaults(func=_run_serve)


def _run_soak(args) -> int:
    from crossembed.cli import serve_soak

    result = serve_soak.soak_serve(
        args.soak,
        n_docs=args.docs or 100_000,
        dim=args.dim or 128,
        concurrency=parse_ints(args.concurrency or "8", "concurrency", high=4096)[0],
        search_rate=args.search_rate,
        write_rate=args.write_rate,
        M=args.M,
        ef_construction=args.ef_construction,
        rerank=args.rerank,
        index_path=args.index,
        server_threads=args.server_threads,
        seed=args.seed,
    )
    print_result(result, args.json, serve_soak.render_soak)
    if args.plot:
        serve_soak.plot_soak(result, args.plot)
    if result["server_exit_code"] != 0 or any(s["server_errors"] for s in result["samples"]):
        print("crossembed bench serve: error: the server answered 5xx or did not exit 0", file=sys.stderr)
        return 1
    return 0


def _run_serve_text(args) -> int:
    from crossembed.cli import serve_text_bench

    duration = 15.0 if args.duration is None else args.duration  # > 0: float_arg refuses the rest
    result = serve_text_bench.benchmark_serve_text(
        n_docs=args.docs or 20_000,
        n_queries=args.queries or 300,
        k=args.k,
        concurrencies=parse_ints(args.concurrency or "1,8,32,64", "concurrency", high=4096),
        duration_s=duration,
        runs=args.runs,
        index_path=args.index,
        seed=args.seed,
    )
    print_result(result, args.json, serve_text_bench.render_text)
    if result["server_exit_code"] != 0 or any(r["errors"] for r in result["rows"]):
        print("crossembed bench serve: error: the server failed or did not exit 0", file=sys.stderr)
        return 1
    return 0


def _run_serve(args) -> int:
    from crossembed.cli import serve_bench

    if args.soak is not None:
        return _run_soak(args)
    if args.text:
        return _run_serve_text(args)
    size = serve_bench.SIZES[args.size]
    if args.write_rate < 0:
        raise ValueError(f"--write-rate must be >= 0, got {args.write_rate}")
    duration = size["duration_s"] if args.duration is None else args.duration
    result = serve_bench.benchmark_serve(
        args.docs or size["n_docs"],
        args.dim or size["dim"],
        n_queries=args.queries or size["n_queries"],
        k=args.k,
        rerank=args.rerank,
        ef=args.ef,
        concurrencies=parse_ints(args.concurrency or "1,8,64", "concurrency", high=4096),
        duration_s=duration,
        warmup_s=size["warmup_s"],
        write_rate=args.write_rate,
        M=args.M,
        ef_construction=args.ef_construction,
        index_path=args.index,
        server_threads=args.server_threads,
        seed=args.seed,
    )
    print_result(result, args.json, serve_bench.render)
    failed = result["served_mismatches"] or result["server_exit_code"] != 0
    failed = failed or any(r["errors"] or r.get("write_errors") for r in result["rows"])
    if failed:
        print(
            "crossembed bench serve: error: the server answered differently, failed or did not exit 0", file=sys.stderr
        )
        return 1
    return 0


def _run(args) -> int:
    from crossembed.cli import kernel_bench

    result = kernel_bench.measure(
        kernel_bench.parse_kernels(args.kernels),
        scale=args.scale,
        repeat=args.repeat,
        num_threads=args.num_threads,
        seed=args.seed,
        show_progress_bar=not args.quiet,
    )
    print_result(result, args.json, kernel_bench.render)
    if not result["ok"]:
        bad = "; ".join(f"{r['op']} vs {r['baseline']}: {r['check']}" for r in result["cases"] if not r["agree"])
        print(f"crossembed bench: error: kernel and baseline disagree ({bad})", file=sys.stderr)
        return 1
    return 0
