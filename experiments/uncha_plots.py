"""Figures of the UNCHA experiments: loss curves, radius histograms, uncertainty scatter, WordNet radii.

Each function draws one PNG and writes it atomically; matplotlib is imported
inside them (Agg backend) so importing this module stays cheap and needs no
display.
"""

from __future__ import annotations

import io
from typing import Dict, Tuple

import numpy as np
import torch

from crossembed._io import PathLike, atomic_write
from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.evaluate import HeldOutSet, radii
from crossembed.hyperbolic.model import CompositionalModel
from crossembed.hyperbolic.wordnet_embedding import Hierarchy

__all__ = ["plot_history", "plot_radii", "plot_uncertainty", "plot_radius_by_depth", "plot_learning_curve"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: PathLike, *, dpi: int):
    plt = _pyplot()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return atomic_write(path, buf.getvalue())


def plot_history(histories: Dict[str, Dict[str, np.ndarray]], path: PathLike, *, smooth: int = 20):
    """Total-loss curves (moving average over ``smooth`` steps), one line per run.

    Parameters
    ----------
    histories : dict
        Run name -> a training history (``TrainResult.history``) with a ``loss`` array.
    path : path
        PNG to write.
    smooth : int
        Window of the moving average.

    Returns
    -------
    pathlib.Path
        The written file.
    """
    fig, ax = _pyplot().subplots(figsize=(6, 3.6))
    for name, hist in histories.items():
        y = np.asarray(hist["loss"], float)
        y = y[np.isfinite(y)]
        if y.size == 0:
            continue
        k = max(1, min(smooth, y.size))
        ax.plot(np.convolve(y, np.ones(k) / k, mode="valid"), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (moving average)")
    ax.legend(fontsize=8)
    return _save(fig, path, dpi=110)


def plot_radii(models: Dict[str, Tuple[CompositionalModel, Dict[str, torch.Tensor]]], path: PathLike):
    """Histogram of geodesic radii of scene/part images and texts, one panel per model.

    ``models`` maps a name to ``(model, embeddings)`` where ``embeddings`` is
    the ``embeddings`` entry of ``evaluate(..., return_embeddings=True)``.
    Returns the written path.
    """
    fig, axes = _pyplot().subplots(1, len(models), figsize=(3.2 * len(models), 2.8), squeeze=False)
    for ax, (name, (model, emb)) in zip(axes[0], models.items()):
        for key, label in (
            ("scene_image", "scene image"),
            ("part_image", "part image"),
            ("scene_text", "scene text"),
            ("prompt", "part text"),
        ):
            ax.hist(radii(model, emb[key]), bins=40, alpha=0.5, density=True, label=label)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("distance to origin")
    axes[0][0].legend(fontsize=7)
    return _save(fig, path, dpi=100)


def plot_uncertainty(part_embeddings: Dict[str, torch.Tensor], test: HeldOutSet, path: PathLike):
    """Part-image uncertainty ``u`` against representativeness, one panel per model.

    ``part_embeddings`` maps a model name to its part-image embeddings of
    ``test.scenes.parts``; one-item scenes (share 1 by construction) are left out.
    Returns the written path.
    """
    scenes = test.scenes
    fig, axes = _pyplot().subplots(1, len(part_embeddings), figsize=(3.6 * len(part_embeddings), 3), squeeze=False)
    multi = np.bincount(scenes.part_scene)[scenes.part_scene] > 1
    for ax, (name, parts) in zip(axes[0], part_embeddings.items()):
        u = L.uncertainty(parts).numpy()
        ax.scatter(scenes.representativeness[multi], u[multi], s=3, alpha=0.3)
        ax.set_xlabel("representativeness (area share)")
        ax.set_ylabel("u(part image)")
        ax.set_title(name, fontsize=9)
    return _save(fig, path, dpi=100)


def plot_radius_by_depth(embedding: np.ndarray, hierarchy: Hierarchy, path: PathLike):
    """Box plot of the geodesic radius (curvature 1) of each WordNet node per depth below the root.

    Returns the written path.
    """
    radius = np.arcsinh(np.linalg.norm(embedding, axis=1))
    depths = sorted(set(hierarchy.depth.tolist()))
    fig, ax = _pyplot().subplots(figsize=(5, 3))
    ax.boxplot([radius[hierarchy.depth == d] for d in depths], positions=depths)
    ax.set_xlabel("depth below the root")
    ax.set_ylabel("distance to origin")
    return _save(fig, path, dpi=100)


def plot_learning_curve(rows, metrics, path: PathLike):
    """One panel per metric: its value against the training step, one line per model.

    ``rows`` are the ``rows`` of :func:`experiments.uncha_curve.learning_curve`
    and ``metrics`` a sequence of ``(key, label)``. Returns the written path.
    """
    fig, axes = _pyplot().subplots(1, len(metrics), figsize=(3.0 * len(metrics), 2.8), squeeze=False)
    names = list(dict.fromkeys(r["model"] for r in rows))
    for ax, (key, label) in zip(axes[0], metrics):
        for name in names:
            pts = [(r["step"], r[key]) for r in rows if r["model"] == name and np.isfinite(r.get(key, np.nan))]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=name)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    return _save(fig, path, dpi=100)
