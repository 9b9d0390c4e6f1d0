"""``crossembed bench``: each C++ kernel against its numpy (and torch) baseline on this machine."""

from __future__ import annotations

import sys

from crossembed.cli._common import add_num_threads, add_seed, print_result

__all__ = ["register"]


def register(sub) -> None:
    from crossembed.experiments import kernel_bench

    p = sub.add_parser(
        "bench",
        help="time the C++ kernels against numpy/torch baselines on this machine",
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
    p.add_argument("--repeat", type=int, default=3, help="timed calls per function; the best one counts (default 3)")
    add_num_threads(p)
    add_seed(p, "seed of the generated data")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from crossembed.experiments import kernel_bench

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
