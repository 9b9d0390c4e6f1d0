"""``crossembed link`` and ``crossembed link-table``.

``link`` links two saved matrices from a seed CSV; ``link-table`` reruns the
real-encoder experiments and writes the table into docs/linking.md between
the ``<!-- link-table -->`` markers. Bad files raise ValueError /
FileNotFoundError, which the dispatcher prints as one line (exit 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from crossembed._io import atomic_write

_START, _END = "<!-- link-table:start -->", "<!-- link-table:end -->"


def register(subparsers) -> None:
    p = subparsers.add_parser("link", help="link the rows of two embedding matrices (GEH or a baseline)")
    p.add_argument("a", help="A.npy: (N_A, D_A) embeddings from encoder A")
    p.add_argument("b", help="B.npy: (N_B, D_B) embeddings from encoder B")
    p.add_argument("--seeds", required=True, help="CSV of known pairs: row_in_A,row_in_B (a header line is allowed)")
    p.add_argument("--out", help="write links as CSV (a,b,posterior,votes)")
    p.add_argument("--method", default="geh", choices=["geh", "procrustes", "relative", "bootstrap-procrustes"])
    p.add_argument("--promotion", default="validated", choices=["paper", "capped", "validated"])
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="random_state")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print a JSON summary (with the links)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_link)

    t = subparsers.add_parser("link-table", help="rerun the real-encoder linking table into docs/linking.md")
    t.add_argument(
        "--pairs",
        default="minilm:mpnet:3000,minilm:e5:10000,minilm:use:10000",
        help="comma list of encA:encB:corpus_size",
    )
    t.add_argument("--settings", default="0.3:15", help="comma list of alpha:n_seeds")
    t.add_argument("--methods", default=None, help="comma list (default: all)")
    t.add_argument("--draws", type=int, default=5)
    t.add_argument("--n-objects", type=int, default=1000, help="glosses sampled per draw")
    t.add_argument("--max-iter", type=int, default=15)
    t.add_argument("--results", default="docs/linking_results.json", help="resumable JSON of every run")
    t.add_argument("--out", default="docs/linking.md", help="markdown file with the link-table markers")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--render-only", action="store_true", help="only re-render the table from --results")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=_link_table)

    c = subparsers.add_parser("link-scale", help="time GEH fits and single views on synthetic data of growing N")
    c.add_argument("--sizes", default="1000,3000,10000", help="rows per side for full fits (comma list)")
    c.add_argument("--view-sizes", default="3000,10000", help="rows per side for single-view timings")
    c.add_argument("--max-iter", type=int, default=10)
    c.add_argument("--candidates", default="pool", choices=["exact", "pool", "ann"])
    c.add_argument("--results", default="docs/linking_scale.json")
    c.add_argument("--plot", default="docs/linking_scale.png", help="log-log growth curve PNG")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_link_scale)


def _load_matrix(path: str, name: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{name} file {path!r} does not exist")
    try:
        arr = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{name} file {path!r} is not a readable .npy array ({str(exc).splitlines()[0]})") from None
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        raise ValueError(f"{name} file {path!r} must hold a 2-D array, got shape {getattr(arr, 'shape', None)}")
    return arr


def read_seeds(path: str) -> np.ndarray:
    """Two integer columns ``row_in_A,row_in_B``; one optional header line."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"seeds file {path!r} does not exist")
    rows = []
    header_allowed = True
    for n, line in enumerate(p.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 2:
            raise ValueError(f"seeds file {path!r} line {n}: expected 2 comma-separated columns, got {len(parts)}")
        try:
            rows.append((int(parts[0]), int(parts[1])))
        except ValueError:
            if not header_allowed:
                raise ValueError(f"seeds file {path!r} line {n}: {line!r} is not two integers") from None
        header_allowed = False
    if not rows:
        raise ValueError(f"seeds file {path!r} holds no pairs")
    return np.asarray(rows, dtype=np.int64)


def _link(args) -> int:
    from crossembed.linking.baselines import bootstrap_procrustes_link, procrustes_link, relative_link
    from crossembed.linking.geh import GEHLinker

    A = _load_matrix(args.a, "A")
    B = _load_matrix(args.b, "B")
    seeds = read_seeds(args.seeds)
    if args.method == "geh":
        res = GEHLinker(
            promotion=args.promotion,
            max_iter=args.max_iter,
            random_state=args.seed,
            num_threads=args.threads,
            progress=not args.no_progress,
        ).fit(A, B, seeds)
    elif args.method == "procrustes":
        res = procrustes_link(A, B, seeds)
    elif args.method == "relative":
        res = relative_link(A, B, seeds)
    else:
        res = bootstrap_procrustes_link(A, B, seeds)
    if args.out:
        res.to_csv(args.out)
    if args.json:
        print(json.dumps(res.as_dict()))
    else:
        where = f" -> {args.out}" if args.out else ""
        print(f"{len(res)} links from {len(seeds)} seeds ({len(res.history)} rounds){where}")
    return 0


def _parse_list(text: str, arity: int, name: str, types):
    out = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != arity:
            raise ValueError(f"--{name} item {item!r} must have {arity} ':'-separated fields")
        try:
            out.append(tuple(t(x) for t, x in zip(types, parts)))
        except ValueError:
            raise ValueError(f"--{name} item {item!r} has a malformed number") from None
    return out


def write_table(markdown: str, out: str) -> None:
    """Replace the text between the link-table markers of ``out`` (append them if missing)."""
    p = Path(out)
    text = p.read_text() if p.is_file() else "# GEH vector linking\n"
    block = f"{_START}\n{markdown}\n{_END}"
    if _START in text and _END in text:
        text = text[: text.index(_START)] + block + text[text.index(_END) + len(_END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write(p, text.encode())


def _link_table(args) -> int:
    from crossembed.linking.experiments import METHODS, render_markdown, run_table

    if args.render_only:
        p = Path(args.results)
        if not p.is_file():
            raise FileNotFoundError(f"results file {args.results!r} does not exist")
        records = json.loads(p.read_text())
    else:
        pairs = _parse_list(args.pairs, 3, "pairs", (str, str, int))
        settings = _parse_list(args.settings, 2, "settings", (float, int))
        methods = tuple(args.methods.split(",")) if args.methods else tuple(METHODS)
        records = run_table(
            pairs=pairs,
            settings=settings,
            methods=methods,
            n_draws=args.draws,
            n_objects=args.n_objects,
            max_iter=args.max_iter,
            results_path=args.results,
            seed=args.seed,
            log=lambda s: print(s, file=sys.stderr, flush=True),
        )
    md = render_markdown(records)
    write_table(md, args.out)
    print(json.dumps(records) if args.json else md)
    return 0


def _ints(text: str, name: str):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} must be a comma list of integers, got {text!r}") from None


def _link_scale(args) -> int:
    from crossembed.linking.experiments import plot_scaling, time_scaling

    records = time_scaling(
        _ints(args.sizes, "sizes"),
        max_iter=args.max_iter,
        view_sizes=_ints(args.view_sizes, "view-sizes"),
        results_path=args.results,
        candidates=args.candidates,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    if args.plot:
        plot_scaling(records, args.plot)
    print(json.dumps(records) if args.json else "\n".join(map(str, records)))
    return 0
