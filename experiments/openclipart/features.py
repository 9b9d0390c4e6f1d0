"""Frozen tower features of a captioned clip-art collection, computed once and cached.

Both towers are frozen (EfficientNet-Lite0 for images, minilm for texts), so
a whole collection is encoded once and the projection heads train on the
cached vectors. Per drawing: the whole image, its parts
(:func:`experiments.openclipart.parts.cut`) and its captions; per category
node of the collection's tree: the zero-shot prompt. The cache file is
written atomically (an ``.npz``, CRC-checked when read) and carries the settings that made it; a
file whose settings, item names or shapes differ is recomputed, never
trusted. :func:`feature_batches` and :func:`towers` hand a
:class:`FeatureSet` to the library's heads
(:mod:`crossembed.hyperbolic.heads`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from tqdm.auto import tqdm

from crossembed.cli.options import write_file
from crossembed.encoders import default_cache_dir, load_encoder
from crossembed.hyperbolic.data import text_ids
from crossembed.hyperbolic.heads import FeatureBatches, head_towers
from experiments.openclipart.collections import (
    ClipartItem,
    caption,
    category_prompt,
    read_openclipart,
    read_tuxpaint,
    subsample,
)
from experiments.openclipart.parts import MAX_PIXELS, cut, load_rgba, pixel_count
from experiments.openclipart.vision import EfficientNetLite0

__all__ = [
    "CorruptFeatureFile",
    "FeatureSet",
    "category_nodes",
    "clipart_features",
    "compute_features",
    "feature_batches",
    "save_features",
    "load_features",
    "load_or_compute",
    "describe",
    "towers",
    "DATASETS",
    "FEATURE_KIND",
    "FEATURE_VERSION",
    "TEXT_ENCODER",
]

DATASETS = ("openclipart", "tuxpaint")
TEXT_ENCODER = "minilm"
_READERS = {"openclipart": read_openclipart, "tuxpaint": read_tuxpaint}

FEATURE_KIND = "crossembed.clipart-features"
FEATURE_VERSION = 2


@dataclass
class FeatureSet:
    """Cached features of one collection (rows aligned as listed).

    Attributes
    ----------
    names, captions, titles : list of str, one per drawing
        ``titles`` are the part captions (a part has no text of its own; the part text).
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
        Part selection (:func:`experiments.openclipart.parts.split_parts`); defaults 0.02 and 4.
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


class CorruptFeatureFile(ValueError):
    """A feature file that is damaged, incomplete or of another format (recomputed, never trusted)."""


def save_features(features: FeatureSet, path: Union[str, os.PathLike]) -> Path:
    """Write ``features`` atomically as one ``.npz`` (each array CRC-checked when read back), the texts and
    settings as JSON inside it."""
    meta = dict(features.meta)
    meta["kind"] = FEATURE_KIND
    meta["texts"] = {
        "names": features.names,
        "captions": features.captions,
        "titles": features.titles,
        "categories": [[list(c) for c in cats] for cats in features.categories],
    }
    buf = io.BytesIO()
    text = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    np.savez(buf, meta=text, **{k: getattr(features, k) for k in _ARRAYS})
    return write_file(path, buf.getvalue())


def load_features(path: Union[str, os.PathLike]) -> FeatureSet:
    """Read a file of :func:`save_features`; :class:`CorruptFeatureFile` for a damaged or inconsistent one."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode("utf-8"))
            arrays = {k: z[k] for k in _ARRAYS}
        if meta.pop("kind", None) != FEATURE_KIND:
            raise ValueError(f"not a {FEATURE_KIND} file")
        texts = meta.pop("texts")
        fs = FeatureSet(
            names=list(texts["names"]),
            captions=list(texts["captions"]),
            titles=list(texts["titles"]),
            categories=[tuple(tuple(c) for c in cats) for cats in texts["categories"]],
            meta=meta,
            **arrays,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        raise CorruptFeatureFile(f"{path}: unreadable feature file ({type(exc).__name__}: {exc})") from None
    n, p = len(fs.names), len(fs.part_of)
    shapes_ok = (
        len(fs.image) == len(fs.caption_text) == len(fs.title_text) == len(fs.captions) == n
        and len(fs.part) == len(fs.representativeness) == p
        and len(fs.node_text) == len(fs.nodes)
        and (p == 0 or (fs.part_of.min() >= 0 and fs.part_of.max() < n))
    )
    if not shapes_ok:
        raise CorruptFeatureFile(f"{path}: feature arrays do not line up")
    return fs


def load_or_compute(
    path: Union[str, os.PathLike],
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
        except CorruptFeatureFile:
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


def feature_batches(features: FeatureSet, rows: Sequence[int]) -> FeatureBatches:
    """The drawings ``rows`` of ``features`` as the trainer's batches: caption to whole, title to parts."""
    return FeatureBatches(
        features.image,
        features.caption_text,
        features.title_text,
        features.part,
        features.part_of,
        text_ids=text_ids(features.captions),
        part_text_ids=text_ids(features.titles),
        rows=rows,
    )


def towers(features: FeatureSet, rows: Sequence[int]) -> Callable:
    """The heads of :func:`crossembed.hyperbolic.heads.head_towers`, standardised on the drawings ``rows``
    (images; captions and titles together for the text head)."""
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        raise ValueError("rows is empty")
    return head_towers(features.image[rows], np.concatenate([features.caption_text[rows], features.title_text[rows]]))


def clipart_features(
    dataset: str,
    *,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
    max_images: Optional[int] = None,
    num_threads: Optional[int] = 1,
    show_progress_bar: bool = True,
) -> FeatureSet:
    """Frozen features of ``dataset`` (cached under ``cache_dir/uncha``, default :func:`default_cache_dir`).

    ``max_images`` caps the drawings (a fixed random subset, seed 0, of
    those within :data:`~experiments.openclipart.parts.MAX_PIXELS`);
    ``num_threads`` is the towers' torch threads.
    """
    if dataset not in _READERS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}")
    items = [it for it in _READERS[dataset]() if pixel_count(it.path) <= MAX_PIXELS]
    items = subsample(items, max_images, random_state=0)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    suffix = "" if max_images is None else f"-max{max_images}"
    path = folder / "uncha" / f"{dataset}{suffix}-features.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    return load_or_compute(
        path,
        dataset,
        items,
        EfficientNetLite0(num_threads=num_threads),
        load_encoder(TEXT_ENCODER, num_threads=num_threads),
        show_progress_bar=show_progress_bar,
    )
