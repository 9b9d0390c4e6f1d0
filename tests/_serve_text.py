"""A small index with a toy ensemble (no model download) for the service's text routes."""

import numpy as np

from _word_encoder import WordEncoder
from crossembed._rows import unit_rows
from crossembed.uec import IndexConfig, LaplaceEmbedder, UECEnsemble, UECIndex

TEXTS = [f"{w} {i}" for i, w in enumerate(["apple pie", "banana split", "cherry tart", "date loaf"] * 10)]


def text_index(n_models=2, encoder=None):
    """40 texts indexed by an ensemble of ``n_models`` Laplace heads over ``encoder`` (a WordEncoder)."""
    rng = np.random.default_rng(3)
    embedders = []
    for _ in range(n_models):
        A = unit_rows(rng.normal(size=(40, 16)))
        P = unit_rows(A + 0.3 * rng.normal(size=(40, 16)))
        embedders.append(LaplaceEmbedder(encoder or WordEncoder(), batch_size=10).fit_embeddings(A, P))
    ensemble = UECEnsemble(embedders)
    return UECIndex.build(ensemble, TEXTS, show_progress_bar=False, config=IndexConfig(M=8, rerank=10))


def wait_ready(url, headers=None, timeout=30.0):
    """Poll ``GET /readyz`` until it answers 200 (the warm-up done)."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while httpx.get(url + "/readyz", headers=headers).status_code != 200:
        assert time.monotonic() < deadline, "the server did not get ready"
        time.sleep(0.02)
