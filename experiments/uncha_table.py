"""The comparison table: every model x every seed, trained and evaluated alike.

``run_comparison`` trains CLIP, MERU, HyCoCLIP, UNCHA and the two ablations
for each seed on the same generated scenes (one set per seed), evaluates them
on one fixed test set, and returns per-run metrics plus mean +- std per
model. ``write_report`` renders the markdown table and the plots. With a
``work`` directory every finished run leaves a checkpoint there and a rerun
skips it, so an interrupted table resumes.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from crossembed.cli.plots import plot_history, plot_radii
from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.evaluate import evaluate, make_test_set
from crossembed.hyperbolic.losses import MODEL_NAMES
from crossembed.hyperbolic.train import (
    CHECKPOINT_NAME,
    TrainConfig,
    load_checkpoint,
    save_checkpoint,
    train,
    train_scenes,
)
from experiments._report import replace_block
from experiments.uncha_plots import plot_uncertainty
from experiments.uncha_speed import benchmark_topk

__all__ = ["run_comparison", "render_markdown", "write_plots", "write_report", "public_result", "METRICS"]

METRICS = (
    ("zs_part_acc", "zero-shot (item alone, part layout)"),
    ("zs_scene_acc", "zero-shot (centred)"),
    ("i2t_r1", "I->T R@1"),
    ("i2t_r5", "I->T R@5"),
    ("t2i_r1", "T->I R@1"),
    ("t2i_r5", "T->I R@5"),
    ("p2s_r1", "part->scene R@1"),
    ("p2s_r5", "part->scene R@5"),
    ("spearman_u_1mrep", "Spearman(u, 1-rep)"),
)
BLOCK = "uncha-table"  # docs/uncha.md holds <!-- uncha-table:start --> ... <!-- uncha-table:end -->
TITLE = "UNCHA comparison on Fashion-MNIST scenes"


def _finished(path: Path, config: TrainConfig):
    if not path.is_file():
        return None
    model, cfg, step, history, meta = load_checkpoint(path)
    if cfg != config or step != config.steps:
        return None
    return model, history, meta.get("extra", {})


def run_comparison(
    *,
    seeds: Sequence[int] = (0, 1, 2),
    models: Sequence[str] = MODEL_NAMES,
    base: Optional[TrainConfig] = None,
    n_test: int = 1000,
    n_items: int = 2000,
    work: Optional[Path] = None,
    show_progress_bar: bool = True,
    num_threads: Optional[int] = None,
    speed: bool = True,
) -> Dict:
    """Train and evaluate every (model, seed); see the module docstring.

    ``num_threads`` is for the C++ retrieval kernel (``None``: all cores); torch
    uses whatever ``torch.set_num_threads`` says. ``speed=False`` skips the
    timing of ``lorentz_topk`` against torch (the report says it was not measured).
    """
    base = base or TrainConfig()
    t_start = time.perf_counter()
    test = make_test_set(n_scenes=n_test, n_items=n_items, canvas=base.scenes.canvas, max_items=base.scenes.max_items)
    runs: List[Dict] = []
    histories: Dict[str, Dict] = {}
    embeddings: Dict[str, tuple] = {}
    bar = tqdm(total=len(seeds) * len(models), desc="uncha-table", disable=not show_progress_bar)
    for seed in seeds:
        data = None
        for name in models:
            cfg = replace(base, model=name, seed=int(seed))
            run_dir = Path(work) / f"{name}-s{seed}" if work is not None else None
            done = _finished(run_dir / CHECKPOINT_NAME, cfg) if run_dir is not None else None
            if done is not None:
                model, history, extra = done
                model.eval()
            else:
                data = data if data is not None else train_scenes(cfg)
                model, history, extra = _train_run(cfg, run_dir, data)
            metrics = evaluate(model, test, return_embeddings=(seed == seeds[0]), num_threads=num_threads)
            emb = metrics.pop("embeddings", None)
            if seed == seeds[0]:
                histories[name] = history
                if model.hyperbolic:
                    embeddings[name] = (model, emb)
            runs.append({"model": name, "seed": int(seed), **metrics, **extra})
            bar.update(1)
            bar.set_postfix(model=name, seed=seed)
    bar.close()
    return {
        "runs": runs,
        "summary": {name: _summary([r for r in runs if r["model"] == name]) for name in models},
        "speed": _speed(embeddings) if speed else {"error": "skipped"},
        "config": base.get_config(),
        "seeds": [int(s) for s in seeds],
        "n_test_scenes": n_test,
        "n_test_parts": int(len(test.scenes.parts)),
        "n_items": int(len(test.item_labels)),
        "backend": sorted({r["backend"] for r in runs}),
        "wall_seconds": time.perf_counter() - t_start,
        "machine": f"{platform.machine()}, torch threads {torch.get_num_threads()}",
        "_histories": histories,
        "_embeddings": embeddings,
        "_test": test,
    }


def _train_run(cfg: TrainConfig, run_dir: Optional[Path], data):
    """Train one (model, seed); ``(model, history, throughput)``, the throughput also saved with the checkpoint."""
    res = train(cfg, out=run_dir, data=data, show_progress_bar=False)
    extra = {
        "scenes_per_second": res.scenes_per_second,
        "images_per_second": res.images_per_second,
        "train_seconds": res.seconds,
    }
    if run_dir is not None:  # record throughput with the finished checkpoint
        save_checkpoint(run_dir / CHECKPOINT_NAME, res.model, cfg, cfg.steps, res.history, extra=extra)
    return res.model, res.history, extra


def _summary(rows: List[Dict]) -> Dict[str, tuple]:
    """``(mean, sample std)`` over one model's runs, per metric and throughput figure."""
    out = {}
    for key, _ in METRICS + (("scenes_per_second", ""), ("images_per_second", ""), ("train_seconds", "")):
        vals = np.array([r.get(key, np.nan) for r in rows], float)
        out[key] = (float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0)
    return out


def _speed(embeddings: Dict) -> Dict:
    """C++ lorentz_topk vs the torch path on a retrieval-sized problem (UNCHA's curvature)."""
    try:
        c = float(embeddings["uncha"][0].curvature().detach()) if "uncha" in embeddings else 1.0
        g = torch.Generator().manual_seed(0)
        X = L.expmap0(torch.randn(500, 64, generator=g), c).numpy()
        Y = L.expmap0(torch.randn(10000, 64, generator=g), c).numpy()
        out = benchmark_topk(X, Y, 5, curvature=c, num_threads=1)
        out.update({"queries": 500, "gallery": 10000, "dim": 64, "k": 5, "threads": 1})
        return out
    except ImportError as exc:
        return {"error": str(exc)}


def _fmt(mean_std, pct=True) -> str:
    m, s = mean_std
    if not np.isfinite(m):
        return "n/a"
    return f"{100 * m:.1f} ± {100 * s:.1f}" if pct else f"{m:.3f} ± {s:.3f}"


# the two models whose uncertainty the scatter plot compares (fixed vs uncertainty-scaled temperature)
_UNCERTAINTY_MODELS = ("hycoclip", "uncha")


def write_plots(result: Dict, out: Union[str, os.PathLike]) -> Dict[str, Path]:
    """The loss, radius and uncertainty plots next to ``out`` (``STEM_loss.png`` and so on).

    Returns the written files by kind (``loss``, ``radius``, ``uncertainty``);
    the last two need hyperbolic models among the results.
    """
    out = Path(out)
    stem = out.stem
    written = {"loss": plot_history(result["_histories"], out.with_name(f"{stem}_loss.png"))}
    embeddings = result["_embeddings"]
    if embeddings:
        written["radius"] = plot_radii(embeddings, out.with_name(f"{stem}_radius.png"))
        parts = {n: embeddings[n][1]["part_image"] for n in _UNCERTAINTY_MODELS if n in embeddings}
        if parts:
            written["uncertainty"] = plot_uncertainty(parts, result["_test"], out.with_name(f"{stem}_uncertainty.png"))
    return written


def render_markdown(result: Dict, *, command: str = "", plots: Mapping[str, str] = ()) -> str:
    """The table, the speed line and the per-run JSON as markdown (no block markers).

    ``plots`` maps a kind of :func:`write_plots` to the image's link target;
    only those images are linked.
    """
    plots = dict(plots)
    cfg = result["config"]
    opt, scenes = cfg["optimiser"], cfg["scenes"]
    lines = [
        f"Generated by `{command or 'python -m experiments uncha-table'}` in {result['wall_seconds'] / 60:.1f} min "
        f"({result['machine']}). Seeds {result['seeds']}; mean ± std (sample std over seeds), percentages.",
        f"Training: {cfg['steps']} steps, batch {cfg['batch_size']} scenes, {scenes['n_train']} training scenes "
        f"({scenes['canvas']}x{scenes['canvas']} canvas; a part is the canvas with the other items masked out), "
        f"dim {cfg['encoder']['dim']}, AdamW lr {opt['lr']}, wd {opt['weight_decay']}. "
        f"Test: {result['n_test_scenes']} scenes / "
        f"{result['n_test_parts']} parts from unseen Fashion-MNIST test items, {result['n_items']} items for zero-shot. "
        f"Retrieval backend(s): {', '.join(result['backend'])}.",
        "",
        "| model | " + " | ".join(label for _, label in METRICS) + " | train scenes/s |",
        "|---|" + "---|" * (len(METRICS) + 1),
    ]
    for name, summ in result["summary"].items():
        cells = [_fmt(summ[k], pct=not k.startswith("spearman")) for k, _ in METRICS]
        sps = summ["scenes_per_second"]
        cells.append(f"{sps[0]:.0f}" if np.isfinite(sps[0]) else "n/a")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    sp = result["speed"]
    lines.append("")
    if "error" in sp:
        lines.append(f"lorentz_topk speed: not measured ({sp['error']}).")
    else:
        lines.append(
            f"Top-{sp['k']} retrieval, {sp['queries']} queries x {sp['gallery']} gallery, dim {sp['dim']}, "
            f"{sp['threads']} thread: C++ `lorentz_topk` {1000 * sp['cpp_s']:.0f} ms, torch stable pairwise + topk "
            f"{1000 * sp['torch_s']:.0f} ms (**{sp['speedup_vs_torch']:.1f}x**), torch matmul form + topk "
            f"{1000 * sp['torch_matmul_s']:.0f} ms ({sp['speedup_vs_torch_matmul']:.1f}x)."
        )
    if "loss" in plots:
        lines += ["", f"![loss curves]({plots['loss']})"]
    images = [
        f"![{alt}]({plots[kind]})"
        for kind, alt in (("radius", "radius distributions"), ("uncertainty", "uncertainty vs representativeness"))
        if kind in plots
    ]
    if images:
        lines.append(" ".join(images))
    lines += ["", "Per-run numbers (JSON):", "", "```json"]
    lines.append(
        json.dumps([{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in result["runs"]])
    )
    lines.append("```")
    return "\n".join(lines)


def write_report(result: Dict, out: Union[str, os.PathLike], *, command: str = "") -> List[Path]:
    """Write the plots next to ``out`` and the table into ``out``'s ``uncha-table`` block.

    Text outside the block is kept; a missing file is created with a title.
    Returns the written files (plots first, ``out`` last).
    """
    plots = write_plots(result, out)
    markdown = render_markdown(result, command=command, plots={k: p.name for k, p in plots.items()})
    return [*plots.values(), replace_block(out, BLOCK, markdown, title=TITLE)]


def public_result(result: Dict) -> Dict:
    """The JSON-serialisable part of a :func:`run_comparison` result."""
    return {k: v for k, v in result.items() if not k.startswith("_")}
