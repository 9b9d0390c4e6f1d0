"""The service's routes as one pure-ASGI layer in front of the FastAPI router.

:class:`ServiceRoutes` answers ``POST /search``, ``/add``, ``/upsert``,
``/remove``, ``/save`` and ``GET /healthz``, ``/metrics`` itself: it reads the
body (at most ``max_body_bytes``, else 413), hands the bytes to
:class:`~crossembed.serve.service.IndexService` and writes the JSON answer,
or ``{"error": ...}`` for a :class:`~crossembed.serve.errors.RequestError`.
Every other request (``/docs``, ``/openapi.json``, routes a user adds, 404s)
goes on to the app. FastAPI's routing, dependency and response machinery
would cost a large share of a single-query search's time over HTTP; an
unexpected exception still propagates to the app's 500 handler.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, Tuple

from crossembed.serve.errors import RequestError
from crossembed.serve.service import IndexService

__all__ = ["ROUTES", "ServiceRoutes"]

#: ``path: (method, what it answers)``
ROUTES = {
    "/search": ("POST", "Top-k documents per query: {ids: [[...]], scores: [[...]]} (null pads)."),
    "/add": ("POST", "Add documents: {ids: [...]}."),
    "/upsert": ("POST", "Replace the documents of existing ids, add the others: {ids: [...]}."),
    "/remove": ("POST", "Remove documents by id: {removed: n}."),
    "/save": ("POST", "Save the index atomically: {path, documents, seconds}."),
    "/healthz": ("GET", "Liveness and size: {status, documents, dim, ensemble, queued}."),
    "/metrics": ("GET", "Prometheus metrics (text exposition format)."),
}
_JSON = [(b"content-type", b"application/json")]
_METRICS = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]


async def read_body(scope, receive, limit: int) -> bytes:
    """The request body, or RequestError 413 as soon as it is known to exceed ``limit`` bytes."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise RequestError(413, f"body: {int(value)} bytes exceed this server's limit of {limit}")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestError(400, "body: the client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"body: more than this server's limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _respond(send, status: int, body: bytes, headers) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ServiceRoutes:
    """Pure ASGI middleware: the routes of :data:`ROUTES` on ``service``, everything else to ``app``."""

    def __init__(self, app, *, service: IndexService):
        self.app = app
        self.service = service
        self.limit = service.config.max_body_bytes

    async def _answer(self, path: str, scope, receive) -> Tuple[int, bytes, Any]:
        service = self.service
        if path == "/metrics":
            return 200, await asyncio.to_thread(service.metrics.render), _METRICS
        if path == "/healthz":
            payload: Dict[str, Any] = await service.health()
        else:
            body = await read_body(scope, receive, self.limit)
            if path == "/search":
                payload = await service.search(body)
            elif path in ("/add", "/upsert"):
                payload = await service.add(body, upsert=path == "/upsert")
            elif path == "/remove":
                payload = await service.remove(body)
            else:
                payload = await service.save(body)
        return 200, json.dumps(payload, allow_nan=False).encode(), _JSON

    async def __call__(self, scope, receive, send):
        route = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        try:
            if scope["method"] != route[0]:
                raise RequestError(405, f"method: {scope['method']} is not allowed on {scope['path']}")
            status, body, headers = await self._answer(scope["path"], scope, receive)
        except RequestError as exc:
            status, body, headers = exc.status, json.dumps({"error": exc.message}).encode(), _JSON
        await _respond(send, status, body, headers)
