"""GEH scaling: wall time of full fits and of single views on synthetic data of growing N."""

from __future__ import annotations

import io
import json
import os
import time
from typing import Callable, List, Sequence

import numpy as np

from crossembed import kernels
from crossembed.cli.options import write_file
from crossembed.linking import GEHLinker
from experiments.linking_rules import CANDIDATE_SOURCES

__all__ = ["MIN_FIT_ROWS", "VIEW_ANCHORS", "plot_scaling", "synthetic_pair", "time_scaling"]


#: A timed fit starts from this many seeds and needs rows beyond them; a timed view has this many anchors.
SEEDS, VIEW_ANCHORS = 15, 256
MIN_FIT_ROWS = SEEDS + 1


def synthetic_pair(n: int, *, latent: int = 32, dim_a: int = 384, dim_b: int = 512, noise: float = 0.05, seed: int = 0):
    """Timing data: one Gaussian latent through two random nonlinear maps (tanh / ReLU) plus noise."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, latent)).astype(np.float32)
    A = np.tanh(Z @ rng.standard_normal((latent, dim_a)).astype(np.float32) / np.sqrt(latent))
    B = np.maximum(Z @ rng.standard_normal((latent, dim_b)).astype(np.float32) / np.sqrt(latent), 0)
    A += noise * rng.standard_normal(A.shape).astype(np.float32)
    B += noise * rng.standard_normal(B.shape).astype(np.float32)
    return A, B


def time_scaling(
    sizes: Sequence[int],
    *,
    max_iter: int = 10,
    view_sizes: Sequence[int] = (),
    results_path=None,
    candidates: str = "auto",
    log: Callable[[str], None] = print,
) -> List[dict]:
    """Wall time of full GEH fits at ``sizes`` rows per side, and of single views at ``view_sizes``.

    A full fit records total seconds, rounds and seconds per round; a single
    view (signatures of both sides against 256 anchors + one exact CSLS
    mutual top-k) gives the per-view cost where a full fit is too long to
    run here, so the full time can be extrapolated as views x per-view cost.
    ``candidates`` names the fits' candidate source (``CANDIDATE_SOURCES``, built with its defaults).
    """
    if candidates not in CANDIDATE_SOURCES:
        raise ValueError(f"candidates must be one of {sorted(CANDIDATE_SOURCES)}, got {candidates!r}")
    for name, values, low in (("sizes", sizes, MIN_FIT_ROWS), ("view_sizes", view_sizes, VIEW_ANCHORS)):
        for n in values:
            if n < low:
                raise ValueError(f"{name} must be >= {low}, got {n}")
    records = [_time_fit(n, max_iter, candidates, log) for n in sizes]
    records += [_time_view(n, log) for n in view_sizes]
    if results_path is not None:
        write_file(results_path, json.dumps(records, indent=1))
    return records


def _time_fit(n: int, max_iter: int, candidates: str, log: Callable[[str], None]) -> dict:
    A, B = synthetic_pair(n)
    seeds = np.stack([np.arange(SEEDS), np.arange(SEEDS)], axis=1)
    linker = GEHLinker(
        candidates=CANDIDATE_SOURCES[candidates](), max_iter=max_iter, show_progress_bar=False, random_state=0
    )
    tic = time.perf_counter()
    res = linker.link(A, B, seeds)
    total = time.perf_counter() - tic
    views = sum(h["views"] for h in res.history)
    rec = dict(
        kind="fit",
        n=n,
        candidates=candidates,
        seconds=round(total, 2),
        rounds=len(res.history),
        views=views,
        seconds_per_round=round(total / max(1, len(res.history)), 2),
        seconds_per_view=round(total / max(1, views), 3),
        links=len(res),
        load=os.getloadavg()[0],
    )
    log(str(rec))
    return rec


def _time_view(n: int, log: Callable[[str], None]) -> dict:
    A, B = synthetic_pair(n)
    idx = np.arange(VIEW_ANCHORS)
    tic = time.perf_counter()
    SA = kernels.anchor_signatures(A, A[idx])
    SB = kernels.anchor_signatures(B, B[idx])
    pairs, _ = kernels.csls_mutual_topk(SA, SB, k=5, csls_k=50)
    rec = dict(
        kind="view",
        n=n,
        anchors=256,
        seconds=round(time.perf_counter() - tic, 2),
        proposals=len(pairs),
        load=os.getloadavg()[0],
    )
    log(str(rec))
    return rec


def plot_scaling(records: List[dict], path) -> None:
    """Log-log growth curve: full-fit seconds and single-view seconds vs rows per side."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    curves = [(("fit", c), f"full GEH fit (validated, {c})", "o") for c in ("exact", "pool", "ann")]
    curves.append((("view", "exact"), "one exact view (256 anchors)", "s"))
    for (kind, cand), label, marker in curves:
        rs = sorted(
            (r for r in records if r["kind"] == kind and r.get("candidates", "exact") == cand), key=lambda r: r["n"]
        )
        if rs:
            ax.loglog([r["n"] for r in rs], [r["seconds"] for r in rs], marker=marker, label=label)
    ax.set_xlabel("rows per side (N)")
    ax.set_ylabel("seconds")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_file(path, buf.getvalue())
