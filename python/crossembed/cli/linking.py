"""CLI: ``link`` - link the rows of two saved matrices from a seed CSV, or GEH with no seeds (GEH or a baseline)."""

from __future__ import annotations

import warnings

import numpy as np

from crossembed._validation import INT64_MAX
from crossembed.cli.options import (
    add_num_threads,
    add_output_flags,
    add_seed,
    int_arg,
    load_npy,
    print_result,
    read_text,
)

__all__ = ["read_seeds", "register"]

_METHODS = ("geh", "procrustes", "relative", "bootstrap-procrustes")


def register(subparsers) -> None:
    from crossembed.linking.geh import DEFAULT_MAX_ITER

    p = subparsers.add_parser("link", help="link the rows of two embedding matrices (GEH or a baseline)")
    p.add_argument("a", help="A.npy: (N_A, D_A) embeddings from encoder A")
    p.add_argument("b", help="B.npy: (N_B, D_B) embeddings from encoder B")
    p.add_argument(
        "--seeds",
        help="CSV of known pairs: row_in_A,row_in_B (a header line is allowed); without it GEH finds its own "
        "(SeedSearch) and the baselines refuse",
    )
    p.add_argument("--out", help="write links as CSV (a,b,posterior,votes)")
    p.add_argument("--method", default="geh", choices=_METHODS)
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
    from crossembed.linking import GEHLinker
    from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes_link, relative_link

    A = _load_matrix(args.a, "A")
    B = _load_matrix(args.b, "B")
    if args.seeds is None and args.method != "geh":
        raise ValueError(f"--method {args.method} needs --seeds (only geh finds its own)")
    seeds = None if args.seeds is None else read_seeds(args.seeds)
    if args.method == "geh":
        linker = GEHLinker(
            max_iter=args.max_iter,
            sample=_row_sample(args.sample_rows, args.row_sample),
            random_state=args.seed,
            num_threads=args.num_threads,
            show_progress_bar=not args.quiet,
        )
        with warnings.catch_warnings():  # an untrusted seed search warns; the summary line says so instead
            warnings.filterwarnings("ignore", message="no seed pairs found", category=RuntimeWarning)
            res = linker.link(A, B, seeds)
    elif args.method == "procrustes":
        res = procrustes_link(A, B, seeds)
    elif args.method == "relative":
        res = relative_link(A, B, seeds)
    else:
        res = bootstrap_procrustes_link(A, B, seeds)
    if args.out:
        res.to_csv(args.out)
    where = f" -> {args.out}" if args.out else ""
    print_result(res.as_dict(), args.json, lambda _: f"{len(res)} links from {_from(res, seeds)}{where}")
    return 0


def _from(res, seeds) -> str:
    """Where the links came from, for the summary line."""
    if seeds is not None:
        return f"{len(seeds)} seeds ({len(res.history)} rounds)"
    found = f"{len(res.seeds_found)} seeds found, confidence {res.seed_confidence:.2f}"
    if len(res.history) == 1:  # the search alone: its seeds were not trusted
        return f"no seeds: {found}, below the search's minimum; pass --seeds"
    return f"{found} ({len(res.history) - 1} rounds)"
