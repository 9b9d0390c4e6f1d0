"""Figures of the UNCHA tables: uncertainty scatter and learning curves.

The figures the user's verbs draw too (loss curves, radii) are
:mod:`crossembed.cli.plots`; each function here draws one PNG the same way.
"""

from __future__ import annotations

import os
from typing import Dict, Union

import numpy as np
import torch

from crossembed.cli.plots import pyplot, save_png
from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.evaluate import HeldOutSet

__all__ = ["plot_uncertainty", "plot_learning_curve"]


def plot_uncertainty(part_embeddings: Dict[str, torch.Tensor], test: HeldOutSet, path: Union[str, os.PathLike]):
    """Part-image uncertainty ``u`` against representativeness, one panel per model.

    ``part_embeddings`` maps a model name to its part-image embeddings of
    ``test.scenes.parts``; one-item scenes (share 1 by construction) are left out.
    Returns the written path.
    """
    scenes = test.scenes
    fig, axes = pyplot().subplots(1, len(part_embeddings), figsize=(3.6 * len(part_embeddings), 3), squeeze=False)
    multi = np.bincount(scenes.part_scene)[scenes.part_scene] > 1
    for ax, (name, parts) in zip(axes[0], part_embeddings.items()):
        u = L.uncertainty(parts).numpy()
        ax.scatter(scenes.representativeness[multi], u[multi], s=3, alpha=0.3)
        ax.set_xlabel("representativeness (area share)")
        ax.set_ylabel("u(part image)")
        ax.set_title(name, fontsize=9)
    return save_png(fig, path, dpi=100)


def plot_learning_curve(rows, metrics, path: Union[str, os.PathLike]):
    """One panel per metric: its value against the training step, one line per model.

    ``rows`` are the ``rows`` of :func:`experiments.uncha_curve.learning_curve`
    and ``metrics`` a sequence of ``(key, label)``. Returns the written path.
    """
    fig, axes = pyplot().subplots(1, len(metrics), figsize=(3.0 * len(metrics), 2.8), squeeze=False)
    names = list(dict.fromkeys(r["model"] for r in rows))
    for ax, (key, label) in zip(axes[0], metrics):
        for name in names:
            pts = [(r["step"], r[key]) for r in rows if r["model"] == name and np.isfinite(r.get(key, np.nan))]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=name)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    return save_png(fig, path, dpi=100)
