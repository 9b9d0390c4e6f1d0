"""Errors as ``{"error": "..."}`` JSON: 4xx for the client's request, 500 (logged) for the server's faults."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

__all__ = ["RequestError", "error_response", "install_error_handlers"]

logger = logging.getLogger("crossembed.serve")


class RequestError(Exception):
    """A request the client must fix: HTTP ``status`` (4xx) and a message that starts with the field."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def __reduce__(self):  # raised in the body-decoding process and re-raised here
        return type(self), (self.status, self.message)


def error_response(status: int, message: str) -> Response:
    return Response(json.dumps({"error": message}), status_code=status, media_type="application/json")


async def _request_error(request: Request, exc: RequestError) -> Response:
    return error_response(exc.status, exc.message)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = exc.errors()
    if not errors:
        return error_response(422, "body: invalid request")
    loc = [str(p) for p in errors[0].get("loc", ()) if p != "body"]
    return error_response(422, f"{'.'.join(loc) or 'body'}: {errors[0].get('msg', 'invalid')}")


async def _http_error(request: Request, exc: HTTPException) -> Response:
    message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    if exc.status_code == 404:
        message = f"path: no route {request.url.path}"
    elif exc.status_code == 405:
        message = f"method: {request.method} is not allowed on {request.url.path}"
    return error_response(exc.status_code, message)


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, f"internal server error ({type(exc).__name__})")


def install_error_handlers(app: FastAPI) -> None:
    """Every error the app returns, as ``{"error": message}``."""
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _server_error)
