"""Figures the UNCHA verbs draw: loss curves, embedding radii, WordNet radius by depth.

Each function draws one PNG and writes it atomically; matplotlib (the
``plot`` extra) is imported inside them with the Agg backend, so importing
this module stays cheap and needs no display. :func:`pyplot` and
:func:`save_png` are the two steps every figure shares.
"""

from __future__ import annotations

import io
from typing import Dict, Tuple

import numpy as np
import torch

from crossembed._io import PathLike, atomic_write
from crossembed.hyperbolic.evaluate import radii
from crossembed.hyperbolic.model import CompositionalModel
from crossembed.hyperbolic.wordnet_embedding import Hierarchy

__all__ = ["plot_history", "plot_radii", "plot_radius_by_depth", "pyplot", "save_png"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: PathLike, *, dpi: int):
    """Lay out ``fig``, write it to ``path`` as a PNG of ``dpi`` atomically and close it; returns the path."""
    plt = pyplot()
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
    fig, ax = pyplot().subplots(figsize=(6, 3.6))
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
    return save_png(fig, path, dpi=110)


def plot_radii(models: Dict[str, Tuple[CompositionalModel, Dict[str, torch.Tensor]]], path: PathLike):
    """Histogram of geodesic radii of scene/part images and texts, one panel per model.

    ``models`` maps a name to ``(model, embeddings)`` where ``embeddings`` is
    the ``embeddings`` entry of ``evaluate(..., return_embeddings=True)``.
    Returns the written path.
    """
    fig, axes = pyplot().subplots(1, len(models), figsize=(3.2 * len(models), 2.8), squeeze=False)
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
    return save_png(fig, path, dpi=100)


def plot_radius_by_depth(embedding: np.ndarray, hierarchy: Hierarchy, path: PathLike):
    """Box plot of the geodesic radius (curvature 1) of each WordNet node per depth below the root.

    Returns the written path.
    """
    radius = np.arcsinh(np.linalg.norm(embedding, axis=1))
    depths = sorted(set(hierarchy.depth.tolist()))
    fig, ax = pyplot().subplots(figsize=(5, 3))
    ax.boxplot([radius[hierarchy.depth == d] for d in depths], positions=depths)
    ax.set_xlabel("depth below the root")
    ax.set_ylabel("distance to origin")
    return save_png(fig, path, dpi=100)
