"""Operations endpoints: liveness, readiness, metrics (the OpenAPI document is in routes.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.context import Context
from coordinator.metrics import Deployment
from coordinator.views import json_response
from coordinator.waiting import waiting_reason


async def healthz(ctx: Context, request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(ctx: Context, request: Request) -> Response:
    try:
        await ctx.store.redis.ping()
        loaded = await ctx.store.scripts_loaded()
        if not loaded:
            # Redis restarted or was flushed: load them again rather than stay unready.
            await ctx.store.load_scripts()
            loaded = await ctx.store.scripts_loaded()
    except Exception:  # noqa: BLE001 - any Redis failure means not ready
        return json_response({"status": "unavailable", "redis": False}, 503)
    if not loaded:
        return json_response({"status": "unavailable", "redis": True, "scripts": False}, 503)
    return json_response({"status": "ok", "redis": True, "scripts": True})


# How many of the oldest queued tasks a scrape computes waiting reasons for (tasks with the same
# target share one computation; see coordinator/waiting.py for its bound).
QUEUED_EXAMINED = 500


async def _deployment(ctx: Context) -> Deployment:
    queued = await ctx.queries.oldest_queued(QUEUED_EXAMINED)
    candidates = await ctx.queries.candidates(queued)
    by_reason: dict[str, int] = dict.fromkeys(wire.values(wire.WaitingReason), 0)
    for counts in candidates.values():
        by_reason[waiting_reason(counts)] += 1
    return Deployment(
        tasks_by_status=await ctx.queries.task_counts(),
        queued_by_reason=by_reason,
        queued_examined=len(queued),
        counters=await ctx.queries.stats(),
    )


async def metrics(ctx: Context, request: Request) -> Response:
    try:
        deployment = await _deployment(ctx)
    except Exception:  # noqa: BLE001 - Redis down: still answer this process's own metrics
        deployment = None
    return Response(ctx.metrics.render(deployment), media_type="text/plain; version=0.0.4; charset=utf-8")
