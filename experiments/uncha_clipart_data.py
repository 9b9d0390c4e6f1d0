"""The two clip-art feature sets of the UNCHA table on real images (openclipart, tuxpaint)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from crossembed._io import PathLike
from crossembed.data.clipart import read_openclipart, read_tuxpaint, subsample
from crossembed.data.image_parts import MAX_PIXELS, pixel_count
from crossembed.encoders import default_cache_dir, load_encoder
from crossembed.encoders.vision import EfficientNetLite0
from crossembed.hyperbolic.features import FeatureSet, load_or_compute

__all__ = ["clipart_features", "DATASETS", "TEXT_ENCODER"]

DATASETS = ("openclipart", "tuxpaint")
TEXT_ENCODER = "minilm"
_READERS = {"openclipart": read_openclipart, "tuxpaint": read_tuxpaint}


def clipart_features(
    dataset: str,
    *,
    cache_dir: Optional[PathLike] = None,
    max_images: Optional[int] = None,
    num_threads: Optional[int] = 1,
    show_progress_bar: bool = True,
) -> FeatureSet:
    """Frozen features of ``dataset`` (cached under ``cache_dir/uncha``, default :func:`default_cache_dir`).

    ``max_images`` caps the drawings (a fixed random subset, seed 0, of
    those within :data:`~crossembed.data.image_parts.MAX_PIXELS`);
    ``num_threads`` is the towers' torch threads.
    """
    if dataset not in _READERS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}")
    items = [it for it in _READERS[dataset]() if pixel_count(it.path) <= MAX_PIXELS]
    items = subsample(items, max_images, random_state=0)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    suffix = "" if max_images is None else f"-max{max_images}"
    path = folder / "uncha" / f"{dataset}{suffix}-features.cemb"
    path.parent.mkdir(parents=True, exist_ok=True)
    return load_or_compute(
        path,
        dataset,
        items,
        EfficientNetLite0(num_threads=num_threads),
        load_encoder(TEXT_ENCODER, num_threads=num_threads),
        show_progress_bar=show_progress_bar,
    )
