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

from coordinator import enrollment_api, host_api, operator_api, ops
from coordinator.auth import Authenticator
from coordinator.boundary import RequestBoundary, http_exception_handler
from coordinator.context import Context
from coordinator.keys import Keys
from coordinator.metrics import Metrics
from coordinator.reaper import run_reaper
from coordinator.redis_client import open_redis
from coordinator.settings import Settings
from coordinator.store import Store
from coordinator.waiter import ClaimWaiter

log = logging.getLogger("coordinator")

Handler = Callable[[Context, Request], Awaitable[Response]]
ADMIN_TOKEN_MIN_CHARS = 32


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
        elif len(settings.admin_token.get_secret_value()) < ADMIN_TOKEN_MIN_CHARS:
            log.warning("COORDINATOR_ADMIN_TOKEN is shorter than %d characters: easy to guess",
                        ADMIN_TOKEN_MIN_CHARS)
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
    # Every other exception reaches RequestBoundary, the one place errors become responses;
    # Starlette would answer routing errors (404, 405) in plain text without this handler.
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_exception_handler})
    app.add_middleware(RequestBoundary, metrics=ctx.metrics)
    app.state.ctx = ctx  # for tests and the demo; routes get ctx explicitly
    return app
