"""On-disk embedding cache: one checksummed file per (model, role, texts)."""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from pathlib import Path
from typing import List, Optional

import numpy as np

from crossembed._io import CorruptFileError, load_arrays, save_arrays
from crossembed.encoders.base import Encoder, PathLike, _check_role, _check_texts

_CACHE_KIND = "crossembed.embeddings"


def default_cache_dir() -> Path:
    """``$CROSSEMBED_CACHE`` or ``~/.cache/crossembed`` (not created here)."""
    env = os.environ.get("CROSSEMBED_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "crossembed"


# -------------------------------------------------------------------- cache
def _texts_digest(name: str, role: str, texts: List[str]) -> str:
    h = hashlib.sha256()
    for part in (name, role, str(len(texts))):
        h.update(part.encode("utf-8") + b"\x00")
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)  # length prefix: no ambiguity from separators
    return h.hexdigest()


def encode_cached(
    encoder: Encoder,
    texts,
    *,
    role: str = "query",
    cache_dir: Optional[PathLike] = None,
    batch_size: int = 32,
    show_progress_bar: Optional[bool] = None,
) -> np.ndarray:
    """``encoder.encode(texts, role=role)`` memoised on disk.

    The key is the encoder's ``name``, the ``role`` (only for encoders
    whose ``uses_role`` is true, e.g. e5) and a SHA-256 of the texts; the
    file ``<cache_dir>/embeddings/<name>-<role>-<hash>.cxa`` is written
    atomically with a checksum. A corrupt or mismatching file is
    recomputed and replaced, never trusted.

    Parameters
    ----------
    cache_dir : path, optional
        Default :func:`default_cache_dir` (``$CROSSEMBED_CACHE`` or ``~/.cache/crossembed``).
    """
    if not isinstance(getattr(encoder, "name", None), str) or not hasattr(encoder, "encode"):
        raise TypeError(f"encoder must have a string .name and .encode, got {type(encoder).__name__}")
    texts = _check_texts(texts)
    role = _check_role(role)
    key_role = role if getattr(encoder, "uses_role", True) else "any"
    digest = _texts_digest(encoder.name, key_role, texts)
    folder = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser() / "embeddings"
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder.name)[-60:]
    path = folder / f"{safe}-{key_role}-{digest[:40]}.cxa"
    if path.is_file():
        try:
            arrays, meta = load_arrays(path, _CACHE_KIND)
            emb = arrays["embeddings"]
            if meta.get("digest") == digest and emb.shape[0] == len(texts) and emb.dtype == np.float32:
                return emb
            warnings.warn(f"embedding cache {path} does not match its key; recomputing", RuntimeWarning, stacklevel=2)
        except (CorruptFileError, KeyError, OSError, ValueError) as exc:
            warnings.warn(f"embedding cache {path} is unreadable ({exc}); recomputing", RuntimeWarning, stacklevel=2)
    emb = np.ascontiguousarray(
        encoder.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar, role=role), dtype=np.float32
    )
    folder.mkdir(parents=True, exist_ok=True)
    save_arrays(
        path,
        _CACHE_KIND,
        {"embeddings": emb},
        meta={"encoder": encoder.name, "role": role, "digest": digest, "n": len(texts)},
    )
    return emb
