"""CLI: ``crossembed train-uncha``, ``eval-uncha``, ``embed-wordnet``.

Nothing is written into the repository by default: ``train-uncha`` writes
under its required ``--out``, and plots are only drawn where ``--plot``
says. The option helpers the UNCHA verbs share (:func:`add_train_options`,
:func:`train_config`, :func:`set_threads`) are public: the harness's
``uncha-table`` and ``uncha-curve`` take the same options.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import numpy as np

from crossembed._validation import check_num_threads
from crossembed.cli.options import add_num_threads, add_output_flags, add_seed, float_arg, int_arg, print_result

__all__ = ["register", "add_train_options", "add_common", "train_config", "set_threads", "MODEL_NAMES", "THREADS_NOTE"]

# The names of crossembed.hyperbolic.losses.PRESETS, spelled out so that
# building the CLI parser does not import torch (a test keeps them equal).
MODEL_NAMES = ("clip", "meru", "hycoclip", "uncha", "uncha-no-unc-temp", "uncha-no-entropy")

# add_num_threads has no help of its own to extend, so the reason for the default goes in each epilog
THREADS_NOTE = (
    "--num-threads defaults to 1 (torch and the C++ kernels): torch's float sums can change with the thread "
    "count and the reported scenes/s and speed-ups are per core, so one thread keeps runs reproducible and "
    "timings comparable across machines."
)


def set_threads(num_threads: Optional[int]) -> None:
    """torch threads for this run (``None`` leaves torch's default: all cores)."""
    import torch

    n = check_num_threads(num_threads)
    if n:
        torch.set_num_threads(n)


def train_config(args, **overrides):
    """The :class:`~crossembed.hyperbolic.train.TrainConfig` of the options of :func:`add_train_options`."""
    from crossembed.hyperbolic.train import EncoderConfig, OptimiserConfig, SceneConfig, TrainConfig

    return TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        optimiser=OptimiserConfig(lr=args.lr),
        scenes=SceneConfig(n_train=args.n_train),
        encoder=EncoderConfig(dim=args.dim),
        **overrides,
    )


def add_train_options(p, *, steps: str = "500", batch_size: str = "64") -> None:
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


def add_common(p) -> None:
    """``--num-threads`` (default 1), ``--json`` and ``--quiet``."""
    add_num_threads(p, default=1)
    add_output_flags(p)


# --------------------------------------------------------------------------- commands
def _cmd_train(args) -> int:
    from crossembed.cli.plots import plot_history
    from crossembed.hyperbolic.train import CHECKPOINT_NAME, train

    set_threads(args.num_threads)
    cfg = train_config(args, model=args.model, seed=args.seed, lam=args.lam)
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
    from crossembed.cli.plots import plot_radii
    from crossembed.hyperbolic.evaluate import evaluate, make_test_set
    from crossembed.hyperbolic.train import load_checkpoint

    set_threads(args.num_threads)
    model, cfg, step, _hist, _meta = load_checkpoint(args.checkpoint)
    scenes = cfg.scenes
    test = make_test_set(n_scenes=args.n_test, n_items=args.n_items, canvas=scenes.canvas, max_items=scenes.max_items)
    res = evaluate(model, test, return_embeddings=bool(args.plot), num_threads=args.num_threads)
    emb = res.pop("embeddings", None)
    if args.plot and model.hyperbolic:
        plot_radii({cfg.model: (model, emb)}, args.plot)
    print_result({"model": cfg.model, "seed": cfg.seed, "step": step, **res}, args.json)
    return 0


def _cmd_wordnet(args) -> int:
    from crossembed.hyperbolic.wordnet_embedding import embed_hierarchy, load_hierarchy, reconstruction

    set_threads(args.num_threads)
    t0 = time.perf_counter()
    h = load_hierarchy(args.root, max_nodes=args.max_nodes)
    t1 = time.perf_counter()
    emb, losses = embed_hierarchy(
        h,
        dim=args.dim,
        epochs=args.epochs,
        negatives=args.negatives,
        lr=args.lr,
        entailment_weight=args.entailment_weight,
        random_state=args.seed,
        show_progress_bar=not args.quiet,
    )
    t2 = time.perf_counter()
    rec = reconstruction(emb, h, num_threads=args.num_threads)
    t3 = time.perf_counter()
    radius = np.arcsinh(np.linalg.norm(emb, axis=1))
    if args.plot:
        from crossembed.cli.plots import plot_radius_by_depth

        plot_radius_by_depth(emb, h, args.plot)
    res = {
        "root": args.root,
        "nodes": len(h),
        "closure_edges": int(len(h.closure)),
        "dim": args.dim,
        "epochs": args.epochs,
        **rec,
        "final_loss": losses[-1],
        "corr_depth_radius": float(np.corrcoef(h.depth, radius)[0, 1]) if len(h) > 2 else float("nan"),
        "load_s": t1 - t0,
        "train_s": t2 - t1,
        "eval_s": t3 - t2,
    }
    print_result(res, args.json)
    return 0


# --------------------------------------------------------------------------- parsers
def register(subparsers) -> None:
    """Add the UNCHA sub-commands to the ``crossembed`` parser."""
    for add in (_add_train_parser, _add_eval_parser, _add_wordnet_parser):
        add(subparsers)


def _add_train_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-uncha",
        help="train one image-text model (CLIP/MERU/HyCoCLIP/UNCHA/ablations)",
        description="Train one model on generated Fashion-MNIST scenes; writes OUT/checkpoint.cemb and OUT/loss.png.",
        epilog=THREADS_NOTE,
    )
    p.add_argument("--model", choices=MODEL_NAMES, default="uncha")
    add_seed(p)
    p.add_argument("--out", required=True, help="output directory (checkpoint, loss plot)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.cemb")
    p.add_argument(
        "--lam", type=float_arg(0), default=None, help="entailment weight lambda (default: the model's, 0.2)"
    )
    p.add_argument("--plot", help="also save the loss curve to this PNG")
    add_train_options(p)
    add_common(p)
    p.set_defaults(func=_cmd_train, output_dirs=("out",))


def _add_eval_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval-uncha",
        help="evaluate a checkpoint written by train-uncha",
        description="Zero-shot item classification, scene retrieval, part->scene retrieval, Spearman(u, representativeness).",
        epilog=THREADS_NOTE,
    )
    p.add_argument("checkpoint", help="checkpoint.cemb or the directory holding it")
    p.add_argument("--n-test", type=int_arg(1), default=1000, help="test scenes (default 1000)")
    p.add_argument("--n-items", type=int_arg(1), default=2000, help="test items for zero-shot (default 2000)")
    p.add_argument("--plot", help="save the embedding radius distribution to this PNG")
    add_common(p)
    p.set_defaults(func=_cmd_eval)


def _add_wordnet_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "embed-wordnet",
        help="embed the WordNet noun hierarchy in the Lorentz model",
        description="Lorentz embedding of a WordNet noun subtree's transitive closure; reports mean rank and MAP of reconstruction.",
        epilog=THREADS_NOTE,
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
    add_common(p)
    p.set_defaults(func=_cmd_wordnet)
