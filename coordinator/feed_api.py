"""GET /api/v1/events: the live feed as server-sent events. Bearer = the admin token.

(Stub: being written.)
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from coordinator.context import Context


async def events(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    return Response(status_code=204)
