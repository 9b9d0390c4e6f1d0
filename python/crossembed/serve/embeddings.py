"""Embeddings as a service: ``POST /embed`` (the ensemble's Gaussians) and OpenAI's ``/v1/embeddings``, ``/v1/models``.

``/v1/embeddings`` answers OpenAI's request and response shapes, so the
``openai`` client works unchanged (it asks for ``encoding_format="base64"``
by default: the little-endian float32 bytes of each embedding). An embedding
there is the ensemble's mean; ``/embed`` also gives the variances and each
model's weight. ``usage`` counts words and punctuation marks, not any one
encoder's tokens (each model of the ensemble has its own tokenizer).
"""

from __future__ import annotations

import base64
import re
from typing import Any, Dict, List

from crossembed.serve.errors import RequestError
from crossembed.serve.schema import EmbedBody, EmbeddingsBody
from crossembed.serve.service import IndexService

__all__ = ["embed", "models", "openai_embeddings"]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def _texts(service: IndexService, texts: List[str], field: str) -> None:
    if service.index.ensemble is None:
        raise RequestError(400, f"{field}: this index has no ensemble to encode texts")
    if not texts:
        raise RequestError(400, f"{field}: must hold at least one text")


def _tokens(texts: List[str]) -> int:
    return sum(len(_TOKEN.findall(t)) for t in texts)


async def embed(service: IndexService, body: bytes) -> Dict[str, Any]:
    """``{mean, var, weights, models}``: one row per text; ``weights[i][k]`` is model ``k``'s share of text ``i``."""
    req = await service.decoder.decode(EmbedBody, body)
    _texts(service, req.texts, "texts")
    g = await service.encode(req.texts, req.role)
    ensemble = service.index.ensemble
    return {
        "mean": g.mean.tolist(),
        "var": g.var.tolist(),
        "weights": None if g.weights is None else g.weights.tolist(),
        "models": [e.encoder_name or type(e.encoder).__name__ for e in ensemble.embedders],
    }


def models(service: IndexService) -> Dict[str, Any]:
    """OpenAI's model list: the one served model."""
    entry = {"id": service.config.model_name, "object": "model", "created": 0, "owned_by": "crossembed"}
    return {"object": "list", "data": [entry]}


async def openai_embeddings(service: IndexService, body: bytes) -> Dict[str, Any]:
    """OpenAI's embeddings response for ``input``: the ensemble's means, as floats or base64 float32."""
    req = await service.decoder.decode(EmbeddingsBody, body)
    if req.model != service.config.model_name:
        raise RequestError(404, f"model: {req.model!r} is not served here (GET /v1/models lists the one that is)")
    texts = [req.input] if isinstance(req.input, str) else req.input
    _texts(service, texts, "input")
    if req.dimensions is not None and req.dimensions != service.index.dim:
        raise RequestError(400, f"dimensions: this model's embeddings have {service.index.dim}, not {req.dimensions}")
    mean = (await service.encode(texts, req.role)).mean
    if req.encoding_format == "base64":
        rows: List[Any] = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in mean]
    else:
        rows = mean.tolist()
    tokens = _tokens(texts)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)],
        "model": service.config.model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
