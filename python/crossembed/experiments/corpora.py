"""Real linking corpora: WordNet glosses embedded by two cached encoders.

The corpus is the 8,727 noun glosses of :func:`crossembed.data.wordnet.example_gloss_task`
(the list the other parts of crossembed already cache) followed by verb
glosses up to ``n_texts``; duplicate texts are dropped (two objects with the
same text are not distinguishable by any encoder). e5 sees every text as a
``passage``.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

__all__ = ["gloss_corpus", "embed_corpus"]


def gloss_corpus(n_texts: int = 10_000) -> Tuple[List[List[str]], np.ndarray]:
    """Text blocks (noun glosses, verb glosses) and the row indices of the unique first ``n_texts``.

    The blocks are returned whole so that each block's cache key stays the
    same whatever ``n_texts`` is; ``keep`` selects rows of their concatenation.
    """
    from crossembed.data.wordnet import example_gloss_task, read_synsets

    nouns = list(example_gloss_task(pos="noun").documents)
    verbs = [s.gloss for s in read_synsets("verb") if s.gloss]
    blocks = [nouns] if n_texts <= len(nouns) else [nouns, verbs]
    seen, keep = set(), []
    for i, text in enumerate(t for b in blocks for t in b):
        if text not in seen:
            seen.add(text)
            keep.append(i)
        if len(keep) == n_texts:
            break
    if len(keep) < n_texts:
        raise ValueError(f"only {len(keep)} unique glosses available, asked for {n_texts}")
    # encode only the texts we need (keeps slow encoders cheap); a full noun block keeps its shared cache key
    last = max(keep) + 1
    if len(blocks) == 1:
        blocks[0] = nouns[:last]
    else:
        blocks[1] = verbs[: last - len(nouns)]
    return blocks, np.asarray(keep, dtype=np.int64)


def embed_corpus(encoder_name: str, n_texts: int = 10_000, *, num_threads: int = 1) -> np.ndarray:
    """(n_texts, dim) float32 embeddings of :func:`gloss_corpus`, cached on disk per block."""
    from crossembed.encoders import encode_cached, load_encoder

    blocks, keep = gloss_corpus(n_texts)
    enc = load_encoder(encoder_name, num_threads=num_threads)
    parts = []
    for block in blocks:
        parts.append(encode_cached(enc, block, role="passage", batch_size=64, show_progress_bar=False))
    return np.concatenate(parts)[keep]
