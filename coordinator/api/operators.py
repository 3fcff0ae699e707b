"""Operator tokens (/api/v1/operator-tokens, admin only) and who is calling (/api/v1/me).

An operator token's secret carries the prefix ``tto_`` (so secret scanners find a leaked one), is
shown once, in the answer that creates it, and is stored only as its SHA-256. Its ``name`` is the
``actor`` of every event it causes and its ``id`` the ``actor_id``, so the bootstrap admin's name,
``admin`` (its actor_id too), is not a token's. Two live tokens may share a name (a rotation mints
the new one under the old one's name): ``actor_id`` tells their events apart.
"""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import shapes, tokens
from coordinator.api.auth import Operator, access_of, token_digest
from coordinator.api.bodies import OperatorTokenCreate
from coordinator.api.context import Context
from coordinator.api.responses import json_response, operator_token_view
from coordinator.api.validation import read
from wire import iso_ms

_SCOPES = wire.values(wire.OperatorScope)


async def create_token(ctx: Context, request: Request) -> Response:
    body = await read(request, OperatorTokenCreate, ctx.settings.max_body_bytes)
    scopes = [s for s in _SCOPES if s in body.scopes]  # in the scopes' own order
    secret = wire.OPERATOR_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = await ctx.store.create_operator_token(
        "ot_" + secrets.token_hex(8), token_digest(secret), body.name, scopes, body.ttl_s * 1000,
        ctx.settings.max_operator_tokens, actor=access_of(request).operator.actor, team=body.team,
    )
    return tokens.created(operator_token_view(token, token.created_at), secret)


async def list_tokens(ctx: Context, request: Request) -> Response:
    return await tokens.listing(request, "operator_tokens", ctx.queries.operator_tokens, operator_token_view)


async def revoke_token(ctx: Context, request: Request) -> Response:
    return await tokens.revoke(ctx, request, ctx.store.revoke_operator_token, operator_token_view)


def me_view(operator: Operator) -> shapes.Me:
    return {
        "name": operator.name,
        "scopes": [s for s in _SCOPES if s in operator.scopes],
        "expires_at": iso_ms(operator.expires_at),
        "token_id": operator.token_id,
        "team": operator.team,
    }


async def me(ctx: Context, request: Request) -> Response:
    return json_response(me_view(access_of(request).operator))
