"""The Starlette application: the routes of ``routes.py``, the error boundary, and the lifespan
that opens Redis and runs the wake-up listener and the reaper."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from coordinator.api.agent_instances import AgentInstances
from coordinator.api.auth import ACCESS, Authenticator
from coordinator.api.bodies import NoBody
from coordinator.api.body_slots import LargeBodies
from coordinator.api.boundary import RequestBoundary, response_for
from coordinator.api.context import Context
from coordinator.api.names import Names
from coordinator.api.routes import ENDPOINTS, Endpoint
from coordinator.api.throttle import FailureThrottle
from coordinator.api.validation import read
from coordinator.api.webhooks import subject_view
from coordinator.blobs.artifacts import Artifacts, open_blob_store, run_orphan_sweeper
from coordinator.clock import ShiftedClock
from coordinator.feed import EventFeed
from coordinator.longpoll import ClaimWaiter, new_process_id
from coordinator.mcp.endpoint import PATH as MCP_PATH
from coordinator.mcp.endpoint import McpEndpoint
from coordinator.metrics import Metrics
from coordinator.outage import OutageLog
from coordinator.reaper import run_reaper, upgrade_before_serving
from coordinator.settings import Settings
from coordinator.state.epoch import Epoch
from coordinator.state.keys import Keys
from coordinator.state.reads import Queries
from coordinator.state.scripts import Durability, load_scripts
from coordinator.state.store import Store
from coordinator.state.webhooks import WebhookStore
from coordinator.transport.base import RedisTransport
from coordinator.transport.open import open_redis
from coordinator.webhook_endpoints import DeliveryPolicy
from coordinator.webhooks import WebhookDelivery

log = logging.getLogger("coordinator")

# The methods whose body an operator route that takes none still reads, to refuse any field in it.
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _Endpoint:
    """A route's ASGI app: an operator route's credential and scope checked, the one place,
    before its handler reads the path or the body (the handler finds the operator with
    ``auth.access_of``), and the body of one that takes none refused if it holds a field; then
    its handler, called with the context and the request, and the response sent."""

    def __init__(self, endpoint: Endpoint, ctx: Context) -> None:
        self._endpoint = endpoint
        self._ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        endpoint = self._endpoint
        if endpoint.scope is not None:
            scope[ACCESS] = await self._ctx.auth.authorize(request, endpoint.scope, endpoint.own_scope)
            if endpoint.request is None and scope["method"] in _WRITES:
                await read(request, NoBody, self._ctx.settings.max_body_bytes)  # nothing, or {}
        response = await endpoint.handler(self._ctx, request)
        await response(scope, receive, send)


def build_context(settings: Settings, redis: RedisTransport, clock: ShiftedClock | None = None) -> Context:
    keys = Keys(settings.key_prefix)
    process_id = new_process_id()
    scripts = load_scripts()
    # What this process keeps from Redis is dropped when Redis lost its data.
    epoch = Epoch(redis.client, keys.epoch)
    epoch.on_change(next(iter(scripts.values())).library.forget)
    durability = Durability(settings.redis_wait_replicas, settings.redis_wait_timeout_ms)
    store = Store(redis, keys, host_offline_after_ms=settings.host_offline_after_ms,
                  claim_timeout_ms=settings.claim_timeout_ms, retention_ms=settings.task_retention_ms,
                  durability=durability,
                  scripts=scripts, candidates_scanned=settings.candidates_scanned, clock=clock)
    metrics = Metrics()
    queries = Queries(redis, store.deployment, scripts=scripts, candidates_scanned=settings.candidates_scanned,
                      clock=clock)
    names = Names(queries)
    return Context(
        settings=settings,
        store=store,
        queries=queries,
        auth=Authenticator(redis.client, keys, settings.admin_token, settings.static_hosts, epoch, store),
        waiter=ClaimWaiter(redis, keys.inbox(process_id), process_id),
        metrics=metrics,
        feed=EventFeed(redis.client, keys.feed, annotate=names.add),
        epoch=epoch,
        artifacts=Artifacts(open_blob_store(settings), redis.client, keys, metrics,
                            max_uploads=settings.max_concurrent_uploads,
                            orphan_grace_s=settings.artifact_orphan_grace_s),
        large_bodies=LargeBodies(settings.max_concurrent_large_bodies, settings.max_body_bytes),
        webhooks=WebhookStore(redis, store.deployment, scripts, durability, clock),
        agents=AgentInstances(settings.host_offline_after_s),
        names=names,
    )


def create_app(settings: Settings, redis: RedisTransport | None = None,
               clock: ShiftedClock | None = None) -> Starlette:
    """The coordinator app. ``redis`` overrides the transport opened from ``settings``; ``clock``
    (tests only) moves the clock every script reads (coordinator/clock.py)."""
    description = "given client"
    if redis is None:
        if settings.redis_url is None and settings.redis_wait_replicas:
            log.warning("COORDINATOR_REDIS_WAIT_REPLICAS is ignored: the embedded Redis has no replicas")
            settings = settings.model_copy(update={"redis_wait_replicas": 0})
        redis, description = open_redis(settings)
    ctx = build_context(settings, redis, clock)
    ctx.metrics.waiting_polls.set_function(lambda: ctx.waiter.waiting)
    ctx.metrics.feed_watchers.set_function(lambda: ctx.feed.watchers)
    delivery = WebhookDelivery(ctx.webhooks, functools.partial(subject_view, ctx), DeliveryPolicy.of(settings),
                               ctx.metrics, ctx.waiter.process_id)
    # Requests that answer 503 and the reaper's sweeps report to one outage: its first failure is
    # a line, and the first sweep that works ends it (requests cannot tell when Redis is back).
    outage = OutageLog(logging.getLogger("coordinator.outage"), "requests and reaper")
    # /mcp: outside the route table (the OpenAPI document leaves it out), authenticated as it is.
    mcp = McpEndpoint(ctx)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.info("coordinator using %s, key prefix %s, artifacts in %r", description, settings.key_prefix,
                 ctx.artifacts.blobs)
        await ctx.store.load_scripts()
        await ctx.epoch.check()  # the epoch this process's caches belong to (written if missing)
        await upgrade_before_serving(ctx.store)
        loops = [asyncio.create_task(ctx.waiter.run(), name="waiter"),
                 asyncio.create_task(ctx.feed.run(), name="feed"),
                 asyncio.create_task(run_reaper(ctx.store, ctx.artifacts, settings.reaper_interval_s, outage),
                                     name="reaper"),
                 asyncio.create_task(run_orphan_sweeper(ctx.artifacts, settings.artifact_sweep_interval_s),
                                     name="orphan sweep"),
                 asyncio.create_task(delivery.run(), name="webhook delivery")]
        try:
            async with mcp.running():
                yield
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await ctx.artifacts.blobs.aclose()
            await redis.aclose()

    routes = [Route(e.path, _Endpoint(e, ctx), methods=[e.method], name=e.handler.__name__)
              for e in ENDPOINTS]
    routes.append(Route(MCP_PATH, mcp, methods=["POST"], name="mcp"))
    # Every exception becomes a response in boundary.py: RequestBoundary answers what a route
    # raises, and routing's own 404 and 405 go through the same response_for.
    throttle = FailureThrottle(
        ctx.store, allowed=settings.auth_failures_max, window_ms=settings.auth_failures_window_ms,
        throttle_ms=settings.auth_throttle_ms, trust_forwarded_for=settings.trust_forwarded_for,
    ) if settings.auth_failures_max else None

    async def routing_error(request: Request, exc: Exception) -> Response:
        # Starlette's exception middleware answers routing's 404 and 405 before the boundary
        # sees them: in the contract's JSON, the same way. A coroutine, or Starlette would run it
        # in its thread pool.
        return response_for(exc, request.scope, outage)

    app = Starlette(
        routes=routes,
        middleware=[Middleware(RequestBoundary, metrics=ctx.metrics, outage=outage, throttle=throttle,
                               body_timeout_s=settings.body_timeout_s)],
        exception_handlers={HTTPException: routing_error},
        lifespan=lifespan,
    )
    app.state.ctx = ctx  # for tests and the demo; routes get ctx explicitly
    # Starlette would answer a path with a trailing slash a 307 to the one without, its Location
    # built from the request's Host header (a client's text: "Host: evil.example" sent readers
    # elsewhere). Every path of the contract is exact: the other is 404 not_found.
    app.router.redirect_slashes = False

    def stopping() -> None:
        """Told to stop: waiting polls answer 204 and feed watchers' streams end, at once."""
        ctx.waiter.close()
        ctx.feed.close()

    app.state.stopping = stopping
    return app
