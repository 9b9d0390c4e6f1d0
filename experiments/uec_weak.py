"""Deliberately weak ensemble members: what UEC does with a model that should not count.

Each is an encoder the harness loads by name (``uec-eval --weak-members``), cached like the real ones:

* ``trigram``: hashed character trigrams (512 buckets, square-rooted counts, unit rows) through
  :class:`~crossembed.encoders.CallableEncoder` - a lexical model that knows no meaning;
* ``minilm-rot13``: minilm reading every text ROT13-enciphered - a real transformer on text
  far off its training domain;
* ``minilm-l3-rotated``: minilm-l3 with queries and documents each turned by its own random
  rotation (seeded) - fluent-looking vectors whose query and document spaces no longer meet.
"""

from __future__ import annotations

import codecs
import zlib
from typing import Dict, List, Optional

import numpy as np

from crossembed.encoders import CallableEncoder, load_encoder

__all__ = ["WEAK_MEMBERS", "harness_encoder"]

#: the weak members' names and what each is (the report's wording)
WEAK_MEMBERS: Dict[str, str] = {
    "trigram": "hashed character trigrams (lexical)",
    "minilm-rot13": "minilm on ROT13 text (off-domain)",
    "minilm-l3-rotated": "minilm-l3, queries and documents randomly rotated apart",
}
_BUCKETS = 512


def _trigrams(texts: List[str]) -> np.ndarray:
    out = np.zeros((len(texts), _BUCKETS), np.float32)
    for i, t in enumerate(texts):
        s = f"  {t.lower()} "
        for j in range(len(s) - 2):
            out[i, zlib.crc32(s[j : j + 3].encode()) % _BUCKETS] += 1.0
    out = np.sqrt(out)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def _rotation(dim: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    return q.astype(np.float32)


def harness_encoder(name: str, num_threads: Optional[int] = None):
    """The encoder ``name`` names: a weak member of :data:`WEAK_MEMBERS`, else :func:`load_encoder`'s."""
    threads = {"num_threads": num_threads} if num_threads else {}
    if name == "trigram":
        return CallableEncoder(_trigrams, name="trigram512", dim=_BUCKETS)
    if name == "minilm-rot13":
        base = load_encoder("minilm", **threads)

        def rot13(texts):
            return base.encode([codecs.encode(t, "rot13") for t in texts], show_progress_bar=False)

        return CallableEncoder(rot13, name="minilm-rot13", dim=base.dim)
    if name == "minilm-l3-rotated":
        base = load_encoder("minilm-l3", **threads)
        turns = {"query": _rotation(base.dim, 1), "passage": _rotation(base.dim, 2)}

        def rotated(texts, role):
            return np.asarray(base.encode(texts, role=role, show_progress_bar=False), np.float32) @ turns[role]

        return CallableEncoder(rotated, name="minilm-l3-rotated", dim=base.dim)
    return load_encoder(name, **threads)
