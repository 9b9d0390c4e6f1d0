"""A deterministic toy text encoder for index and service tests (no model download)."""

import numpy as np


class WordEncoder:
    """A bag-of-characters encoder (16-d) with the encode() protocol."""

    def encode(self, texts, *, batch_size=64, show_progress_bar=False, role="query"):
        out = np.full((len(texts), 16), 0.1, dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t:
                out[i, ord(ch) % 16] += 1.0
        return out
