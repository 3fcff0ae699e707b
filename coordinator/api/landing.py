"""What a browser asks of the coordinator's root: ``/`` leads to the dashboard (``/ui``), and
``/favicon.ico``, which every browser asks for on its own, is answered ``204`` rather than a
``404`` that shows as an error in the console of every dashboard session. Open, like ``/ui``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from coordinator.api.context import Context

DASHBOARD = "/ui"
# A day: the browser asks again at most daily, whatever it does with the empty answer.
_FAVICON_HEADERS = {"Cache-Control": "public, max-age=86400"}


async def root(ctx: Context, request: Request) -> Response:
    return RedirectResponse(DASHBOARD, status_code=302)


async def favicon(ctx: Context, request: Request) -> Response:
    return Response(status_code=204, headers=_FAVICON_HEADERS)
