"""CLI: ``crossembed train-uncha``, ``eval-uncha``, ``uncha-curve``, ``uncha-table``, ``embed-wordnet``.

Nothing is written into the repository by default: ``train-uncha`` writes
under its required ``--out``, ``uncha-table`` prints the markdown table unless
``--out`` names the document (plots go next to it), and plots are only drawn
where ``--plot`` says.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from crossembed._validation import check_choice, check_int, check_num_threads
from crossembed.cli.options import (
    add_num_threads,
    add_output_flags,
    add_seed,
    command_line,
    float_arg,
    int_arg,
    print_result,
    split_list,
)

__all__ = ["register"]

# The names of crossembed.hyperbolic.losses.PRESETS, spelled out so that
# building the CLI parser does not import torch (a test keeps them equal).
MODEL_NAMES = ("clip", "meru", "hycoclip", "uncha", "uncha-no-unc-temp", "uncha-no-entropy")

# add_num_threads has no help of its own to extend, so the reason for the default goes in each epilog
_THREADS_NOTE = (
    "--num-threads defaults to 1 (torch and the C++ kernels): torch's float sums can change with the thread "
    "count and the reported scenes/s and speed-ups are per core, so one thread keeps runs reproducible and "
    "timings comparable across machines."
)


def _set_threads(num_threads: Optional[int]) -> None:
    """torch threads for this run (``None`` leaves torch's default: all cores)."""
    import torch

    n = check_num_threads(num_threads)
    if n:
        torch.set_num_threads(n)


def _train_config(args, **overrides):
    from crossembed.hyperbolic.train import EncoderConfig, OptimiserConfig, SceneConfig, TrainConfig

    return TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        optimiser=OptimiserConfig(lr=args.lr),
        scenes=SceneConfig(n_train=args.n_train),
        encoder=EncoderConfig(dim=args.dim),
        **overrides,
    )


def _add_train_options(p, *, steps: str = "500", batch_size: str = "64") -> None:
    """``steps``/``batch_size``: the defaults as the help shows them (digits, or a sentence for a None default)."""
    p.add_argument(
        "--steps",
        type=int_arg(1),
        default=int(steps) if steps.isdigit() else None,
        help=f"optimisation steps (default {steps})",
    )
    p.add_argument(
        "--batch-size",
        type=int_arg(1),
        default=int(batch_size) if batch_size.isdigit() else None,
        help=f"scenes (or drawings) per batch (default {batch_size})",
    )
    p.add_argument("--n-train", type=int_arg(1), default=6000, help="generated training scenes (default 6000)")
    p.add_argument("--dim", type=int_arg(1), default=64, help="embedding dimension (default 64)")
    p.add_argument("--lr", type=float_arg(0), default=5e-4, help="AdamW learning rate (default 5e-4)")


def _add_common(p) -> None:
    add_num_threads(p, default=1)
    add_output_flags(p)


# --------------------------------------------------------------------------- commands
def _cmd_train(args) -> int:
    from experiments.uncha_plots import plot_history
    from crossembed.hyperbolic.train import CHECKPOINT_NAME, train

    _set_threads(args.num_threads)
    cfg = _train_config(args, model=args.model, seed=args.seed, lam=args.lam)
    res = train(cfg, out=args.out, resume=args.resume, show_progress_bar=not args.quiet)
    plot_history({cfg.model: res.history}, Path(args.out) / "loss.png")
    if args.plot:
        plot_history({cfg.model: res.history}, args.plot)
    out = {
        "model": cfg.model,
        "seed": cfg.seed,
        "checkpoint": str(Path(args.out) / CHECKPOINT_NAME),
        "final_loss": float(res.history["loss"][-1]),
        "train_seconds": res.seconds,
        "scenes_per_second": res.scenes_per_second,
        "images_per_second": res.images_per_second,
    }
    print_result(out, args.json)
    return 0


def _cmd_eval(args) -> int:
    from experiments.uncha_plots import plot_radii
    from crossembed.hyperbolic.evaluate import evaluate, make_test_set
    from crossembed.hyperbolic.train import load_checkpoint

    _set_threads(args.num_threads)
    model, cfg, step, _hist, _meta = load_checkpoint(args.checkpoint)
    scenes = cfg.scenes
    test = make_test_set(n_scenes=args.n_test, n_items=args.n_items, canvas=scenes.canvas, max_items=scenes.max_items)
    res = evaluate(model, test, return_embeddings=bool(args.plot), num_threads=args.num_threads)
    emb = res.pop("embeddings", None)
    if args.plot and model.hyperbolic:
        plot_radii({cfg.model: (model, emb)}, args.plot)
    print_result({"model": cfg.model, "seed": cfg.seed, "step": step, **res}, args.json)
    return 0


# --steps / --batch-size of uncha-table when not given, per dataset (docs/uncha_openclipart.md says why)
_TABLE_DEFAULTS = {"fashion-mnist": (500, 64), "openclipart": (1000, 128)}


def _cmd_table(args) -> int:
    from experiments.uncha_table import public_result, render_markdown, run_comparison, write_report

    _set_threads(args.num_threads)
    n_seeds = check_int(args.seeds, "--seeds", low=1)
    models = split_list(args.models, "models") if args.models else list(MODEL_NAMES)
    for m in models:
        check_choice(m, "--models", MODEL_NAMES)
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():  # fail before the long run, not after it
        raise FileNotFoundError(f"directory {str(out.parent)!r} does not exist")
    steps, batch_size = _TABLE_DEFAULTS[args.dataset]
    args.steps = steps if args.steps is None else args.steps
    args.batch_size = batch_size if args.batch_size is None else args.batch_size
    if args.dataset == "openclipart":
        return _table_openclipart(args, models, n_seeds, out)
    result = run_comparison(
        seeds=list(range(args.seed, args.seed + n_seeds)),
        models=models,
        base=_train_config(args),
        n_test=args.n_test,
        n_items=args.n_items,
        work=Path(args.work) if args.work else None,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
    )
    # called as main([...]) (tests, scripts) sys.argv is someone else's command line
    command = command_line() if sys.argv[1:2] == ["uncha-table"] else ""
    pub = public_result(result)
    if out is not None:
        written = write_report(result, out, command=command)
        pub["written"] = [str(p) for p in written]
        print_result(pub, args.json, lambda r: f"wrote {', '.join(r['written'])} in {r['wall_seconds'] / 60:.1f} min")
    else:
        print_result(pub, args.json, lambda _r: render_markdown(result, command=command))
    return 0


def _table_openclipart(args, models, n_seeds: int, out: Optional[Path]) -> int:
    from experiments._report import replace_block
    from experiments.uncha_clipart_data import clipart_features
    from experiments.uncha_openclipart import BLOCK, TITLE, render_openclipart, run_openclipart

    feats = {
        name: clipart_features(
            name,
            cache_dir=args.cache_dir,
            max_images=args.max_images if name == "openclipart" else None,
            num_threads=args.num_threads,
            show_progress_bar=not args.quiet,
        )
        for name in ("openclipart", "tuxpaint")
    }
    result = run_openclipart(
        feats["openclipart"],
        feats["tuxpaint"],
        seeds=list(range(args.seed, args.seed + n_seeds)),
        models=models,
        base=_train_config(args),
        work=Path(args.work) if args.work else None,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
    )
    command = command_line() if sys.argv[1:2] == ["uncha-table"] else ""
    markdown = render_openclipart(result, command=command)
    if out is not None:
        result["written"] = [str(replace_block(out, BLOCK, markdown, title=TITLE))]
        print_result(result, args.json, lambda r: f"wrote {r['written'][0]} in {r['wall_seconds'] / 60:.1f} min")
    else:
        print_result(result, args.json, lambda _r: markdown)
    return 0


def _cmd_curve(args) -> int:
    from experiments._report import replace_block
    from experiments.uncha_curve import CURVE_BLOCK, CURVE_METRICS, learning_curve, render_curve
    from experiments.uncha_plots import plot_learning_curve

    _set_threads(args.num_threads)
    models = split_list(args.models, "models") if args.models else ["clip", "hycoclip", "uncha"]
    for m in models:
        check_choice(m, "--models", MODEL_NAMES)
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():  # fail before the long run, not after it
        raise FileNotFoundError(f"directory {str(out.parent)!r} does not exist")
    result = learning_curve(
        models=models,
        seed=args.seed,
        steps=args.steps,
        every=args.every,
        base=_train_config(args),
        n_test=args.n_test,
        n_items=args.n_items,
        work=Path(args.work) if args.work else None,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
    )
    command = command_line() if sys.argv[1:2] == ["uncha-curve"] else ""
    if out is not None:
        png = plot_learning_curve(result["rows"], CURVE_METRICS, out.with_name(f"{out.stem}_curve.png"))
        replace_block(out, CURVE_BLOCK, render_curve(result, command=command, plot=png.name))
        result["written"] = [str(png), str(out)]
        print_result(
            result, args.json, lambda r: f"wrote {', '.join(r['written'])} in {r['wall_seconds'] / 60:.1f} min"
        )
    else:
        print_result(result, args.json, lambda r: render_curve(r, command=command))
    return 0


def _cmd_wordnet(args) -> int:
    from crossembed.hyperbolic.wordnet_embedding import run

    _set_threads(args.num_threads)
    res = run(
        root=args.root,
        dim=args.dim,
        epochs=args.epochs,
        negatives=args.negatives,
        lr=args.lr,
        entailment_weight=args.entailment_weight,
        random_state=args.seed,
        max_nodes=args.max_nodes,
        show_progress_bar=not args.quiet,
        num_threads=args.num_threads,
    )
    embedding, hierarchy = res.pop("_embedding")
    if args.plot:
        from experiments.uncha_plots import plot_radius_by_depth

        plot_radius_by_depth(embedding, hierarchy, args.plot)
    print_result(res, args.json)
    return 0


# --------------------------------------------------------------------------- parsers
def register(subparsers) -> None:
    """Add the UNCHA sub-commands to the ``crossembed`` parser."""
    for add in (_add_train_parser, _add_eval_parser, _add_curve_parser, _add_table_parser, _add_wordnet_parser):
        add(subparsers)


def _add_train_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-uncha",
        help="train one image-text model (CLIP/MERU/HyCoCLIP/UNCHA/ablations)",
        description="Train one model on generated Fashion-MNIST scenes; writes OUT/checkpoint.cemb and OUT/loss.png.",
        epilog=_THREADS_NOTE,
    )
    p.add_argument("--model", choices=MODEL_NAMES, default="uncha")
    add_seed(p)
    p.add_argument("--out", required=True, help="output directory (checkpoint, loss plot)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.cemb")
    p.add_argument(
        "--lam", type=float_arg(0), default=None, help="entailment weight lambda (default: the model's, 0.2)"
    )
    p.add_argument("--plot", help="also save the loss curve to this PNG")
    _add_train_options(p)
    _add_common(p)
    p.set_defaults(func=_cmd_train, output_dirs=("out",))


def _add_eval_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval-uncha",
        help="evaluate a checkpoint written by train-uncha",
        description="Zero-shot item classification, scene retrieval, part->scene retrieval, Spearman(u, representativeness).",
        epilog=_THREADS_NOTE,
    )
    p.add_argument("checkpoint", help="checkpoint.cemb or the directory holding it")
    p.add_argument("--n-test", type=int_arg(1), default=1000, help="test scenes (default 1000)")
    p.add_argument("--n-items", type=int_arg(1), default=2000, help="test items for zero-shot (default 2000)")
    p.add_argument("--plot", help="save the embedding radius distribution to this PNG")
    _add_common(p)
    p.set_defaults(func=_cmd_eval)


def _add_curve_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "uncha-curve",
        help="learning curve (constant lr, one seed) that sets the table's step budget",
        description="Train each model once with a constant learning rate and evaluate every --every steps; "
        "prints a markdown table (or writes it into --out's uncha-curve block, plot next to it).",
        epilog=_THREADS_NOTE,
    )
    p.add_argument("--models", help=f"comma-separated subset of {','.join(MODEL_NAMES)} (default clip,hycoclip,uncha)")
    add_seed(p)
    p.add_argument("--every", type=int_arg(1), default=250, help="evaluate every this many steps (default 250)")
    p.add_argument("--out", default=None, help="markdown file whose uncha-curve block is replaced")
    p.add_argument("--work", help="directory for the runs' checkpoints (default: a temporary one)")
    p.add_argument("--n-test", type=int_arg(1), default=500, help="test scenes (default 500)")
    p.add_argument("--n-items", type=int_arg(1), default=1000, help="test items for zero-shot (default 1000)")
    _add_train_options(p)
    _add_common(p)
    p.set_defaults(func=_cmd_curve)


def _add_table_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "uncha-table",
        help="train and evaluate every model over several seeds",
        description="CLIP, MERU, HyCoCLIP, UNCHA and two UNCHA ablations x seeds; prints a markdown table "
        "(or writes it into --out with plots next to it). --dataset fashion-mnist trains small towers from "
        "scratch on generated scenes; --dataset openclipart trains projection heads on frozen EfficientNet-Lite0 "
        "and minilm features of Openclipart drawings and tests them on held-out drawings and on TuxPaint stamps "
        "(Debian openclipart-png, openclipart-svg, tuxpaint-stamps-default; pip crossembed[vision]).",
        epilog=_THREADS_NOTE,
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
    _add_train_options(p, steps="500 (fashion-mnist) or 1000 (openclipart)", batch_size="64 or 128")
    _add_common(p)
    p.set_defaults(func=_cmd_table)


def _add_wordnet_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "embed-wordnet",
        help="embed the WordNet noun hierarchy in the Lorentz model",
        description="Lorentz embedding of a WordNet noun subtree's transitive closure; reports mean rank and MAP of reconstruction.",
        epilog=_THREADS_NOTE,
    )
    p.add_argument(
        "--root",
        default="mammal.n.01",
        help="subtree root as lemma.n.NN, or 'all' for every noun (default mammal.n.01)",
    )
    p.add_argument("--dim", type=int_arg(1), default=10, help="embedding dimension (default 10)")
    p.add_argument("--epochs", type=int_arg(1), default=300, help="passes over the closure (default 300)")
    p.add_argument("--negatives", type=int_arg(1), default=50, help="sampled negatives per pair (default 50)")
    p.add_argument("--lr", type=float_arg(0, above=True), default=0.1, help="Adam learning rate (default 0.1)")
    p.add_argument(
        "--entailment-weight",
        type=float_arg(0),
        default=0.0,
        help="weight of the entailment-cone term (default 0: it lowered reconstruction on mammals, see docs/uncha.md)",
    )
    p.add_argument(
        "--max-nodes", type=int_arg(2), default=None, help="cap on nodes (largest first by BFS from the root)"
    )
    add_seed(p)
    p.add_argument("--plot", help="save radius-by-depth plot to this PNG")
    _add_common(p)
    p.set_defaults(func=_cmd_wordnet)
