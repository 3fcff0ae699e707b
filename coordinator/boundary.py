"""The one error boundary: every exception a request raises becomes the contract's JSON error here.

``RequestBoundary`` is the outermost middleware of the app (inside Starlette's own server-error
middleware, which therefore never sees an exception). It counts each request for ``/metrics`` and
turns whatever escaped the route into a response with ``response_for``, using the mapping of
``errors.error_for_exception``:

- ``ApiError`` and its subclasses: their status, code and headers;
- Starlette's ``HTTPException`` (routing 404 and 405): ``not_found`` / ``method_not_allowed``,
  405 with the ``Allow`` header of every method the path takes;
- Redis unreachable, loading, read-only or failing over: ``503 unavailable`` with ``Retry-After``;
- anything else: ``500 internal``, logged once with a request id that the body names, and never
  the exception's text.
"""

from __future__ import annotations

import logging
import secrets

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.errors import (
    ApiError,
    Internal,
    MethodNotAllowed,
    Unavailable,
    error_for_exception,
)
from coordinator.metrics import Metrics
from coordinator.views import json_response

log = logging.getLogger("coordinator")

# The metrics label is one of these, whatever a client sends as its method.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def request_id(scope: Scope) -> str:
    """The caller's ``X-Request-ID`` when it is a plain short token, else a fresh one."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id" and 0 < len(value) <= 64 and value.isascii() and value.isalnum():
            return value.decode()
    return secrets.token_hex(8)


def _allowed_methods(scope: Scope) -> str:
    methods: set[str] = set()
    for route in scope["app"].routes:
        match, _ = route.matches({**scope, "method": ""})
        if match is Match.PARTIAL and getattr(route, "methods", None):
            methods |= route.methods
    return ", ".join(sorted(methods))


def _log(exc: BaseException, error: ApiError, rid: str) -> None:
    if isinstance(error, Unavailable):
        log.warning("request %s: Redis unavailable (%s)", rid, type(exc).__name__)
    elif isinstance(error, Internal):
        log.error("request %s: unexpected %s", rid, type(exc).__name__, exc_info=exc)


def response_for(exc: BaseException, scope: Scope) -> Response:
    """The contract's answer to ``exc`` (errors.py maps it), logged once if it was unexpected."""
    rid = "" if isinstance(exc, ApiError) else request_id(scope)  # the common case needs none
    error = error_for_exception(exc, rid)
    _log(exc, error, rid)
    response = json_response(error.body(), error.status_code)
    if error.headers:
        response.headers.update(error.headers)
    if isinstance(error, MethodNotAllowed):
        response.headers["Allow"] = _allowed_methods(scope)
    return response


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette answers routing errors itself unless given a handler: this sends them here."""
    return response_for(exc, request.scope)


class RequestBoundary:
    """Counts requests by route template, method and status, and answers every exception."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = False

        async def send_and_record(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        except Exception as exc:  # noqa: BLE001 - this is the boundary
            if started:
                # Too late for an error body: log it once, and the server closes the connection.
                log.error("request %s: %s after the response started", request_id(scope),
                          type(exc).__name__, exc_info=exc)
            else:
                await response_for(exc, scope)(scope, receive, send_and_record)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self.metrics.requests.inc(path, method, str(status))
