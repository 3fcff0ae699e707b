"""What the two kinds of token (enrollment tokens in enrollment.py, operator tokens in
operators.py) answer alike: a created token with its secret shown once, a page of tokens, a
revoked token. Each kind passes its own store call and its own view."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.auth import access_of
from coordinator.api.context import Context
from coordinator.api.responses import json_response, offset_page
from coordinator.api.validation import Query, require_id

T = TypeVar("T")
View = Callable[[T, int], Mapping[str, Any]]  # a shape of coordinator/api/shapes/


def created(view: Mapping[str, Any], secret: str) -> Response:
    """201 with the new token, its secret included: the one answer that ever shows it."""
    return json_response({**view, "token": secret}, 201)


async def listing(request: Request, field: str, fetch: Callable[[int, int], Awaitable[tuple[list[T], int, bool]]],
                  view: View[T]) -> Response:
    """A page of tokens, paged by position, each shown as at the Redis clock `fetch` read."""
    limit, offset = Query(request).offset_page()
    tokens, now_ms, more = await fetch(limit, offset)
    return offset_page(field, [view(t, now_ms) for t in tokens], offset, limit, more)


async def revoke(ctx: Context, request: Request, revoke_token: Callable[..., Awaitable[T]], view: View[T]) -> Response:
    """Revoke the token the path names, the calling operator its actor; the token as it is now."""
    token_id = require_id(request.path_params["token_id"], "token_id")
    token = await revoke_token(token_id, actor=access_of(request).operator.actor)
    return json_response(view(token, await ctx.queries.redis_time_ms()))
