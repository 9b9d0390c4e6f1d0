"""Real linking corpora: WordNet glosses of every part of speech, embedded by cached encoders.

The corpus is every unique gloss of the noun, verb, adjective and adverb
synsets (about 115k texts), put in one fixed random order (seed 0) so that
any prefix mixes the parts of speech the way the whole does. Duplicate texts
are dropped (two objects with the same text are not distinguishable by any
encoder). Embeddings are cached in chunks of :data:`CHUNK` texts of that
order, so growing ``n_texts`` encodes only the new chunks. e5 sees every
text as a ``passage``.
"""

from __future__ import annotations

from typing import List

import numpy as np

__all__ = ["CHUNK", "gloss_corpus", "embed_corpus"]

#: texts per cache chunk; a corpus of n texts encodes ceil(n / CHUNK) chunks
CHUNK = 5_000
_POS = ("noun", "verb", "adj", "adv")


def gloss_corpus(n_texts: int = 10_000) -> List[str]:
    """The first ``n_texts`` unique glosses of the fixed mixed-POS order."""
    if isinstance(n_texts, bool) or not isinstance(n_texts, (int, np.integer)) or n_texts < 1:
        raise ValueError(f"n_texts must be a positive int, got {n_texts!r}")
    return _prefix(_unique_glosses(), n_texts)


def embed_corpus(
    encoder_name: str, n_texts: int = 10_000, *, num_threads: int = 1, show_progress_bar: bool = False
) -> np.ndarray:
    """(n_texts, dim) float32 embeddings of :func:`gloss_corpus`, cached on disk per chunk."""
    from crossembed.encoders import encode_cached, load_encoder

    n_chunks = -(-int(n_texts) // CHUNK)
    glosses = _unique_glosses()
    texts = _prefix(glosses, min(n_chunks * CHUNK, len(glosses)))
    enc = load_encoder(encoder_name, num_threads=num_threads)
    parts = []
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start : start + CHUNK]
        parts.append(encode_cached(enc, chunk, role="passage", batch_size=64, show_progress_bar=show_progress_bar))
    return np.concatenate(parts)[:n_texts]


def _unique_glosses() -> List[str]:
    """Every non-empty WordNet gloss once, sorted (read from the WordNet files)."""
    from crossembed.data.wordnet import read_synsets

    return sorted({s.gloss for pos in _POS for s in read_synsets(pos) if s.gloss})


def _prefix(texts: List[str], n_texts: int) -> List[str]:
    """The first ``n_texts`` of ``texts`` in the fixed random order (seed 0)."""
    order = np.random.default_rng(0).permutation(len(texts))
    if n_texts > len(texts):
        raise ValueError(f"only {len(texts)} unique glosses available, asked for n_texts={n_texts}")
    return [texts[i] for i in order[:n_texts]]
