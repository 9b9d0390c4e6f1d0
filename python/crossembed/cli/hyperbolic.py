"""CLI: ``crossembed train-uncha``, ``eval-uncha``, ``uncha-table``, ``embed-wordnet``."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

__all__ = ["register"]


def _threads(n: int) -> None:
    import torch

    if n < 1:
        raise ValueError(f"--threads must be >= 1, got {n}")
    torch.set_num_threads(n)


def _train_config(args):
    from crossembed.hyperbolic.train import TrainConfig

    return TrainConfig(
        model=args.model,
        steps=args.steps,
        batch_size=args.batch_size,
        n_train=args.n_train,
        dim=args.dim,
        seed=getattr(args, "seed", 0),
        lr=args.lr,
        lam=args.lam,
    )


def _add_train_options(p) -> None:
    p.add_argument("--steps", type=int, default=500, help="optimisation steps (default 500)")
    p.add_argument("--batch-size", type=int, default=64, help="scenes per batch (default 64)")
    p.add_argument("--n-train", type=int, default=6000, help="generated training scenes (default 6000)")
    p.add_argument("--dim", type=int, default=64, help="embedding dimension (default 64)")
    p.add_argument("--lr", type=float, default=5e-4, help="AdamW learning rate (default 5e-4)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the machine is shared)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _print(result, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=1, default=float))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v:.4f}" if isinstance(v, float) else f"{k:>22}: {v}")


def _cmd_train(args) -> int:
    from crossembed.experiments.uncha_plots import plot_history
    from crossembed.hyperbolic.train import train

    _threads(args.threads)
    cfg = _train_config(args)
    res = train(cfg, out=args.out, resume=args.resume, progress=not args.no_progress)
    plot_history({cfg.model: res.history}, Path(args.out) / "loss.png")
    if args.plot:
        plot_history({cfg.model: res.history}, args.plot)
    out = {
        "model": cfg.model,
        "seed": cfg.seed,
        "checkpoint": str(Path(args.out) / "checkpoint.cemb"),
        "final_loss": float(res.history["loss"][-1]),
        "train_seconds": res.seconds,
        "scenes_per_second": res.scenes_per_second,
        "images_per_second": res.images_per_second,
    }
    _print(out, args.json)
    return 0


def _cmd_eval(args) -> int:
    from crossembed.experiments.uncha_plots import plot_radii
    from crossembed.hyperbolic.evaluate import evaluate, make_test_set
    from crossembed.hyperbolic.train import load_checkpoint

    _threads(args.threads)
    model, cfg, step, _hist, _meta = load_checkpoint(args.checkpoint)
    test = make_test_set(
        n_scenes=args.n_test, n_items=args.n_items, canvas=cfg.canvas, part_size=cfg.part_size, max_items=cfg.max_items
    )
    res = evaluate(model, test, return_embeddings=bool(args.plot))
    emb = res.pop("embeddings", None)
    if args.plot and model.hyperbolic:
        plot_radii({cfg.model: (model, emb)}, args.plot)
    _print({"model": cfg.model, "seed": cfg.seed, "step": step, **res}, args.json)
    return 0


def _cmd_table(args) -> int:
    from crossembed.experiments.uncha_table import public_result, run_comparison, write_report
    from crossembed.hyperbolic.train import TrainConfig

    _threads(args.threads)
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    models = args.models.split(",") if args.models else list(MODEL_NAMES)
    for m in models:
        if m not in MODEL_NAMES:
            raise ValueError(f"--models: unknown model {m!r} (choose from {', '.join(MODEL_NAMES)})")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"directory {str(out.parent)!r} does not exist")
    base = TrainConfig(steps=args.steps, batch_size=args.batch_size, n_train=args.n_train, dim=args.dim, lr=args.lr)
    result = run_comparison(
        seeds=list(range(args.seed, args.seed + args.seeds)),
        models=models,
        base=base,
        n_test=args.n_test,
        n_items=args.n_items,
        work=Path(args.work) if args.work else None,
        progress=not args.no_progress,
    )
    command = "crossembed " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["uncha-table"] else ""
    written = write_report(result, out, command=command)
    pub = public_result(result)
    if args.json:
        print(json.dumps(pub, indent=1, default=float))
    else:
        print(f"wrote {', '.join(map(str, written))} in {pub['wall_seconds'] / 60:.1f} min")
    return 0


def _cmd_wordnet(args) -> int:
    from crossembed.hyperbolic.wordnet_embedding import run

    _threads(args.threads)
    res = run(
        root=args.root,
        dim=args.dim,
        epochs=args.epochs,
        negatives=args.negatives,
        lr=args.lr,
        entailment_weight=args.entailment_weight,
        seed=args.seed,
        progress=not args.no_progress,
        max_nodes=args.max_nodes,
    )
    if args.plot:
        from crossembed.experiments.uncha_plots import plot_radius_by_depth

        plot_radius_by_depth(*res.pop("_embedding"), args.plot)
    res.pop("_embedding", None)
    _print(res, args.json)
    return 0


# The names of crossembed.hyperbolic.losses.PRESETS, spelled out so that
# building the CLI parser does not import torch (a test keeps them equal).
MODEL_NAMES = ("clip", "meru", "hycoclip", "uncha", "uncha-no-unc-temp", "uncha-no-entropy")


def register(subparsers) -> None:
    """Add the UNCHA sub-commands to the ``crossembed`` parser."""
    p = subparsers.add_parser(
        "train-uncha",
        help="train one image-text model (CLIP/MERU/HyCoCLIP/UNCHA/ablations)",
        description="Train one model on generated Fashion-MNIST scenes; writes OUT/checkpoint.cemb and OUT/loss.png.",
    )
    p.add_argument("--model", choices=MODEL_NAMES, default="uncha")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output directory (checkpoint, loss plot)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.cemb")
    p.add_argument("--lam", type=float, default=None, help="entailment weight lambda (default: the model's, 0.2)")
    p.add_argument("--plot", help="also save the loss curve to this PNG")
    _add_train_options(p)
    p.set_defaults(func=_cmd_train)

    p = subparsers.add_parser(
        "eval-uncha",
        help="evaluate a checkpoint written by train-uncha",
        description="Zero-shot item classification, scene retrieval, part->scene retrieval, Spearman(u, representativeness).",
    )
    p.add_argument("checkpoint", help="checkpoint.cemb or the directory holding it")
    p.add_argument("--n-test", type=int, default=1000, help="test scenes (default 1000)")
    p.add_argument("--n-items", type=int, default=2000, help="test items for zero-shot (default 2000)")
    p.add_argument("--plot", help="save the embedding radius distribution to this PNG")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_eval)

    p = subparsers.add_parser(
        "uncha-table",
        help="train and evaluate every model over several seeds",
        description="CLIP, MERU, HyCoCLIP, UNCHA and two UNCHA ablations x seeds; writes a markdown table and plots.",
    )
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--models", help=f"comma-separated subset of {','.join(MODEL_NAMES)}")
    p.add_argument(
        "--out",
        default="docs/uncha.md",
        help="markdown file (the table replaces the marked block); plots go next to it",
    )
    p.add_argument("--work", help="directory for per-run checkpoints; finished runs are reused (resumable table)")
    p.add_argument("--n-test", type=int, default=1000)
    p.add_argument("--n-items", type=int, default=2000)
    _add_train_options(p)
    p.set_defaults(func=_cmd_table)

    p = subparsers.add_parser(
        "embed-wordnet",
        help="embed the WordNet noun hierarchy in the Lorentz model",
        description="Lorentz embedding of a WordNet noun subtree's transitive closure; reports mean rank and MAP of reconstruction.",
    )
    p.add_argument(
        "--root",
        default="mammal.n.01",
        help="subtree root as lemma.n.NN, or 'all' for every noun (default mammal.n.01)",
    )
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--negatives", type=int, default=50)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument(
        "--entailment-weight",
        type=float,
        default=0.0,
        help="weight of the entailment-cone term (default 0: it lowered reconstruction on mammals, see docs/uncha.md)",
    )
    p.add_argument("--max-nodes", type=int, default=None, help="cap on nodes (largest first by BFS from the root)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", help="save radius-by-depth plot to this PNG")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_wordnet)
