"""GET /ui: the live dashboard, as static files shipped in the ``coordinator.ui`` package.

Only the files named in ``ASSETS`` are served (each has its own route, so no path from a client
ever reaches the file system). The page reads the operator API with the admin token the person
types in; these routes themselves are open, like ``/healthz``: they hold nothing but code.

Every answer forbids loading anything from another origin (``Content-Security-Policy``), content
sniffing and framing, and is revalidated on each load (``Cache-Control: no-cache`` with an
``ETag``), so an upgraded coordinator never runs with yesterday's scripts.

``/ui/wire.js`` is no file: it is written from the ``wire`` package (its enums and constants), so
the dashboard's modules import the contract's vocabulary instead of restating it, and a status
added in Python reaches the page.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from functools import cache
from importlib import resources
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import Response

import wire
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
WIRE_JS = "wire.js"
ASSETS[WIRE_JS] = _TYPES[".js"]
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


def _wire_value(value: object) -> object | None:
    """What JSON states of a wire constant, or None for what is no vocabulary (functions, modules)."""
    if isinstance(value, type) and issubclass(value, Enum) and value.__module__ == wire.__name__:
        return {member.name: member.value for member in value}
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, tuple | frozenset) and all(isinstance(v, int | str) for v in value):
        return sorted(value) if isinstance(value, frozenset) else list(value)
    return None


def wire_js() -> bytes:
    """The ``wire`` package as a JavaScript module: each enum an object of its members (``TaskStatus
    .QUEUED``), each constant as it is (a frozenset as a sorted array)."""
    lines = ["// Generated from Python's wire package by the coordinator (coordinator/api/ui.py): do not restate."]
    for name, value in vars(wire).items():
        stated = _wire_value(value)
        if stated is not None and not name.startswith("_") and (name.isupper() or isinstance(value, type)):
            text = json.dumps(stated)
            frozen = f"Object.freeze({text})" if isinstance(stated, dict | list) else text
            lines.append(f"export const {name} = {frozen};")
    return ("\n".join(lines) + "\n").encode()


@cache
def _file(name: str) -> _File:
    body = wire_js() if name == WIRE_JS else (resources.files("coordinator.ui") / name).read_bytes()
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
