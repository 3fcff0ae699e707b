"""GET /ui: the live dashboard, as static files shipped in the ``coordinator.ui`` package.

Only the files named in ``ASSETS`` are served (each has its own route, so no path from a client
ever reaches the file system). The page reads the operator API with the admin token the person
types in; these routes themselves are open, like ``/healthz``: they hold nothing but code.

Every answer forbids loading anything from another origin (``Content-Security-Policy``), content
sniffing and framing, and is revalidated on each load (``Cache-Control: no-cache`` with an
``ETag``), so an upgraded coordinator never runs with yesterday's scripts.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.context import Context
from coordinator.errors import NotFound

PAGE = "index.html"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
# Every file under /ui/ and its media type: the package's scripts and style sheets, found once at
# import (a new view is one module dropped in; each name gets its own route, so no path from a
# client ever reaches the file system). A module script needs a JavaScript type (nosniff).
ASSETS: dict[str, str] = {
    entry.name: _TYPES[suffix]
    for entry in sorted(resources.files("coordinator.ui").iterdir(), key=lambda e: e.name)
    if (suffix := "." + entry.name.rpartition(".")[2]) in _TYPES
}
PREFIX = "/ui/"

HEADERS = {
    # blob: for images and video only: the artifacts' bytes, fetched with the token and shown
    # through object URLs (an <img src> to the API could not carry the token).
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob:; media-src 'self' blob:; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
}


class _File(NamedTuple):
    body: bytes
    media_type: str
    etag: str


@cache
def _file(name: str) -> _File:
    body = (resources.files("coordinator.ui") / name).read_bytes()
    media_type = ASSETS.get(name, "text/html; charset=utf-8")
    return _File(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def _serve(request: Request, name: str) -> Response:
    file = _file(name)
    headers = {**HEADERS, "ETag": file.etag}
    if file.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(file.body, media_type=file.media_type, headers=headers)


async def page(ctx: Context, request: Request) -> Response:
    return _serve(request, PAGE)


async def asset(ctx: Context, request: Request) -> Response:
    name = request.url.path.removeprefix(PREFIX)
    if name not in ASSETS:  # the route table registers exactly ASSETS; this is a second lock
        raise NotFound("no such file")
    return _serve(request, name)
