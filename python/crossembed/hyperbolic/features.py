"""Frozen tower features of a captioned clip-art collection, computed once and cached.

Both towers are frozen (EfficientNet-Lite0 for images, minilm for texts), so
a whole collection is encoded once and the projection heads train on the
cached vectors. Per drawing: the whole image, its parts
(:func:`crossembed.data.image_parts.cut`) and its captions; per category node
of the collection's tree: the zero-shot prompt. The cache file is written
atomically with a checksum (:mod:`crossembed._io`) and carries the settings
that made it; a file whose settings, item names or shapes differ is
recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from crossembed._io import CorruptFileError, PathLike, load_arrays, save_arrays
from crossembed.data.clipart import ClipartItem, caption, category_prompt
from crossembed.data.image_parts import cut, load_rgba

__all__ = [
    "FeatureSet",
    "category_nodes",
    "compute_features",
    "save_features",
    "load_features",
    "load_or_compute",
    "describe",
    "FEATURE_KIND",
    "FEATURE_VERSION",
]

FEATURE_KIND = "crossembed.clipart-features"
FEATURE_VERSION = 1


@dataclass
class FeatureSet:
    """Cached features of one collection (rows aligned as listed).

    Attributes
    ----------
    names, captions, titles : list of str, one per drawing
        ``titles`` are the part captions (a part has no text of its own; see docs/uncha_openclipart.md).
    categories : list of tuple of category paths, one per drawing
    image : float32 (N, Di)   whole drawings
    caption_text, title_text : float32 (N, Dt)
    part : float32 (P, Di)
    part_of : int64 (P,)      drawing of each part
    representativeness : float64 (P,)
    node_text : float32 (K, Dt)  the zero-shot prompts of :attr:`nodes`
    meta : dict  the settings that made the features
    """

    names: List[str]
    captions: List[str]
    titles: List[str]
    categories: List[Tuple[Tuple[str, ...], ...]]
    image: np.ndarray
    caption_text: np.ndarray
    title_text: np.ndarray
    part: np.ndarray
    part_of: np.ndarray
    representativeness: np.ndarray
    node_text: np.ndarray
    meta: Dict

    def __len__(self) -> int:
        return len(self.names)

    @cached_property
    def nodes(self) -> List[Tuple[str, ...]]:
        """The category tree: every prefix of every drawing's categories, by (depth, path)."""
        return category_nodes(self.categories)


def category_nodes(categories: Sequence[Sequence[Tuple[str, ...]]]) -> List[Tuple[str, ...]]:
    """Every prefix of every category path, sorted by (depth, path)."""
    nodes = {c[:d] for cats in categories for c in cats for d in range(1, len(c) + 1)}
    return sorted(nodes, key=lambda c: (len(c), c))


def _settings(dataset: str, items: Sequence[ClipartItem], image_tower, text_encoder, size, min_share, max_parts):
    digest = hashlib.sha256("\n".join(f"{it.name}\t{caption(it)}" for it in items).encode("utf-8")).hexdigest()
    return {
        "format_version": FEATURE_VERSION,
        "dataset": dataset,
        "n_items": len(items),
        "items_sha256": digest,
        "image_tower": image_tower.name,
        "text_encoder": text_encoder.name,
        "size": int(size),
        "min_share": float(min_share),
        "max_parts": int(max_parts),
    }


def compute_features(
    dataset: str,
    items: Sequence[ClipartItem],
    image_tower,
    text_encoder,
    *,
    size: int = 224,
    min_share: float = 0.02,
    max_parts: int = 4,
    chunk: int = 64,
    show_progress_bar: bool = True,
) -> FeatureSet:
    """Encode every drawing, its parts, its texts and the category prompts.

    Parameters
    ----------
    dataset : str
        The collection's name (stored, part of the cache key).
    items : sequence of ClipartItem
    image_tower : object with ``name`` and ``encode(uint8 (N, S, S, 3)) -> (N, Di)``
    text_encoder : crossembed encoder (``name``, ``encode(texts)``)
    size : int
        Canvas side in pixels; default 224 (EfficientNet-Lite0's training size).
    min_share, max_parts
        Part selection (:func:`crossembed.data.image_parts.split_parts`); defaults 0.02 and 4.
    chunk : int
        Drawings decoded per image-tower call (bounds memory); default 64.
    """
    if not items:
        raise ValueError("items is empty")
    images, parts, part_of, rep = [], [], [], []
    bar = tqdm(total=len(items), desc=f"features {dataset}", disable=not show_progress_bar, unit="img")
    for s in range(0, len(items), chunk):
        drawings = [
            cut(load_rgba(it.path, size), size=size, min_share=min_share, max_parts=max_parts)
            for it in items[s : s + chunk]
        ]
        pixels = np.concatenate([np.stack([d.whole for d in drawings])] + [d.parts for d in drawings])
        feats = image_tower.encode(pixels)
        images.append(feats[: len(drawings)])
        parts.append(feats[len(drawings) :])
        for j, d in enumerate(drawings):
            part_of += [s + j] * len(d.parts)
            rep.append(d.representativeness)
        bar.update(len(drawings))
    bar.close()
    captions = [caption(it) for it in items]
    titles = [it.title for it in items]
    categories = [it.categories for it in items]
    nodes = category_nodes(categories)
    encode = lambda texts: np.asarray(text_encoder.encode(list(texts), show_progress_bar=False), np.float32)  # noqa: E731
    return FeatureSet(
        names=[it.name for it in items],
        captions=captions,
        titles=titles,
        categories=categories,
        image=np.concatenate(images),
        caption_text=encode(captions),
        title_text=encode(titles),
        part=np.concatenate(parts).reshape(-1, images[0].shape[1]),
        part_of=np.asarray(part_of, np.int64),
        representativeness=np.concatenate(rep),
        node_text=encode([category_prompt(n) for n in nodes]),
        meta=_settings(dataset, items, image_tower, text_encoder, size, min_share, max_parts),
    )


_ARRAYS = ("image", "caption_text", "title_text", "part", "part_of", "representativeness", "node_text")


def save_features(features: FeatureSet, path: PathLike) -> Path:
    """Write ``features`` atomically with a checksum."""
    meta = dict(features.meta)
    meta["texts"] = {
        "names": features.names,
        "captions": features.captions,
        "titles": features.titles,
        "categories": [[list(c) for c in cats] for cats in features.categories],
    }
    return save_arrays(path, FEATURE_KIND, {k: getattr(features, k) for k in _ARRAYS}, meta)


def load_features(path: PathLike) -> FeatureSet:
    """Read a file of :func:`save_features`; CorruptFileError for a damaged or inconsistent one."""
    arrays, meta = load_arrays(path, FEATURE_KIND)
    try:
        texts = meta.pop("texts")
        fs = FeatureSet(
            names=list(texts["names"]),
            captions=list(texts["captions"]),
            titles=list(texts["titles"]),
            categories=[tuple(tuple(c) for c in cats) for cats in texts["categories"]],
            meta=meta,
            **{k: arrays[k] for k in _ARRAYS},
        )
    except (KeyError, TypeError) as exc:
        raise CorruptFileError(f"{path}: incomplete feature file ({type(exc).__name__}: {exc})") from None
    n, p = len(fs.names), len(fs.part_of)
    shapes_ok = (
        len(fs.image) == len(fs.caption_text) == len(fs.title_text) == len(fs.captions) == n
        and len(fs.part) == len(fs.representativeness) == p
        and len(fs.node_text) == len(fs.nodes)
        and (p == 0 or (fs.part_of.min() >= 0 and fs.part_of.max() < n))
    )
    if not shapes_ok:
        raise CorruptFileError(f"{path}: feature arrays do not line up")
    return fs


def load_or_compute(
    path: PathLike,
    dataset: str,
    items: Sequence[ClipartItem],
    image_tower,
    text_encoder,
    *,
    size: int = 224,
    min_share: float = 0.02,
    max_parts: int = 4,
    show_progress_bar: bool = True,
) -> FeatureSet:
    """The cached features at ``path`` when they were made with these settings and items, else computed and saved."""
    path = Path(path)
    want = _settings(dataset, items, image_tower, text_encoder, size, min_share, max_parts)
    if path.is_file():
        try:
            fs = load_features(path)
            if {k: fs.meta.get(k) for k in want} == want:
                return fs
        except (CorruptFileError, ValueError, OSError):
            pass  # recomputed below and replaced
    fs = compute_features(
        dataset,
        items,
        image_tower,
        text_encoder,
        size=size,
        min_share=min_share,
        max_parts=max_parts,
        show_progress_bar=show_progress_bar,
    )
    save_features(fs, path)
    return fs


def describe(features: FeatureSet) -> Dict:
    """Counts of a feature set (for reports)."""
    multi = np.bincount(features.part_of, minlength=len(features)) if len(features.part_of) else np.zeros(len(features))
    return {
        "drawings": len(features),
        "parts": int(len(features.part_of)),
        "drawings_with_parts": int((multi > 0).sum()),
        "category_nodes": len(features.nodes),
        "max_depth": max(len(n) for n in features.nodes),
        "meta": json.loads(json.dumps(features.meta)),
    }
