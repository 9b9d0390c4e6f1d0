"""Compositional scenes built from Fashion-MNIST (the UNCHA testbed without internet).

A scene is a square canvas holding 1-4 non-overlapping Fashion-MNIST items of
different sizes. A *part* is the same canvas with every other item masked out:
same size, same scale, the item where it is in the scene. A part is thus a
pixel-wise subset of its scene (the scene is the pixel-wise maximum of its
parts), i.e. strictly less specific, which is what the part -> whole
entailment of UNCHA assumes (a box crop upscaled to a fixed size would be
the opposite: all item, more specific than the scene). The scene caption
names the items from the largest to the smallest (``"a coat, a bag and an
ankle boot"``); a part caption names one item (``"a bag"``). A part's
representativeness is its share of the scene's ink: the part's pixel sum
over the scene's pixel sum, in [0, 1] and summing to 1 over a scene's parts.
Train scenes use items of the Fashion-MNIST training file and test scenes
items of the test file, so every test item is unseen. Everything is
deterministic for a given ``random_state``.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from crossembed._validation import check_choice, check_int, check_random_state

__all__ = [
    "CLASS_NAMES",
    "SceneSet",
    "Vocabulary",
    "load_fashion_mnist",
    "make_scenes",
    "part_caption",
    "scene_caption",
    "text_ids",
]

CLASS_NAMES = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle boot")
_SEARCH_DIRS = (
    "/usr/share/datasets/fashion-mnist",
    "/usr/share/fashion-mnist",
    "/usr/local/share/datasets/fashion-mnist",
)
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _find_dir() -> Path:
    env = os.environ.get("CROSSEMBED_FASHION_MNIST_DIR")
    cands = [Path(env)] if env else [Path(d) for d in _SEARCH_DIRS]
    for d in cands:
        if (d / _FILES["test"][0]).is_file():
            return d
    raise FileNotFoundError(
        "Fashion-MNIST not found (looked in " + ", ".join(map(str, cands)) + "); install the Debian package "
        "`dataset-fashion-mnist` (apt-get install dataset-fashion-mnist) or set CROSSEMBED_FASHION_MNIST_DIR"
    )


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte idx file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: truncated (expected {int(np.prod(shape))} values, found {data.size})")
    return data.reshape(shape)


def load_fashion_mnist(split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 28, 28) uint8`` and labels ``(N,) int64`` of ``split`` ("train" or "test")."""
    check_choice(split, "split", tuple(_FILES))
    d = _find_dir()
    images = _read_idx(d / _FILES[split][0])
    labels = _read_idx(d / _FILES[split][1]).astype(np.int64)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{d}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def _article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def part_caption(label: int) -> str:
    """``"a coat"``: the caption of one item."""
    return _article(CLASS_NAMES[label])


def text_ids(texts: Sequence[str]) -> np.ndarray:
    """``int64`` ids with equal ids exactly for equal texts (first occurrence order)."""
    ids = {t: i for i, t in enumerate(dict.fromkeys(texts))}
    return np.array([ids[t] for t in texts], np.int64)


def scene_caption(labels: Sequence[int]) -> str:
    """Items (already ordered, largest first) joined as ``"a x, a y and a z"``."""
    words = [_article(CLASS_NAMES[i]) for i in labels]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


class Vocabulary:
    """Word-level tokenizer over the closed caption vocabulary (index 0 pads)."""

    def __init__(self):
        words = {"a", "an", "and", ","}
        for name in CLASS_NAMES:
            words.update(name.split())
        self.itos = ["<pad>"] + sorted(words)
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """``(N, L) int64`` token ids, right-padded with 0 to the longest text."""
        rows = []
        for t in texts:
            toks = t.replace(",", " , ").split()
            try:
                rows.append([self.stoi[w] for w in toks])
            except KeyError as exc:
                raise ValueError(f"unknown word {exc.args[0]!r} in text {t!r}") from None
        out = torch.zeros(len(rows), max((len(r) for r in rows), default=1), dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return out


@dataclass
class SceneSet:
    """Scenes, their parts and captions (arrays are row-aligned).

    Attributes
    ----------
    scenes : uint8 (N, S, S)
    captions : list of str, length N
    caption_ids : int64 (N,)  equal ids = identical captions
    scene_labels : int64 (N, max_items)  item classes, largest first, -1 padded
    parts : uint8 (P, S, S)  the scene canvas with every other item masked out
    part_labels, part_scene : int64 (P,)
    part_boxes : int64 (P, 4)  (row, col, height, width) on the canvas
    representativeness : float64 (P,)  the part's share of its scene's pixel sum
    part_source : int64 (P,)  index of the item in the Fashion-MNIST split
    split : str
    """

    scenes: np.ndarray
    captions: List[str]
    caption_ids: np.ndarray
    scene_labels: np.ndarray
    parts: np.ndarray
    part_labels: np.ndarray
    part_scene: np.ndarray
    part_boxes: np.ndarray
    representativeness: np.ndarray
    part_source: np.ndarray
    split: str

    def __len__(self) -> int:
        return len(self.captions)

    def parts_of(self, scenes: np.ndarray) -> np.ndarray:
        """Indices of the parts that belong to the given scene indices."""
        return np.flatnonzero(np.isin(self.part_scene, scenes))


def _resize(images: np.ndarray, size: int) -> np.ndarray:
    t = torch.from_numpy(images.astype(np.float32)).unsqueeze(1)
    out = F.interpolate(t, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return out.squeeze(1).round().clamp(0, 255).to(torch.uint8).numpy()


def _place(rng: np.random.Generator, sizes: List[int], canvas: int, tries: int = 64) -> Optional[List[Tuple[int, int]]]:
    """Top-left corners for non-overlapping squares of ``sizes``, or None when crowded."""
    placed = np.zeros((0, 3), np.int64)  # (row, col, size)
    for s in sizes:
        cand = rng.integers(0, canvas - s + 1, size=(tries, 2))
        r, c = cand[:, :1], cand[:, 1:]
        r2, c2, s2 = placed[:, 0], placed[:, 1], placed[:, 2]
        apart = (r + s <= r2) | (r2 + s2 <= r) | (c + s <= c2) | (c2 + s2 <= c)
        ok = np.flatnonzero(apart.all(1))
        if ok.size == 0:
            return None
        placed = np.vstack([placed, [[cand[ok[0], 0], cand[ok[0], 1], s]]])
    return [(int(r), int(c)) for r, c, _ in placed]


def _layouts(rng: np.random.Generator, n_scenes: int, by_class, *, canvas: int, max_items: int, sizes):
    """Draw every scene's items, sizes and positions (no pixels yet).

    Returns ``(scene_labels, captions, part labels, part scenes, part boxes,
    part sources)``, the last four one entry per part.
    """
    min_size, max_size = sizes
    n_classes = len(by_class)
    scene_labels = np.full((n_scenes, max_items), -1, np.int64)
    captions, p_lab, p_scene, p_box, p_src = [], [], [], [], []
    for i in range(n_scenes):
        k = int(rng.integers(1, max_items + 1))
        classes = rng.choice(n_classes, size=k, replace=False)
        sides = sorted((int(s) for s in rng.integers(min_size, max_size + 1, size=k)), reverse=True)
        pos = _place(rng, sides, canvas)
        while pos is None:  # too crowded: shrink everything a little and retry
            sides = [max(min_size // 2, int(s * 0.85)) for s in sides]
            pos = _place(rng, sides, canvas)
        for j, ((r, c), s) in enumerate(zip(pos, sides)):
            p_lab.append(int(classes[j]))
            p_scene.append(i)
            p_box.append((r, c, s, s))
            p_src.append(int(by_class[classes[j]][rng.integers(len(by_class[classes[j]]))]))
        scene_labels[i, :k] = classes  # sides are sorted, so classes are largest first
        captions.append(scene_caption([int(c) for c in classes]))
    return scene_labels, captions, p_lab, p_scene, p_box, p_src


def _paint_parts(images: np.ndarray, boxes: np.ndarray, src: np.ndarray, canvas: int) -> np.ndarray:
    """One canvas per part holding its item, resized to the box, everything else black."""
    parts = np.zeros((len(boxes), canvas, canvas), np.uint8)
    for s in np.unique(boxes[:, 2]):  # one batched resize per item size
        idx = np.flatnonzero(boxes[:, 2] == s)
        for t, item in zip(idx, _resize(images[src[idx]], int(s))):
            r, c = boxes[t, 0], boxes[t, 1]
            parts[t, r : r + s, c : c + s] = item
    return parts


def _representativeness(parts: np.ndarray, part_scene: np.ndarray, n_scenes: int) -> np.ndarray:
    """Each part's share of its scene's pixel sum."""
    mass = parts.reshape(len(parts), -1).sum(1, dtype=np.float64)
    total = np.bincount(part_scene, weights=mass, minlength=n_scenes)[part_scene]
    n_parts = np.bincount(part_scene, minlength=n_scenes)[part_scene]
    # an all-black scene (only possible with a synthetic source) shares equally
    return np.where(total > 0, mass / np.where(total > 0, total, 1.0), 1.0 / n_parts)


def make_scenes(
    n_scenes: int,
    *,
    split: str = "train",
    canvas: int = 48,
    max_items: int = 4,
    min_size: int = 10,
    max_size: int = 28,
    random_state=None,
    source: Optional[Tuple[np.ndarray, np.ndarray]] = None,
) -> SceneSet:
    """Generate ``n_scenes`` compositional scenes.

    Parameters
    ----------
    n_scenes : int
    split : {"train", "test"}
        Which Fashion-MNIST file the items come from (test items are unseen in training).
    canvas : int
        Scene (and part) side in pixels.
    max_items : int
        Items per scene are drawn uniformly from 1..max_items, all of different classes.
    min_size, max_size : int
        Item sides are drawn uniformly from this range (then shrunk if they do not fit).
    random_state : None, int or numpy Generator
    source : (images, labels), optional
        Use these items instead of reading Fashion-MNIST (tests).
    """
    for name, v in (("n_scenes", n_scenes), ("canvas", canvas), ("max_items", max_items)):
        check_int(v, name, low=1)
    if not 4 <= min_size <= max_size <= canvas:
        raise ValueError(f"need 4 <= min_size <= max_size <= canvas, got {min_size}, {max_size}, {canvas}")
    rng = check_random_state(random_state)
    images, labels = source if source is not None else load_fashion_mnist(split)
    n_classes = int(labels.max()) + 1
    if max_items > n_classes:
        raise ValueError(f"max_items={max_items} exceeds the number of classes ({n_classes})")
    by_class = [np.flatnonzero(labels == k) for k in range(n_classes)]
    layout = _layouts(rng, n_scenes, by_class, canvas=canvas, max_items=max_items, sizes=(min_size, max_size))
    scene_labels, captions, p_lab, p_scene, p_box, p_src = layout
    boxes = np.array(p_box, np.int64).reshape(-1, 4)
    src = np.array(p_src, np.int64)
    parts = _paint_parts(images, boxes, src, canvas)
    part_scene = np.array(p_scene, np.int64)
    scenes = np.zeros((n_scenes, canvas, canvas), np.uint8)
    # boxes never overlap, so the scene is the pixel-wise maximum (and the sum) of its parts
    np.maximum.at(scenes, part_scene, parts)
    rep = _representativeness(parts, part_scene, n_scenes)
    return SceneSet(
        scenes=scenes,
        captions=captions,
        caption_ids=text_ids(captions),
        scene_labels=scene_labels,
        parts=parts,
        part_labels=np.array(p_lab, np.int64),
        part_scene=part_scene,
        part_boxes=boxes,
        representativeness=rep,
        part_source=src,
        split=split,
    )
