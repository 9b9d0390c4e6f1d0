"""Evaluation of projection heads on held-out drawings of a :class:`FeatureSet`.

* zero-shot classification at each depth ``L`` of the category tree: a
  drawing filed under a category of depth >= ``L`` is put in the nearest
  depth-``L`` prompt (``"a picture of big cats"``) among all depth-``L``
  nodes of the collection; correct when that node is a prefix of one of its
  categories (a drawing may sit in several);
* whole image <-> caption retrieval R@1/R@5 (identical captions count as hits);
* hierarchy by radius: Spearman of the prompt embeddings' distance to the
  origin against their depth (positive: general categories nearer the
  origin), and the mean radius of prompts, captions and images;
* uncertainty: Spearman of ``u(part image)`` against ``1 - representativeness``
  over the proper parts of the held-out drawings (positive: less
  representative parts more uncertain), and, as a diagnostic, of the
  part -> whole entailment violation ``r(I_p, I)``.

Hyperbolic models retrieve with the C++ ``lorentz_topk`` through
:func:`crossembed.hyperbolic.evaluate.top_k`; CLIP uses cosine similarity.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import torch

from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.data import text_ids
from crossembed.hyperbolic.evaluate import radii, top_k
from crossembed.hyperbolic.losses import entailment_loss
from crossembed.hyperbolic.model import CompositionalModel
from experiments.openclipart.features import FeatureSet

__all__ = ["evaluate_features", "zero_shot_by_level", "majority_by_level"]


@torch.no_grad()
def _embed(encode, x: np.ndarray, batch_size: int = 1024) -> torch.Tensor:
    if len(x) == 0:
        return torch.zeros(0, 0)
    return torch.cat(
        [encode(torch.from_numpy(np.ascontiguousarray(x[s : s + batch_size]))) for s in range(0, len(x), batch_size)]
    )


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def zero_shot_by_level(
    model: CompositionalModel,
    features: FeatureSet,
    rows: np.ndarray,
    images: torch.Tensor,
    prompts: torch.Tensor,
    *,
    num_threads: Optional[int] = None,
) -> Dict[int, Dict[str, float]]:
    """``{depth: {"acc", "n", "classes"}}`` for every depth with at least two nodes and one drawing."""
    depths = np.array([len(n) for n in features.nodes])
    out = {}
    for level in range(1, int(depths.max()) + 1):
        cls = np.flatnonzero(depths == level)
        truth = [{c[:level] for c in features.categories[d] if len(c) >= level} for d in rows]
        has = np.array([bool(t) for t in truth])
        if len(cls) < 2 or not has.any():
            continue
        idx, _ = top_k(
            model,
            images[torch.from_numpy(np.flatnonzero(has))],
            prompts[torch.from_numpy(cls)],
            1,
            num_threads=num_threads,
        )
        picked = [features.nodes[cls[j]] for j in idx[:, 0]]
        hits = [p in t for p, t in zip(picked, (t for t in truth if t))]
        out[level] = {"acc": float(np.mean(hits)), "n": int(has.sum()), "classes": int(len(cls))}
    return out


def majority_by_level(features: FeatureSet, rows: Sequence[int]) -> Dict[int, float]:
    """``{depth: accuracy}`` of always answering the depth's most frequent node among ``rows`` (the floor
    a zero-shot accuracy has to beat; scored like :func:`zero_shot_by_level`)."""
    out = {}
    for level in range(1, max(len(n) for n in features.nodes) + 1):
        truth = [t for t in ({c[:level] for c in features.categories[d] if len(c) >= level} for d in rows) if t]
        if truth:
            counts: Dict = {}
            for t in truth:
                for node in t:
                    counts[node] = counts.get(node, 0) + 1
            out[level] = max(counts.values()) / len(truth)
    return out


def _retrieval(model, img, txt, cap, num_threads) -> Dict[str, float]:
    res = {}
    for name, q, g in (("i2t", img, txt), ("t2i", txt, img)):
        idx, _ = top_k(model, q, g, 5, num_threads=num_threads)
        hits = cap[idx] == cap[:, None]
        res[f"{name}_r1"], res[f"{name}_r5"] = float(hits[:, :1].any(1).mean()), float(hits[:, :5].any(1).mean())
    return res


def _uncertainty(model, features: FeatureSet, rows: np.ndarray, img: torch.Tensor) -> Dict[str, float]:
    """Spearman of u(part) and of r(I_p, I) with 1 - representativeness over the proper parts of ``rows``."""
    pos = np.full(len(features), -1)
    pos[rows] = np.arange(len(rows))
    sel = np.flatnonzero(pos[features.part_of] >= 0)
    res = {"n_parts": int(len(sel)), "spearman_u_1mrep": float("nan"), "spearman_r_1mrep": float("nan")}
    if not model.hyperbolic or len(sel) < 3:
        return res
    parts = _embed(model.encode_image, features.part[sel])
    one_minus = 1.0 - features.representativeness[sel]
    res["spearman_u_1mrep"] = _spearman(L.uncertainty(parts).numpy(), one_minus)
    whole = img[torch.from_numpy(pos[features.part_of[sel]])]
    cfg = model.config
    manifold = L.Lorentz(float(model.curvature().detach()))
    r = entailment_loss(parts, whole, manifold, eta=cfg.eta_intra, alpha=cfg.alpha).numpy()
    res["spearman_r_1mrep"] = _spearman(r, one_minus)
    res["radius_part"] = float(np.mean(radii(model, parts)))
    return res


@torch.no_grad()
def evaluate_features(
    model: CompositionalModel, features: FeatureSet, rows: Sequence[int], *, num_threads: Optional[int] = None
) -> Dict:
    """All metrics of the module docstring on the drawings ``rows`` (fractions in [0, 1], flat dict).

    Zero-shot keys are ``zs_L{depth}``; ``num_threads`` is for the C++ retrieval kernel.
    """
    model.eval()
    rows = np.asarray(rows, np.int64)
    img = _embed(model.encode_image, features.image[rows])
    txt = _embed(model.encode_text, features.caption_text[rows])
    prompts = _embed(model.encode_text, features.node_text)
    res: Dict = {}
    for level, z in zero_shot_by_level(model, features, rows, img, prompts, num_threads=num_threads).items():
        res[f"zs_L{level}"] = z["acc"]
        res[f"zs_L{level}_n"] = z["n"]
        res[f"zs_L{level}_classes"] = z["classes"]
    res.update(_retrieval(model, img, txt, text_ids([features.captions[d] for d in rows]), num_threads))
    depth = np.array([len(n) for n in features.nodes], float)
    r_prompt = radii(model, prompts)
    res["spearman_radius_depth"] = _spearman(r_prompt, depth) if model.hyperbolic else float("nan")
    res["radius_prompt"] = float(np.mean(r_prompt))
    res["radius_caption"] = float(np.mean(radii(model, txt)))
    res["radius_image"] = float(np.mean(radii(model, img)))
    res.update(_uncertainty(model, features, rows, img))
    res["curvature"] = float(model.curvature().detach()) if model.hyperbolic else float("nan")
    return res
