"""The Starlette application: routes, the one error handler, and the lifespan that opens Redis
and runs the wake-up listener and the reaper."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import enrollment_api, host_api, operator_api, ops
from coordinator.auth import Authenticator
from coordinator.context import Context
from coordinator.errors import ApiError
from coordinator.keys import Keys
from coordinator.metrics import Metrics
from coordinator.reaper import run_reaper
from coordinator.redis_client import open_redis
from coordinator.settings import Settings
from coordinator.store import Store
from coordinator.views import json_response
from coordinator.waiter import ClaimWaiter

log = logging.getLogger("coordinator")

Handler = Callable[[Context, Request], Awaitable[Response]]


class MetricsMiddleware:
    """Counts requests by route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            self.metrics.requests.inc(path, scope["method"], str(status))


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return json_response(exc.body(), exc.status_code)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return json_response({"error": {"code": code, "message": str(exc.detail)}}, exc.status_code)


def build_context(settings: Settings, redis: Redis) -> Context:
    keys = Keys(settings.key_prefix)
    return Context(
        settings=settings,
        store=Store(redis, keys, host_offline_after_ms=settings.host_offline_after_ms),
        auth=Authenticator(redis, keys, settings.admin_token, settings.static_hosts),
        waiter=ClaimWaiter(redis, keys.wake_channel),
        metrics=Metrics(),
    )


def create_app(settings: Settings, redis: Redis | None = None) -> Starlette:
    """The coordinator app. ``redis`` overrides the client opened from ``settings``."""
    description = "given client"
    if redis is None:
        redis, description = open_redis(settings)
    ctx = build_context(settings, redis)
    ctx.metrics.waiting_polls.set_function(lambda: ctx.waiter.waiting)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.info("coordinator using %s, key prefix %s", description, settings.key_prefix)
        if settings.admin_token is None:
            log.warning("COORDINATOR_ADMIN_TOKEN is not set: the operator API refuses every call")
        await ctx.store.load_scripts()
        loops = [asyncio.create_task(ctx.waiter.run(), name="waiter")]
        await ctx.waiter.wait_ready()
        loops.append(asyncio.create_task(
            run_reaper(ctx.store, settings.reaper_interval_s, ctx.metrics), name="reaper"
        ))
        try:
            yield
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await redis.aclose()

    def bind(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return functools.partial(handler, ctx)

    host = "/internal/v1/hosts/{host_id}"
    routes = [
        Route("/internal/v1/enroll", bind(enrollment_api.enroll), methods=["POST"]),
        Route(f"{host}/devices/enroll", bind(enrollment_api.enroll_devices), methods=["POST"]),
        Route(f"{host}/heartbeat", bind(host_api.heartbeat), methods=["PUT"]),
        Route(f"{host}/claim", bind(host_api.claim), methods=["POST"]),
        Route(f"{host}/leases/{{lease_id}}/renew", bind(host_api.renew), methods=["POST"]),
        Route(f"{host}/results", bind(host_api.results), methods=["POST"]),
        Route("/api/v1/tasks", bind(operator_api.create_task), methods=["POST"]),
        Route("/api/v1/tasks", bind(operator_api.list_tasks), methods=["GET"]),
        Route("/api/v1/tasks/{task_id}", bind(operator_api.get_task), methods=["GET"]),
        Route("/api/v1/tasks/{task_id}/cancel", bind(operator_api.cancel_task), methods=["POST"]),
        Route("/api/v1/devices", bind(operator_api.list_devices), methods=["GET"]),
        Route("/api/v1/hosts", bind(operator_api.list_hosts), methods=["GET"]),
        Route("/api/v1/hosts/{host_id}", bind(operator_api.get_host), methods=["GET"]),
        Route("/api/v1/hosts/{host_id}/revoke", bind(enrollment_api.revoke_host), methods=["POST"]),
        Route("/api/v1/enrollment-tokens", bind(enrollment_api.create_token), methods=["POST"]),
        Route("/api/v1/enrollment-tokens", bind(enrollment_api.list_tokens), methods=["GET"]),
        Route("/api/v1/enrollment-tokens/{token_id}", bind(enrollment_api.revoke_token), methods=["DELETE"]),
        Route("/healthz", bind(ops.healthz), methods=["GET"]),
        Route("/readyz", bind(ops.readyz), methods=["GET"]),
        Route("/metrics", bind(ops.metrics), methods=["GET"]),
        Route("/openapi.json", bind(ops.openapi), methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )
    app.add_middleware(MetricsMiddleware, metrics=ctx.metrics)
    app.state.ctx = ctx  # for tests and the demo; routes get ctx explicitly
    return app
