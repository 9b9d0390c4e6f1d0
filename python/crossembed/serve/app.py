"""The FastAPI app of one index: its routes, OpenAPI description and lifespan (drain, save).

Routes (all JSON; errors are ``{"error": "<field>: <message>"}``):

- ``POST /search``, ``POST /add``, ``POST /upsert``, ``POST /remove``, ``POST /save``
- ``POST /embed``, ``POST /v1/embeddings``, ``GET /v1/models`` (OpenAI's shapes)
- ``GET /healthz`` (liveness), ``GET /readyz`` (warmed up), ``GET /metrics`` (Prometheus text)

They are answered by :class:`~crossembed.serve.routes.ServiceRoutes` (a pure
ASGI layer inside the metrics middleware), which parses bodies with the
pydantic models of :mod:`crossembed.serve.schema` straight from JSON; the
models also describe the routes in ``/openapi.json`` and ``/docs``.
Everything else is FastAPI's: the docs, routes and middleware a user adds,
the error handlers.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, Callable, Dict, Optional

from fastapi import FastAPI

from crossembed.serve.config import ServeConfig
from crossembed.serve.errors import install_error_handlers
from crossembed.serve.metrics import MetricsMiddleware
from crossembed.serve.routes import ROUTES, ServiceRoutes
from crossembed.serve.schema import (
    AddBody,
    EmbedBody,
    EmbeddingsBody,
    RemoveBody,
    SaveBody,
    SearchBody,
    UpsertBody,
)
from crossembed.serve.service import IndexService
from crossembed.uec.index import UECIndex

__all__ = ["create_app"]

logger = logging.getLogger("crossembed.serve")

_MODELS = {
    "/search": SearchBody,
    "/add": AddBody,
    "/upsert": UpsertBody,
    "/remove": RemoveBody,
    "/save": SaveBody,
    "/embed": EmbedBody,
    "/v1/embeddings": EmbeddingsBody,
}


def _lifespan(service: IndexService):
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        index, config = service.index, service.config
        logger.info(
            "serving %d documents of dimension %d (ensemble: %s; batches up to %d queries)",
            await asyncio.to_thread(len, index),
            index.dim,
            "yes" if index.ensemble is not None else "no",
            config.max_batch,
        )
        warm_up = asyncio.create_task(service.warm_up())  # serving meanwhile: /readyz says 503 until it is done
        yield
        logger.info("shutting down: finishing queued searches")
        warm_up.cancel()
        service.decoder.close()  # a body being decoded gets no answer: its request was cut off already
        await service.close()
        if config.save_on_exit:
            try:
                await asyncio.to_thread(service.save_to, config.save_path)
            except Exception as exc:  # logged here, raised by run_server after uvicorn has stopped
                logger.error("saving the index to %s at shutdown failed", config.save_path, exc_info=exc)
                service.save_error = exc
        logger.info("stopped")

    return lifespan


def _openapi(app: FastAPI) -> Callable[[], Dict[str, Any]]:
    """``app.openapi`` with the service routes described (FastAPI does not see them: ServiceRoutes answers them)."""
    error = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}

    def openapi() -> Dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            for path, (method, summary) in ROUTES.items():
                op: Dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "OK"}}}
                model = _MODELS.get(path)
                if model is not None:
                    body = {"application/json": {"schema": model.model_json_schema()}}
                    op["requestBody"] = {"required": method == "POST" and model is not SaveBody, "content": body}
                    op["responses"]["4XX"] = {
                        "description": "the request's fault (the message starts with the field)",
                        "content": {"application/json": {"schema": error}},
                    }
                schema.setdefault("paths", {})[path] = {method.lower(): op}
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


def create_app(index: UECIndex, *, config: Optional[ServeConfig] = None) -> FastAPI:
    """An ASGI app serving ``index`` (run it with uvicorn, or mount it in another app); ``config``
    defaults to ``ServeConfig()``.

    Concurrent searches with the same settings (``exact``, candidates, ``ef``,
    ``filter``) share index calls of up to ``config.max_batch`` queries;
    everything that touches the index runs in worker threads.
    The lifespan's shutdown finishes queued searches and, with
    ``config.save_on_exit``, saves the index atomically to ``config.save_path``.
    """
    config = ServeConfig() if config is None else config
    if not isinstance(config, ServeConfig):
        raise TypeError(f"config must be a ServeConfig, got {type(config).__name__}")
    service = IndexService(index, config)
    app = FastAPI(title="crossembed", summary="UEC index search and updates", lifespan=_lifespan(service))
    app.state.service = service
    install_error_handlers(app)
    # with keys the API's description needs a key too (it lists every route and body a caller may send)
    docs = [app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url]
    app.add_middleware(ServiceRoutes, service=service, docs=[p for p in docs if p])
    app.add_middleware(MetricsMiddleware, metrics=service.metrics, routes=frozenset(ROUTES))  # outermost
    app.openapi = _openapi(app)
    return app
