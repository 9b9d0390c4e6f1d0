"""The service's routes as one pure-ASGI layer in front of the FastAPI router.

:class:`ServiceRoutes` answers the routes of :data:`ROUTES` itself: it checks
the request's key (when the config has keys: 401 without a known key, 403 for
a read-only key on a write route) before reading anything, reads the body (at
most ``max_body_bytes``, else 413), hands the bytes to
:class:`~crossembed.serve.service.IndexService` (or
:mod:`crossembed.serve.embeddings`) and writes the JSON answer, or
``{"error": ...}`` for a :class:`~crossembed.serve.errors.RequestError`.
Every other request (``/docs``, ``/openapi.json``, routes a user adds, 404s)
goes on to the app; with keys, the API's description (``/docs``, ``/redoc``,
``/openapi.json``) needs a key of either kind first. FastAPI's routing,
dependency and response machinery would cost a large share of a
single-query search's time over HTTP; an unexpected exception still
propagates to the app's 500 handler.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, Iterable, List, Tuple, Union

from crossembed.serve import embeddings
from crossembed.serve.access import FULL, READ, request_key
from crossembed.serve.bodies import BodyFile
from crossembed.serve.errors import RequestError
from crossembed.serve.service import IndexService

__all__ = ["ACCESS", "ROUTES", "ServiceRoutes"]

#: ``path: (method, what it answers)``
ROUTES = {
    "/search": ("POST", "Top-k documents per query: {ids: [[...]], scores: [[...]]} (null pads)."),
    "/add": ("POST", "Add documents: {ids: [...]}."),
    "/upsert": ("POST", "Replace the documents of existing ids, add the others: {ids: [...]}."),
    "/remove": ("POST", "Remove documents by id: {removed: n}."),
    "/save": ("POST", "Save the index atomically: {path, documents, seconds}."),
    "/embed": ("POST", "The ensemble's Gaussians of texts: {mean, var, weights, models}."),
    "/v1/embeddings": ("POST", "OpenAI's embeddings: {object, data: [{embedding, index}], model, usage}."),
    "/v1/models": ("GET", "OpenAI's model list: {object, data: [{id, ...}]}."),
    "/healthz": ("GET", "Liveness and size: {status, documents, dim, ensemble, queued}."),
    "/readyz": ("GET", "Readiness: 200 {status: ready} once warmed up, 503 {status: starting} before."),
    "/metrics": ("GET", "Prometheus metrics (text exposition format)."),
}
#: the key a route needs when the server has keys (None: open; /metrics: READ unless ApiKeys.open_metrics)
ACCESS = {path: READ for path in ROUTES} | {p: FULL for p in ("/add", "/upsert", "/remove", "/save")}
ACCESS |= {"/healthz": None, "/readyz": None}
_JSON = [(b"content-type", b"application/json")]
_UNAUTHORIZED = [*_JSON, (b"www-authenticate", b"Bearer")]
_METRICS = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]


async def read_body(scope, receive, limit: int, spool_above: int) -> Union[bytes, BodyFile]:
    """The request body, or RequestError 413 as soon as it is known to exceed ``limit`` bytes; a body
    larger than ``spool_above`` bytes goes to a :class:`~crossembed.serve.bodies.BodyFile` as it arrives."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise RequestError(413, f"body: {int(value)} bytes exceed this server's limit of {limit}")
    chunks: List[bytes] = []
    size, spool = 0, None
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestError(400, "body: the client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"body: more than this server's limit of {limit} bytes")
            if spool is not None:
                spool.write(chunk)
            elif size > spool_above:
                spool = BodyFile(b"".join([*chunks, chunk]))
                chunks = []
            else:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks) if spool is None else spool
    except BaseException:
        if spool is not None:
            spool.close()
        raise


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
    """Pure ASGI middleware: the routes of :data:`ROUTES` on ``service``, everything else to ``app``.

    ``docs``: the app's own paths that describe the API (FastAPI's ``/docs``, ``/redoc``,
    ``/openapi.json``): when the config has keys they need a key of either kind too, checked
    here before the app answers them (default none).
    """

    def __init__(self, app, *, service: IndexService, docs: Iterable[str] = ()):
        self.app = app
        self.service = service
        self.limit = service.config.max_body_bytes
        self.keys = service.config.api_keys
        self.access = dict(ACCESS)
        if self.keys is not None and self.keys.open_metrics:
            self.access["/metrics"] = None
        self.docs = frozenset(docs) if self.keys is not None else frozenset()

    def _check_key(self, path: str, headers) -> None:
        needed = self.access.get(path, READ) if self.keys is not None else None
        if needed is None:
            return
        kind = self.keys.kind(request_key(headers))
        if kind is None:
            raise RequestError(401, "authorization: a key is needed (Authorization: Bearer KEY)")
        if needed == FULL and kind != FULL:
            raise RequestError(403, f"authorization: {path} needs a full key, not a read-only one")

    async def _answer(self, path: str, scope, receive) -> Tuple[int, bytes, Any]:
        service = self.service
        if path == "/metrics":
            return 200, await asyncio.to_thread(service.metrics.render), _METRICS
        if path == "/healthz":
            payload: Dict[str, Any] = await service.health()
        elif path == "/readyz":
            status = 200 if service.ready else 503
            return status, json.dumps({"status": "ready" if service.ready else "starting"}).encode(), _JSON
        elif path == "/v1/models":
            payload = embeddings.models(service)
        else:
            body = await read_body(scope, receive, self.limit, service.decoder.inline_bytes)
            if path == "/search":
                payload = await service.search(body)
            elif path in ("/add", "/upsert"):
                payload = await service.add(body, upsert=path == "/upsert")
            elif path == "/remove":
                payload = await service.remove(body)
            elif path == "/embed":
                payload = await embeddings.embed(service, body)
            elif path == "/v1/embeddings":
                payload = await embeddings.openai_embeddings(service, body)
            else:
                payload = await service.save(body)
        return 200, json.dumps(payload, allow_nan=False).encode(), _JSON

    async def __call__(self, scope, receive, send):
        route = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            if scope["type"] == "http" and scope["path"] in self.docs:
                try:
                    self._check_key(scope["path"], scope["headers"])
                except RequestError as exc:
                    await _respond(send, exc.status, json.dumps({"error": exc.message}).encode(), _UNAUTHORIZED)
                    return
            await self.app(scope, receive, send)
            return
        try:
            self._check_key(scope["path"], scope["headers"])
            if scope["method"] != route[0]:
                raise RequestError(405, f"method: {scope['method']} is not allowed on {scope['path']}")
            status, body, headers = await self._answer(scope["path"], scope, receive)
        except RequestError as exc:
            headers = _UNAUTHORIZED if exc.status == 401 else _JSON
            status, body = exc.status, json.dumps({"error": exc.message}).encode()
        await _respond(send, status, body, headers)
