"""``python -m experiments link-table`` and ``link-scale``: the GEH linking table and fit times.

``link-table`` reruns the real-encoder experiments and prints the markdown
table (``--out`` writes it between the ``link-table`` markers of a document);
``link-scale`` times fits on synthetic data. Nothing is written unless a path
is given.
"""

from __future__ import annotations

import sys
from pathlib import Path

from crossembed.cli.options import add_seed, int_arg, parse_ints, parse_tuples, print_result, split_list

__all__ = ["register"]


def register(subparsers) -> None:
    """Add ``link-table`` and ``link-scale`` to the harness's parser."""
    t = subparsers.add_parser("link-table", help="rerun the real-encoder linking table (markdown)")
    t.add_argument(
        "--pairs",
        default=None,
        help="comma list of encA:encB:corpus_size (default: the five pairs of docs/linking.md, 20,000 glosses)",
    )
    t.add_argument(
        "--settings", default="0.1:15,0.3:15,0.5:15", help="comma list of alpha:n_seeds (n_seeds 0: no seeds)"
    )
    t.add_argument(
        "--methods",
        default=None,
        help="comma list of the table's methods or module:attribute methods of one's own (docs/extending.md; "
        "default: baselines, paper, capped, validated)",
    )
    t.add_argument("--draws", type=int_arg(1), default=5)
    t.add_argument("--n-objects", type=int_arg(2), default=10_000, help="glosses sampled per draw")
    t.add_argument("--max-iter", type=int_arg(1), default=30)
    t.add_argument("--results", default=None, help="resumable JSON of every run (default: in the cache directory)")
    t.add_argument(
        "--out", default=None, help="markdown file whose link-table block is replaced (e.g. docs/linking.md)"
    )
    t.add_argument("--render-only", action="store_true", help="only re-render the table from --results")
    add_seed(t)
    t.add_argument("--json", action="store_true", help="print every run's record as JSON")
    t.set_defaults(func=_link_table)

    c = subparsers.add_parser("link-scale", help="time GEH fits and single views on synthetic data of growing N")
    c.add_argument("--sizes", default="1000,3000,10000", help="rows per side for full fits (comma list)")
    c.add_argument("--view-sizes", default="3000,10000", help="rows per side for single-view timings")
    c.add_argument("--max-iter", type=int_arg(1), default=10)
    c.add_argument("--candidates", default="pool", choices=["exact", "pool", "ann"])
    c.add_argument("--results", default=None, help="write the records as JSON here")
    c.add_argument("--plot", default=None, help="write the log-log growth curve PNG here")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_link_scale)


def _default_results(name: str) -> Path:
    from crossembed.encoders import default_cache_dir

    d = default_cache_dir() / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return d / name


def _check_table_args(pairs, settings) -> None:
    """The corpus sizes and settings, checked before any corpus is embedded."""
    for _, _, corpus in pairs:
        if corpus < 2:
            raise ValueError(f"--pairs corpus size must be >= 2, got {corpus}")
    for alpha, n_seeds in settings:
        if not 0.0 < alpha <= 1.0:  # also refuses nan
            raise ValueError(f"--settings alpha must be in (0, 1], got {alpha}")
        if n_seeds < 0 or n_seeds == 1:
            raise ValueError(f"--settings n_seeds must be 0 (no seeds) or >= 2, got {n_seeds}")


def _link_table(args) -> int:
    from experiments._report import replace_block
    from experiments.link_table import DEFAULT_PAIRS, SUMMARY, load_records, render_markdown, run_table

    results = Path(args.results) if args.results else _default_results("link_table.json")
    if args.render_only:
        records = load_records(results, "--results")
    else:
        methods = tuple(split_list(args.methods, "methods")) if args.methods else SUMMARY
        pairs = parse_tuples(args.pairs, "pairs", (str, str, int)) if args.pairs else DEFAULT_PAIRS
        settings = parse_tuples(args.settings, "settings", (float, int))
        _check_table_args(pairs, settings)
        records = run_table(
            pairs=pairs,
            settings=settings,
            methods=methods,
            n_draws=args.draws,
            n_objects=args.n_objects,
            max_iter=args.max_iter,
            results_path=results,
            seed=args.seed,
            log=lambda s: print(s, file=sys.stderr, flush=True),
        )
    md = render_markdown(records)
    if args.out:
        replace_block(args.out, "link-table", md, title="GEH vector linking")
    print_result(records, args.json, lambda _: md)
    return 0


def _link_scale(args) -> int:
    from experiments.link_scale import MIN_FIT_ROWS, VIEW_ANCHORS, plot_scaling, time_scaling

    records = time_scaling(
        parse_ints(args.sizes, "sizes", low=MIN_FIT_ROWS) if args.sizes.strip() else [],
        max_iter=args.max_iter,
        view_sizes=parse_ints(args.view_sizes, "view-sizes", low=VIEW_ANCHORS) if args.view_sizes.strip() else [],
        results_path=args.results,
        candidates=args.candidates,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    if args.plot:
        plot_scaling(records, args.plot)
    print_result(records, args.json, lambda rs: "\n".join(map(str, rs)))
    return 0
