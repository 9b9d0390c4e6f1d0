"""CLI: ``link``, ``link-table`` and ``link-scale``.

``link`` links two saved matrices from a seed CSV; ``link-table`` reruns the
real-encoder experiments and prints the markdown table (``--out`` writes it
between the ``link-table`` markers of a document); ``link-scale`` times fits
on synthetic data. Nothing is written unless a path is given.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from crossembed._validation import INT64_MAX, check_fraction, check_int
from crossembed.cli.options import (
    add_num_threads,
    add_output_flags,
    add_seed,
    int_arg,
    load_npy,
    parse_ints,
    parse_tuples,
    print_result,
    read_text,
    split_list,
)

__all__ = ["read_seeds", "register"]

_METHODS = ("geh", "procrustes", "relative", "bootstrap-procrustes")


def register(subparsers) -> None:
    from crossembed.linking.geh import DEFAULT_MAX_ITER
    from crossembed.linking.promotion import PROMOTIONS

    p = subparsers.add_parser("link", help="link the rows of two embedding matrices (GEH or a baseline)")
    p.add_argument("a", help="A.npy: (N_A, D_A) embeddings from encoder A")
    p.add_argument("b", help="B.npy: (N_B, D_B) embeddings from encoder B")
    p.add_argument("--seeds", required=True, help="CSV of known pairs: row_in_A,row_in_B (a header line is allowed)")
    p.add_argument("--out", help="write links as CSV (a,b,posterior,votes)")
    p.add_argument("--method", default="geh", choices=_METHODS)
    p.add_argument("--promotion", default="validated", choices=sorted(PROMOTIONS))
    p.add_argument(
        "--max-iter", type=int_arg(1), default=DEFAULT_MAX_ITER, help=f"most GEH rounds (default {DEFAULT_MAX_ITER})"
    )
    p.add_argument(
        "--sample-rows",
        type=int_arg(0),
        default=None,
        help="GEH rounds on this many sampled rows a side, the final pass on all (default 20000; 0: every row)",
    )
    p.add_argument(
        "--row-sample",
        default="seeds",
        choices=("seeds", "random"),
        help="which rows that sample holds: those nearest the seeds (default) or random ones",
    )
    add_seed(p)
    add_num_threads(p)
    add_output_flags(p)
    p.set_defaults(func=_link)

    t = subparsers.add_parser("link-table", help="rerun the real-encoder linking table (markdown)")
    t.add_argument(
        "--pairs",
        default=None,
        help="comma list of encA:encB:corpus_size (default: the five pairs of docs/linking.md, 20,000 glosses)",
    )
    t.add_argument("--settings", default="0.1:15,0.3:15,0.5:15", help="comma list of alpha:n_seeds")
    t.add_argument("--methods", default=None, help="comma list (default: baselines, paper, capped, validated)")
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


def _load_matrix(path: str, name: str) -> np.ndarray:
    arr = load_npy(path, name)
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        raise ValueError(f"{name} file {path!r} must hold a 2-D array, got shape {getattr(arr, 'shape', None)}")
    return arr


def read_seeds(path: str) -> np.ndarray:
    """Two integer columns ``row_in_A,row_in_B``, each in ``[0, 2**63)``; one optional header line."""
    rows = []
    header_allowed = True
    for n, line in enumerate(read_text(path, "seeds").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 2:
            raise ValueError(f"seeds file {path!r} line {n}: expected 2 comma-separated columns, got {len(parts)}")
        try:
            pair = (int(parts[0]), int(parts[1]))
        except ValueError:
            if not header_allowed:
                raise ValueError(f"seeds file {path!r} line {n}: {line[:60]!r} is not two integers") from None
            pair = None
        header_allowed = False
        if pair is not None:
            if not all(0 <= v <= INT64_MAX for v in pair):
                raise ValueError(f"seeds file {path!r} line {n}: row numbers must be in [0, {INT64_MAX}]")
            rows.append(pair)
    if not rows:
        raise ValueError(f"seeds file {path!r} holds no pairs")
    return np.asarray(rows, dtype=np.int64)


def _row_sample(rows, which: str):
    """``--sample-rows``/``--row-sample`` as a RowSample (None for ``--sample-rows 0``: every row)."""
    from crossembed.linking import RowSample

    if rows is None:
        return RowSample(near_seeds=which == "seeds")
    if rows == 0:
        return None
    if rows < 2:
        raise ValueError(f"--sample-rows must be 0 or >= 2, got {rows}")
    return RowSample(rows=rows, near_seeds=which == "seeds")


def _link(args) -> int:
    from crossembed.linking import PROMOTIONS, GEHLinker, bootstrap_procrustes_link, procrustes_link, relative_link

    A = _load_matrix(args.a, "A")
    B = _load_matrix(args.b, "B")
    seeds = read_seeds(args.seeds)
    if args.method == "geh":
        res = GEHLinker(
            promotion=PROMOTIONS[args.promotion](),
            max_iter=args.max_iter,
            sample=_row_sample(args.sample_rows, args.row_sample),
            random_state=args.seed,
            num_threads=args.num_threads,
            show_progress_bar=not args.quiet,
        ).link(A, B, seeds)
    elif args.method == "procrustes":
        res = procrustes_link(A, B, seeds)
    elif args.method == "relative":
        res = relative_link(A, B, seeds)
    else:
        res = bootstrap_procrustes_link(A, B, seeds)
    if args.out:
        res.to_csv(args.out)
    where = f" -> {args.out}" if args.out else ""
    print_result(
        res.as_dict(),
        args.json,
        lambda _: f"{len(res)} links from {len(seeds)} seeds ({len(res.history)} rounds){where}",
    )
    return 0


def _default_results(name: str) -> Path:
    from crossembed.encoders import default_cache_dir

    d = default_cache_dir() / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return d / name


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
        for _, _, corpus in pairs:
            check_int(corpus, "--pairs corpus size", low=2)
        for alpha, n_seeds in settings:  # checked here, not after the corpora are embedded
            check_fraction(alpha, "--settings alpha")
            check_int(n_seeds, "--settings n_seeds", low=1)
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
