"""Parts of a drawing from its alpha mask, and the pixels a frozen image tower sees.

The *object* is the drawing's opaque pixels (alpha >= 128); a fully opaque
image (no transparency) uses the pixels that differ from its border colour
instead. A *part* is one 8-connected component of the object holding at
least ``min_share`` of the object's pixels (smaller specks are dropped);
the ``max_parts`` largest are kept. An object with a single such component
has no proper part. A part's **representativeness** is its share of the
object's pixels (before dropping specks), in (0, 1].

Whole and part are rendered alike: composited on white and letterboxed into
the same square canvas: the whole with all its pixels, a part with every
pixel outside its component made transparent. A part is thus a pixel subset of its whole at the same scale
and position (less specific than the whole), as in the Fashion-MNIST
scenes of :mod:`crossembed.hyperbolic.data`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

__all__ = ["Drawing", "MAX_PIXELS", "pixel_count", "load_rgba", "object_mask", "split_parts", "render", "cut"]

#: Largest image (width x height) :func:`load_rgba` decodes; a few Openclipart PNGs hold over 100
#: million pixels (Pillow refuses them as decompression bombs, and decoding one takes GBs).
MAX_PIXELS = 40_000_000
#: Pixels whose colour differs from the border colour by more than this (sum over RGB, 0-765) are object.
BACKGROUND_TOLERANCE = 30


@dataclass
class Drawing:
    """A drawing cut into its whole and its parts (all ``size`` x ``size`` x 3 uint8).

    Attributes
    ----------
    whole : uint8 (S, S, 3)
    parts : uint8 (P, S, S, 3)  P may be 0
    representativeness : float64 (P,)  each part's share of the object's pixels
    """

    whole: np.ndarray
    parts: np.ndarray
    representativeness: np.ndarray


def pixel_count(path: Union[str, Path]) -> int:
    """Width x height of the image at ``path``, read from its header (nothing decoded)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as im:
                return im.size[0] * im.size[1]
        except Image.DecompressionBombError:
            return 2**62  # over twice Pillow's own limit


def load_rgba(path: Union[str, Path], max_side: int = 224) -> np.ndarray:
    """The image at ``path`` as RGBA uint8, shrunk (aspect kept) so its longer side is at most ``max_side``.

    ValueError for an image of more than :data:`MAX_PIXELS` pixels.
    """
    from PIL import Image

    if isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 8:
        raise ValueError(f"max_side must be an integer >= 8, got {max_side!r}")
    if pixel_count(path) > MAX_PIXELS:
        raise ValueError(f"{path}: more than {MAX_PIXELS} pixels; leave it out (see pixel_count)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        im = Image.open(path)
    with im:
        im = im.convert("RGBA")
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        return np.asarray(im).copy()


def object_mask(rgba: np.ndarray) -> np.ndarray:
    """Boolean (H, W): alpha >= 128, or (no transparent pixel) colour away from the border's median."""
    if rgba.ndim != 3 or rgba.shape[2] != 4:
        raise ValueError(f"rgba must have shape (H, W, 4), got {rgba.shape}")
    opaque = rgba[..., 3] >= 128
    if not opaque.all():
        return opaque
    rgb = rgba[..., :3].astype(np.int32)
    border = np.concatenate([rgb[0], rgb[-1], rgb[:, 0], rgb[:, -1]])
    bg = np.median(border, axis=0)
    return np.abs(rgb - bg).sum(-1) > BACKGROUND_TOLERANCE


def split_parts(mask: np.ndarray, *, min_share: float = 0.02, max_parts: int = 4):
    """``(labels, shares)``: the kept components' masks ``(P, H, W)`` and their pixel shares ``(P,)``.

    Largest first; ``P`` is 0 when fewer than two components reach ``min_share``
    (a one-piece object has no proper part).
    """
    from scipy import ndimage

    if isinstance(min_share, bool) or not isinstance(min_share, (int, float)) or not 0 < min_share <= 1:
        raise ValueError(f"min_share must be in (0, 1], got {min_share!r}")
    if isinstance(max_parts, bool) or not isinstance(max_parts, int) or max_parts < 2:
        raise ValueError(f"max_parts must be an integer >= 2, got {max_parts!r}")
    total = int(mask.sum())
    if total == 0:
        return np.zeros((0, *mask.shape), bool), np.zeros(0)
    lab, n = ndimage.label(mask, structure=np.ones((3, 3), bool))
    counts = np.bincount(lab.ravel(), minlength=n + 1)[1:]
    order = np.argsort(-counts, kind="stable")
    keep = [int(i) for i in order[:max_parts] if counts[i] / total >= min_share]
    if len(keep) < 2:
        return np.zeros((0, *mask.shape), bool), np.zeros(0)
    masks = np.stack([lab == i + 1 for i in keep])
    return masks, counts[keep] / total


def render(rgba: np.ndarray, keep: np.ndarray, size: int = 224) -> np.ndarray:
    """The pixels in ``keep`` composited on white, letterboxed (centred) into a ``size`` square: uint8 (size, size, 3)."""
    h, w = rgba.shape[:2]
    if keep.shape != (h, w):
        raise ValueError(f"keep has shape {keep.shape}, the image {(h, w)}")
    if h > size or w > size:
        raise ValueError(f"image {(h, w)} is larger than the canvas {size}; load it with max_side <= size")
    alpha = (rgba[..., 3:4].astype(np.float32) / 255.0) * keep[..., None]
    if bool(np.all(rgba[..., 3] == 255)):  # opaque image: the object mask decides alone
        alpha = keep[..., None].astype(np.float32)
    rgb = rgba[..., :3].astype(np.float32) * alpha + 255.0 * (1.0 - alpha)
    out = np.full((size, size, 3), 255, np.uint8)
    top, left = (size - h) // 2, (size - w) // 2
    out[top : top + h, left : left + w] = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    return out


def cut(rgba: np.ndarray, *, size: int = 224, min_share: float = 0.02, max_parts: int = 4) -> Drawing:
    """The whole and its parts (module docstring) rendered on a ``size`` canvas."""
    mask = object_mask(rgba)
    masks, shares = split_parts(mask, min_share=min_share, max_parts=max_parts)
    whole = render(rgba, np.ones(mask.shape, bool), size)  # every pixel, faint edges included
    parts = np.stack([render(rgba, m, size) for m in masks]) if len(masks) else np.zeros((0, size, size, 3), np.uint8)
    return Drawing(whole, parts, np.asarray(shares, np.float64))
