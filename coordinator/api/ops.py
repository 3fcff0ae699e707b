"""Operations endpoints: liveness, readiness, metrics (the OpenAPI document is in routes.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api import shapes
from coordinator.api.context import Context
from coordinator.api.responses import json_response
from coordinator.metrics import read_deployment


async def healthz(ctx: Context, request: Request) -> Response:
    return json_response(shapes.Health(status="ok"))


async def readyz(ctx: Context, request: Request) -> Response:
    try:
        await ctx.store.redis.ping()
        loaded = await ctx.store.scripts_loaded()
        if not loaded:
            # Redis restarted or was flushed: load them again rather than stay unready.
            await ctx.store.load_scripts()
            loaded = await ctx.store.scripts_loaded()
    except Exception:  # noqa: BLE001 - any Redis failure means not ready
        return json_response(shapes.Ready(status="unavailable", redis=False), 503)
    if not loaded:
        return json_response(shapes.Ready(status="unavailable", redis=True, scripts=False), 503)
    return json_response(shapes.Ready(status="ok", redis=True, scripts=True))


async def metrics(ctx: Context, request: Request) -> Response:
    try:
        deployment = await read_deployment(ctx.queries, ctx.webhooks)
    except Exception:  # noqa: BLE001 - Redis down: still answer this process's own metrics
        deployment = None
    return Response(ctx.metrics.render(deployment), media_type="text/plain; version=0.0.4; charset=utf-8")
