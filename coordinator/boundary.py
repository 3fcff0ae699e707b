"""The one error boundary: every exception a request raises becomes the contract's JSON error here.

``RequestBoundary`` is the outermost middleware of the app (inside Starlette's own server-error
middleware, which therefore never sees an exception). It counts each request for ``/metrics`` and
turns whatever escaped the route into a response with ``response_for``:

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

from redis import exceptions as redis_errors
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.errors import (
    ApiError,
    Internal,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    Unavailable,
)
from coordinator.metrics import Metrics
from coordinator.views import json_response

log = logging.getLogger("coordinator")

# Redis answers nothing useful now, but may in a moment: the client should retry.
REDIS_UNAVAILABLE = (
    redis_errors.ConnectionError,  # includes BusyLoadingError and a full connection pool
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    redis_errors.ClusterDownError,
    redis_errors.MasterDownError,
    redis_errors.TryAgainError,
)
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


def api_error_for(exc: BaseException, scope: Scope) -> ApiError:
    """The contract's error for any exception (logging the unexpected ones once)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, HTTPException):
        if exc.status_code == 405:
            error = MethodNotAllowed(f"{scope['method'][:16]} is not allowed on this path")
            error.headers = {"Allow": _allowed_methods(scope)}
            return error
        if exc.status_code == 404:
            return NotFound("no such path")
        if exc.status_code < 500:
            return InvalidRequest(str(exc.detail))
        return Internal(str(exc.detail))
    rid = request_id(scope)
    if isinstance(exc, REDIS_UNAVAILABLE):
        log.warning("request %s: Redis unavailable (%s)", rid, type(exc).__name__)
        return Unavailable("the coordinator cannot reach Redis; retry shortly")
    log.error("request %s: unexpected %s", rid, type(exc).__name__, exc_info=exc)
    return Internal(f"internal error (request {rid})")


def response_for(exc: BaseException, scope: Scope) -> Response:
    error = api_error_for(exc, scope)
    response = json_response(error.body(), error.status_code)
    if error.headers:
        response.headers.update(error.headers)
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
