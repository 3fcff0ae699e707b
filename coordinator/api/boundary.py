"""The one error boundary: every exception a request raises becomes the contract's JSON error here.

``RequestBoundary`` is the app's one middleware. It counts each request for ``/metrics`` and turns
whatever escaped the route into a response with ``response_for``, using the mapping of
``errors.error_for_exception``; routing's own 404 and 405, which Starlette's exception middleware
catches first, are handed to the same ``response_for`` (``app.py``):

- ``ApiError`` and its subclasses: their status, code and headers; an ``Unauthorized`` is first
  handed to the failure throttle (``throttle.py``), which may answer ``429 rate_limited`` instead;
- Starlette's ``HTTPException`` (routing 404 and 405): ``not_found`` / ``method_not_allowed``,
  405 with the ``Allow`` header of every method the path takes;
- Redis unreachable, loading, read-only or failing over: ``503 unavailable`` with ``Retry-After``,
  logged through the process's ``OutageLog``: one line as the outage begins, none per request;
- a body not complete within ``COORDINATOR_BODY_TIMEOUT_S`` of the head: ``408
  request_timeout``, and the connection closed (``body_deadline.py``, which also closes the
  connection of any answer sent before its body was read);
- a client that hung up mid-request (Starlette's ``ClientDisconnect``, raised as a body is read):
  no answer (nobody is there to read it), one line at debug level, and counted as status ``499``
  (nginx's "client closed request"): not an error of the server (PROTOCOL.md, Conventions);
- a request the server cancels at shutdown, still running past its graceful timeout
  (``serve/server.py``): ``503 unavailable`` with ``Retry-After`` and the connection closed, one
  line at info level, where uvicorn would answer a plain-text 500 and log a traceback: a client
  retries a 503, on this process's successor or another;
- anything else: ``500 internal``, logged once with a request id that the body names, and never
  the exception's text.

When ``logs.REQUESTS_LOGGER`` is enabled (``COORDINATOR_LOG_FORMAT=json``) it also logs one line
per request: request id, method, route template, status, duration and the path's host id. Never
the raw path (it may carry a query string), a header or a body, so never a secret.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.api.body_deadline import BodyDeadline
from coordinator.api.responses import json_response
from coordinator.api.throttle import FailureThrottle
from coordinator.errors import (
    ApiError,
    Internal,
    MethodNotAllowed,
    Unauthorized,
    Unavailable,
    error_for_exception,
    redis_unavailable,
)
from coordinator.longpoll import CONNECTION
from coordinator.metrics import Metrics
from coordinator.outage import OutageLog
from wire import is_valid_id

log = logging.getLogger("coordinator")
# One line per request (route template, status, duration, host id; never a secret), written only
# when the process's logging turns this logger on (serve/logs.py does, for JSON logs).
REQUESTS_LOGGER = "coordinator.requests"
request_log = logging.getLogger(REQUESTS_LOGGER)

# The metrics label is one of these, whatever a client sends as its method.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# The status a request is counted under when its client hung up before it was answered (nginx's).
CLIENT_CLOSED = 499
# Where a request's id is kept once chosen, so its error line and its request line agree.
_REQUEST_ID = "tether.request_id"


def request_id(scope: Scope) -> str:
    """The caller's ``X-Request-ID`` when it is a plain short token, else a fresh one; the same
    one however often it is asked for during the request."""
    rid = scope.get(_REQUEST_ID)
    if rid is None:
        rid = scope[_REQUEST_ID] = _new_request_id(scope)
    return rid


def _new_request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id" and 0 < len(value) <= 64 and value.isascii() and value.isalnum():
            return str(value.decode())
    return secrets.token_hex(8)


def _allowed_methods(scope: Scope) -> str:
    methods: set[str] = set()
    for route in scope["app"].routes:
        match, _ = route.matches({**scope, "method": ""})
        if match is Match.PARTIAL and getattr(route, "methods", None):
            methods |= route.methods
    return ", ".join(sorted(methods))


def _log(exc: BaseException, error: ApiError, rid: str, outage: OutageLog) -> None:
    if isinstance(error, Unavailable):
        if redis_unavailable(exc):
            outage.failed(exc)
        else:  # a 503 of ours (too few replicas confirmed a write), logged as it always was
            log.warning("request %s: Redis unavailable (%s)", rid, type(exc).__name__,
                        extra={"request_id": rid})
    elif isinstance(error, Internal):
        log.error("request %s: unexpected %s", rid, type(exc).__name__, exc_info=exc,
                  extra={"request_id": rid})


def _log_request(scope: Scope, route: str, method: str, status: int, started_at: float) -> None:
    host_id = scope.get("path_params", {}).get("host_id")
    request_log.info("%s %s %d", method, route, status, extra={
        "request_id": request_id(scope),
        "method": method,
        "route": route,
        "status": status,
        "duration_ms": round((time.perf_counter() - started_at) * 1000, 3),
        # A segment that is not an id was refused (400); it is the client's text, not logged.
        "host_id": host_id if is_valid_id(host_id) else None,
    })


def _shutdown_answer() -> Response:
    error = Unavailable("the coordinator is shutting down; retry")
    response = json_response(error.body(), error.status_code)
    response.headers.update({**(error.headers or {}), "Connection": "close"})
    return response


def response_for(exc: BaseException, scope: Scope, outage: OutageLog) -> Response:
    """The contract's answer to ``exc`` (errors.py maps it), logged once if it was unexpected."""
    rid = "" if isinstance(exc, ApiError) else request_id(scope)  # the common case needs none
    error = error_for_exception(exc, rid)
    _log(exc, error, rid, outage)
    response = json_response(error.body(), error.status_code)
    if error.headers:
        response.headers.update(error.headers)
    if isinstance(error, MethodNotAllowed):
        response.headers["Allow"] = _allowed_methods(scope)
    return response


class RequestBoundary:
    """Counts requests by route template, method and status, answers every exception, and logs
    each request when ``REQUESTS_LOGGER`` is enabled. Redis being unavailable is told to
    ``outage``. Refused credentials are counted by ``throttle`` (None: never throttled)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, outage: OutageLog,
                 throttle: FailureThrottle | None = None, body_timeout_s: float = 30.0) -> None:
        self.app = app
        self.body_timeout_s = body_timeout_s
        self.metrics = metrics
        self.outage = outage
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        logged = request_log.isEnabledFor(logging.INFO)  # cached by logging: a dict lookup
        started_at = time.perf_counter() if logged else 0.0
        status = 500
        started = False
        body = BodyDeadline(scope, receive, self.body_timeout_s)

        async def send_and_record(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                message = body.closing(message)
            await send(message)

        try:
            await self.app(scope, body.receive, send_and_record)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if started or task is None or not task.cancelling() or CONNECTION not in scope.get("extensions", {}):
                raise
            # Our server runs each request in a task of its own, and cancels it only at shutdown
            # (elsewhere, an in-process client's request runs in the client's task, whose cancel
            # must go on). Answer what a client can retry, and end here: re-raised, uvicorn would
            # log a traceback and answer its own plain-text 500.
            log.info("request %s: cut off by the shutdown, answered 503", request_id(scope))
            await _shutdown_answer()(scope, body.receive, send_and_record)
        except ClientDisconnect:
            # The client is gone: nothing to answer, nothing the server did wrong.
            if not started:
                status = CLIENT_CLOSED
            log.debug("request %s: the client hung up before the body ended", request_id(scope))
        except Exception as exc:  # this is the boundary
            if started:
                # Too late for an error body: log it once, and the server closes the connection.
                rid = request_id(scope)
                log.error("request %s: %s after the response started", rid, type(exc).__name__,
                          exc_info=exc, extra={"request_id": rid})
            else:
                if isinstance(exc, Unauthorized) and self.throttle is not None:
                    # Only a refused credential is counted: a valid one never gets here.
                    exc = await self.throttle.refusal(exc, scope, self.outage)
                await response_for(exc, scope, self.outage)(scope, body.receive, send_and_record)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self.metrics.requests.labels(path, method, str(status)).inc()
            if logged:
                _log_request(scope, path, method, status, started_at)
