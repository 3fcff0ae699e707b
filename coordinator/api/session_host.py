"""A live session's host poll (PROTOCOL.md, "Live sessions"):
``POST /internal/v1/hosts/{host_id}/leases/{lease_id}/commands?wait_s=25``. It delivers the answers
of the commands the host ran, renews the lease (with a renewal's 409s) and long-polls for the
next command, woken through the process's inbox (coordinator/longpoll.py, ``wait_on``)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import shapes
from coordinator.api.bodies import CommandAnswer, CommandsPoll
from coordinator.api.context import Context
from coordinator.api.host import wait_seconds
from coordinator.api.responses import json_response
from coordinator.api.validation import canonical_json, read, require_id
from coordinator.longpoll import CONNECTION, wait_on
from coordinator.state.keys import commands_topic
from coordinator.state.session_scripts import CommandsPolled
from wire import iso_ms


def _bounded(body: dict[str, Any]) -> str:
    """The answer's JSON, at most ``wire.SESSION_ANSWER_MAX_BYTES``: past it, the observation keeps
    the elements that fit, in order, and says so (``elements_truncated``), so the recording stays
    bounded whatever a host sends."""
    text = canonical_json(body)
    observation = body.get("observation")
    if len(text.encode()) <= wire.SESSION_ANSWER_MAX_BYTES or not observation:
        return text
    elements, kept = observation.get("elements", []), []
    size = len(canonical_json({**body, "observation": {**observation, "elements": [],
                                                       "elements_truncated": True}}).encode())
    for element in elements:
        size += len(canonical_json(element).encode()) + 1
        if size > wire.SESSION_ANSWER_MAX_BYTES:
            break
        kept.append(element)
    return canonical_json({**body, "observation": {**observation, "elements": kept, "elements_truncated": True}})


def _answer(answer: CommandAnswer) -> dict[str, Any]:
    """What the script records of one answer: its id and status, its screen's name (for the
    event), and the answer itself as JSON text (stored as sent, bounded, never re-encoded by Lua)."""
    entry: dict[str, Any] = {"command_id": answer.command_id, "status": answer.status,
                             "answer": _bounded(answer.model_dump(exclude_none=True))}
    if answer.observation is not None and answer.observation.screen is not None:
        entry["screen"] = answer.observation.screen
    return entry


async def _parse(ctx: Context, request: Request) -> tuple[str, float, CommandsPoll]:
    lease_id = require_id(request.path_params["lease_id"], "lease_id")
    wait_s = wait_seconds(request, ctx)
    return lease_id, wait_s, await read(request, CommandsPoll, ctx.settings.max_renew_body_bytes)


async def poll_commands(ctx: Context, request: Request) -> Response:
    principal = await ctx.auth.host_for_path(request, request.path_params["host_id"])
    lease_id, wait_s, body = await ctx.auth.parse_for(principal, _parse(ctx, request))
    ttl_ms = ctx.settings.lease_ttl_ms
    answers = orjson.dumps([_answer(a) for a in body.answers]).decode()
    latest: list[CommandsPolled] = []

    async def attempt(wait_ms: int) -> CommandsPolled | None:
        # The answers go with the first attempt only: a later one finds them recorded anyway.
        polled = await ctx.auth.run_for(principal, ctx.store.poll_commands(
            principal, lease_id, body.task_id, body.attempt, ttl_ms, answers if not latest else "[]",
            ctx.waiter.process_id, wait_ms))
        latest[:] = [polled]
        return polled if polled.commands or polled.cancel_requested or polled.end_requested else None

    polled = await wait_on(ctx.waiter, commands_topic(body.task_id), attempt, wait_s,
                           request.scope.get("extensions", {}).get(CONNECTION), request.receive)
    if polled is None:
        if not latest:  # the client hung up (or the process stops) before the first attempt
            return Response(status_code=204)
        polled = latest[-1]
    answer: shapes.CommandsPolled = {
        "commands": [{"command_id": c["command_id"], "action": orjson.loads(c["action"])} for c in polled.commands],
        "lease_ttl_ms": ttl_ms,
        "lease_expires_at": iso_ms(polled.lease_expires_at_ms),
        "cancel_requested": polled.cancel_requested,
        "end_requested": polled.end_requested,
        "end_reason": polled.end_reason,
    }
    return json_response(answer)
