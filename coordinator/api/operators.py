"""Operator tokens (/api/v1/operator-tokens, admin only) and who is calling (/api/v1/me).

An operator token's secret carries the prefix ``tto_`` (so secret scanners find a leaked one), is
shown once, in the answer that creates it, and is stored only as its SHA-256. Its ``name`` is the
``actor`` of every event it causes, so the bootstrap admin's name, ``admin``, is not a token's.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import limits, tokens
from coordinator.api.auth import Operator, access_of, token_digest
from coordinator.api.context import Context
from coordinator.api.responses import json_response, operator_token_view
from coordinator.api.validation import Body, read_json
from coordinator.errors import InvalidRequest
from wire import iso_ms

_SCOPES = wire.values(wire.OperatorScope)


def _parse(body: Body) -> tuple[str, list[str], int]:
    name = body.id("name")
    if name == wire.BOOTSTRAP_ACTOR:
        raise InvalidRequest(f"name {wire.BOOTSTRAP_ACTOR!r} is the bootstrap admin's; choose another")
    scopes = body.get("scopes")
    if (not isinstance(scopes, list) or not scopes or len(scopes) > len(_SCOPES)
            or any(s not in _SCOPES for s in scopes) or len(set(scopes)) != len(scopes)):
        raise InvalidRequest(f"scopes must be a non-empty list of distinct scopes from {', '.join(_SCOPES)}")
    ttl_s = body.integer("ttl_s", default=wire.OPERATOR_TOKEN_TTL_DEFAULT_S, low=wire.OPERATOR_TOKEN_TTL_MIN_S,
                         high=wire.OPERATOR_TOKEN_TTL_MAX_S)
    assert ttl_s is not None
    return name, [s for s in _SCOPES if s in scopes], ttl_s


async def create_token(ctx: Context, request: Request) -> Response:
    name, scopes, ttl_s = _parse(await read_json(request, ctx.settings.max_body_bytes,
                                                 fields=limits.OPERATOR_TOKEN_FIELDS))
    secret = wire.OPERATOR_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = await ctx.store.create_operator_token(
        "ot_" + secrets.token_hex(8), token_digest(secret), name, scopes, ttl_s * 1000,
        ctx.settings.max_operator_tokens, actor=access_of(request).operator.name,
    )
    return tokens.created(operator_token_view(token, token.created_at), secret)


async def list_tokens(ctx: Context, request: Request) -> Response:
    return await tokens.listing(request, "operator_tokens", ctx.queries.operator_tokens, operator_token_view)


async def revoke_token(ctx: Context, request: Request) -> Response:
    return await tokens.revoke(ctx, request, ctx.store.revoke_operator_token, operator_token_view)


def me_view(operator: Operator) -> dict[str, Any]:
    return {
        "name": operator.name,
        "scopes": [s for s in _SCOPES if s in operator.scopes],
        "expires_at": iso_ms(operator.expires_at),
        "token_id": operator.token_id,
    }


async def me(ctx: Context, request: Request) -> Response:
    return json_response(me_view(access_of(request).operator))
