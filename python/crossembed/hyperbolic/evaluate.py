"""Evaluation of a trained compositional model on unseen Fashion-MNIST items.

* zero-shot item classification: each test item against the ten part
  captions ("a coat"), alone on a canvas at a random size and position drawn
  like a part (``zs_part``), and at its native 28 px centred on the canvas
  (``zs_scene``);
* scene image <-> caption retrieval R@1/R@5 (identical captions count as hits);
* part -> scene retrieval R@1/R@5 (the scene the crop was cut from);
* Spearman correlation of the part-image uncertainty ``u`` with the part's
  representativeness (its share of the scene's ink) and with
  ``1 - representativeness``; one-item scenes (share 1) are left out.

Hyperbolic models retrieve with the C++ :func:`crossembed.lorentz_topk`,
CLIP by cosine similarity; the result's ``backend`` says which ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from crossembed.hyperbolic import lorentz as L
from crossembed.hyperbolic.data import (
    CLASS_NAMES,
    SceneSet,
    Vocabulary,
    _place,
    _resize,
    load_fashion_mnist,
    make_scenes,
    part_caption,
)
from crossembed.hyperbolic.losses import entailment_loss
from crossembed.hyperbolic.model import CompositionalModel
from crossembed.kernels import lorentz_topk

__all__ = [
    "HeldOutSet",
    "make_test_set",
    "embed_images",
    "embed_texts",
    "top_k",
    "evaluate",
    "radii",
]

TEST_SEED = 2026  # one fixed test set for every model and training seed


@dataclass
class HeldOutSet:
    """Test scenes plus the zero-shot items (Fashion-MNIST test images and labels)."""

    scenes: SceneSet
    items: np.ndarray  # (n, 28, 28) uint8
    item_labels: np.ndarray


def make_test_set(
    *,
    n_scenes: int = 1000,
    n_items: int = 2000,
    canvas: int = 48,
    max_items: int = 4,
    random_state=TEST_SEED,
) -> HeldOutSet:
    """Test scenes and zero-shot items, all from the Fashion-MNIST *test* file."""
    images, labels = load_fashion_mnist("test")
    scenes = make_scenes(
        n_scenes,
        split="test",
        canvas=canvas,
        max_items=max_items,
        random_state=random_state,
        source=(images, labels),
    )
    rng = np.random.default_rng(random_state)
    pick = np.sort(rng.choice(len(labels), size=min(n_items, len(labels)), replace=False))
    return HeldOutSet(scenes, images[pick], labels[pick])


@torch.no_grad()
def embed_images(model: CompositionalModel, images: np.ndarray, *, batch_size: int = 512) -> torch.Tensor:
    model.eval()
    out = [
        model.encode_image(torch.from_numpy(np.ascontiguousarray(images[s : s + batch_size])))
        for s in range(0, len(images), batch_size)
    ]
    return torch.cat(out)


@torch.no_grad()
def embed_texts(model: CompositionalModel, texts: Sequence[str]) -> torch.Tensor:
    model.eval()
    return model.encode_text(Vocabulary().encode(list(texts)))


def top_k(
    model: CompositionalModel,
    queries: torch.Tensor,
    gallery: torch.Tensor,
    k: int,
    *,
    num_threads: Optional[int] = None,
) -> Tuple[np.ndarray, str]:
    """Indices of the ``k`` best gallery rows per query, and the backend used.

    ``num_threads`` is for the C++ kernel (``None``: all cores).
    """
    k = min(k, gallery.shape[0])
    if not model.hyperbolic:
        q = torch.nn.functional.normalize(queries, dim=-1)
        g = torch.nn.functional.normalize(gallery, dim=-1)
        return torch.topk(q @ g.T, k, dim=1).indices.numpy(), "torch-cosine"
    c = float(model.curvature().detach())
    _, idx = lorentz_topk(queries.numpy(), gallery.numpy(), k, curvature=c, num_threads=num_threads)
    return np.asarray(idx), "cpp-lorentz_topk"


def _recall(hits: np.ndarray, ks=(1, 5)) -> Dict[int, float]:
    return {k: float(hits[:, :k].any(1).mean()) for k in ks}


def _centre(items: np.ndarray, canvas: int) -> np.ndarray:
    out = np.zeros((len(items), canvas, canvas), np.uint8)
    h = items.shape[1]
    o = (canvas - h) // 2
    out[:, o : o + h, o : o + h] = items
    return out


def _alone_like_parts(items: np.ndarray, boxes: np.ndarray, canvas: int) -> np.ndarray:
    """Each item alone on a canvas, with a size drawn from the test parts' sizes and a random position.

    This is exactly what a part image looks like (one item, every other pixel
    black), with the item unseen and the layout independent of the scene set.
    """
    rng = np.random.default_rng(TEST_SEED)
    sizes = rng.choice(boxes[:, 2], size=len(items))
    out = np.zeros((len(items), canvas, canvas), np.uint8)
    for s in np.unique(sizes):
        idx = np.flatnonzero(sizes == s)
        for t, item in zip(idx, _resize(items[idx], int(s))):
            ((r, c),) = _place(rng, [int(s)], canvas)
            out[t, r : r + s, c : c + s] = item
    return out


def radii(model: CompositionalModel, emb: torch.Tensor) -> np.ndarray:
    """Geodesic distance to the origin ``asinh(sqrt(c)|x|)/sqrt(c)`` (Euclidean norm for CLIP)."""
    n = emb.norm(dim=-1)
    if not model.hyperbolic:
        return n.numpy()
    c = float(model.curvature().detach())
    return (torch.asinh(np.sqrt(c) * n) / np.sqrt(c)).numpy()


@torch.no_grad()
def evaluate(
    model: CompositionalModel, test: HeldOutSet, *, return_embeddings: bool = False, num_threads: Optional[int] = None
) -> Dict:
    """All metrics of the module docstring as a flat dict (fractions in [0, 1]).

    ``num_threads`` is for the C++ retrieval kernel (``None``: all cores).
    """
    from scipy.stats import spearmanr

    sc = test.scenes
    canvas = sc.scenes.shape[1]
    prompts = embed_texts(model, [part_caption(k) for k in range(len(CLASS_NAMES))])
    res: Dict = {}
    zero_shot = (
        ("zs_part", _alone_like_parts(test.items, sc.part_boxes, canvas)),
        ("zs_scene", _centre(test.items, canvas)),
    )
    for name, imgs in zero_shot:
        idx, backend = top_k(model, embed_images(model, imgs), prompts, 1, num_threads=num_threads)
        res[f"{name}_acc"] = float((idx[:, 0] == test.item_labels).mean())
    img = embed_images(model, sc.scenes)
    txt = embed_texts(model, sc.captions)
    cap = sc.caption_ids
    idx, backend = top_k(model, img, txt, 5, num_threads=num_threads)
    r = _recall(cap[idx] == cap[:, None])
    res["i2t_r1"], res["i2t_r5"] = r[1], r[5]
    idx, _ = top_k(model, txt, img, 5, num_threads=num_threads)
    r = _recall(cap[idx] == cap[:, None])
    res["t2i_r1"], res["t2i_r5"] = r[1], r[5]
    parts = embed_images(model, sc.parts)
    idx, _ = top_k(model, parts, img, 5, num_threads=num_threads)
    r = _recall(idx == sc.part_scene[:, None])
    res["p2s_r1"], res["p2s_r5"] = r[1], r[5]
    u = L.uncertainty(parts).numpy()
    rep = sc.representativeness
    multi = np.bincount(sc.part_scene)[sc.part_scene] > 1  # one-item scenes all have share 1
    if model.hyperbolic and np.ptp(u) > 0:
        res["spearman_u_rep"] = float(spearmanr(u[multi], rep[multi]).statistic)
        res["spearman_u_1mrep"] = float(spearmanr(u[multi], 1 - rep[multi]).statistic)
        # diagnostic: calibration drives u towards log r(I_p, I); u can only rank parts
        # by representativeness if the entailment violation r itself does
        cfg = model.config
        r = entailment_loss(
            parts,
            img[torch.from_numpy(sc.part_scene)],
            L.Lorentz(float(model.curvature().detach())),
            eta=cfg.eta_intra,
            alpha=cfg.alpha,
        ).numpy()
        res["spearman_r_1mrep"] = float(spearmanr(r[multi], 1 - rep[multi]).statistic)
    else:  # CLIP's normalised embeddings carry no radius: u is constant
        res["spearman_u_rep"] = res["spearman_u_1mrep"] = res["spearman_r_1mrep"] = float("nan")
    res["radius_scene"] = float(np.mean(radii(model, img)))
    res["radius_part"] = float(np.mean(radii(model, parts)))
    res["curvature"] = float(model.curvature().detach()) if model.hyperbolic else float("nan")
    res["backend"] = backend
    if return_embeddings:
        res["embeddings"] = {"scene_image": img, "scene_text": txt, "part_image": parts, "prompt": prompts}
    return res
