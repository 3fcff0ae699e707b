"""Live sessions, the operator's side (PROTOCOL.md, "Live sessions"): send a command, read one,
end the session, read its recording. Plain async functions taking ``(ctx, operator, task_id,
...)`` and returning the answer, raising coordinator/errors.py exceptions; the Starlette routes
below them (and MCP's tools) only translate.

A request that waits for an answer waits on its session's answers topic through the process's
inbox (coordinator/longpoll.py, ``wait_on``): the host's answer, or the session's end, wakes it
on whichever process it waits, at once.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

import wire
from coordinator.api import limits, shapes
from coordinator.api.auth import Operator, access_of
from coordinator.api.bodies import CommandCreate
from coordinator.api.context import Context
from coordinator.api.responses import json_response, task_view
from coordinator.api.validation import Query, canonical_json, load_object, read_body, require_id, validate
from coordinator.errors import Conflict, InsufficientScope, InvalidRequest, found
from coordinator.longpoll import CONNECTION, wait_on
from coordinator.state.keys import answers_topic
from wire import ErrorCode, iso_ms

_ADMIN = wire.OperatorScope.ADMIN.value


def _owner(operator: Operator) -> str | None:
    """The token a session must have been created by for ``operator`` to drive it: None for an
    admin (any session)."""
    if operator.may(_ADMIN):
        return None
    if operator.token_id is None:  # only the bootstrap admin has none, and it may do anything
        raise InsufficientScope(_ADMIN)
    return operator.token_id


def _wait(wait_s: float) -> float:
    if not (isinstance(wait_s, int | float) and 0 <= wait_s <= wire.SESSION_COMMAND_WAIT_MAX_S) or math.isnan(wait_s):
        raise InvalidRequest(f"wait_s must be between 0 and {wire.SESSION_COMMAND_WAIT_MAX_S} seconds")
    return float(wait_s)


def _session_ended() -> Conflict:
    return Conflict("the session has ended", code=ErrorCode.SESSION_ENDED.value)


def command_view(task_id: str, command: dict[str, Any]) -> shapes.Command:
    """A command as the recording and the answers show it: who sent what when, and its answer
    (with the screen's operator URL) once the host gave one."""
    view: shapes.Command = {
        "command_id": command["command_id"],
        "status": command.get("status", "pending"),
        "action": orjson.loads(command["action"]),
        "actor": command.get("actor"),
        "sent_at": iso_ms(command.get("sent_at")),
        "answered_at": iso_ms(command.get("answered_at")),
    }
    answer = orjson.loads(command["answer"]) if command.get("answer") else None
    if answer is None:
        return view
    view["error"] = answer.get("error")
    view["duration_ms"] = answer.get("duration_ms")
    view["round_trip_ms"] = command["answered_at"] - command["sent_at"]
    observation = answer.get("observation")
    if observation is not None:
        screen = observation.get("screen")
        seen: shapes.CommandObservation = {
            "screen": screen,
            "screen_url": (f"/api/v1/tasks/{quote(task_id, safe='')}/artifacts/{quote(screen, safe='')}"
                           if screen else None),
            "width": observation.get("width"),
            "height": observation.get("height"),
            "elements": observation.get("elements") or [],
        }
        if observation.get("elements_truncated"):
            seen["elements_truncated"] = True
        view["observation"] = seen
    else:
        view["observation"] = None
    return view


async def _await_answer(ctx: Context, task_id: str, command_id: str, wait_s: float, request: Request | None,
                        send: Callable[[int], Awaitable[object]] | None = None) -> tuple[int, shapes.Command]:
    """The command once answered (200), or pending after ``wait_s`` (202); ``409 session_ended``
    as soon as its session ends unanswered. ``send``: the command is queued first, by the call
    ``send(wait_ms)`` that also registers the wait (so the first look at it is the wake-up)."""
    last: list[tuple[dict[str, Any], bool]] = []
    unsent = [send] if send is not None else []

    async def attempt(wait_ms: int) -> dict[str, Any] | None:
        if unsent:
            await unsent.pop()(wait_ms)
            return None
        command, _, ended = await ctx.store.await_command(task_id, command_id, ctx.waiter.process_id, wait_ms)
        last[:] = [(command, ended)]
        return command if "answered_at" in command or ended else None

    connection = request.scope.get("extensions", {}).get(CONNECTION) if request is not None else None
    command = await wait_on(ctx.waiter, answers_topic(task_id), attempt, wait_s, connection,
                            request.receive if request is not None else None)
    if command is None and not last:  # sent and no news since, or the client hung up first
        if unsent:  # the client hung up before its command was queued: nothing was
            raise ClientDisconnect
        return 202, {"command_id": command_id, "status": "pending"}
    command, ended = (command, last[-1][1]) if command is not None else last[-1]
    if "answered_at" in command:
        return 200, command_view(task_id, command)
    if ended:
        raise _session_ended()
    return 202, {"command_id": command_id, "status": "pending"}


async def send_command(ctx: Context, operator: Operator, task_id: str, action: dict[str, Any],
                       wait_s: float, request: Request | None = None) -> tuple[int, shapes.Command]:
    """Queue ``action`` for the session ``task_id`` and wait up to ``wait_s`` for its answer:
    ``(200, answer)`` once the host answered, else ``(202, {"command_id", "status": "pending"})``.
    ``request``: the HTTP request it serves, whose hang-up ends the wait (None: no client to watch)."""
    task_id = require_id(task_id, "task_id")
    wait_s = _wait(wait_s)
    body = validate(CommandCreate, {"action": action})
    kind = body.action.action
    action_json = canonical_json(body.action.model_dump(exclude_none=True))
    command_id = "c_" + secrets.token_hex(12)

    async def send(wait_ms: int) -> object:
        # The wait is registered in the step that queues the command: an answer always wakes it.
        return await ctx.store.send_command(task_id, command_id, action_json, kind, actor=operator.actor,
                                            owner=_owner(operator), process_id=ctx.waiter.process_id,
                                            wait_ms=wait_ms)

    return await _await_answer(ctx, task_id, command_id, wait_s, request, send)


async def get_command(ctx: Context, operator: Operator, task_id: str, command_id: str,
                      wait_s: float, request: Request | None = None) -> tuple[int, shapes.Command]:
    """One command of the session and its answer, waiting up to ``wait_s`` for it like
    ``send_command``. Any operator who may read calls it (a watcher)."""
    task_id, command_id = require_id(task_id, "task_id"), require_id(command_id, "command_id")
    return await _await_answer(ctx, task_id, command_id, _wait(wait_s), request)


async def end_session(ctx: Context, operator: Operator, task_id: str) -> shapes.Task:
    """End the session (idempotent): the host is told (``end_requested``); the task's view."""
    task = await ctx.store.end_session(require_id(task_id, "task_id"), actor=operator.actor, owner=_owner(operator))
    [view] = await ctx.names.add([task_view(task)])
    return view


async def session_log(ctx: Context, operator: Operator, task_id: str, limit: int,
                      cursor: int | None) -> shapes.Commands:
    """The session's recording, oldest first: ``{"commands": [...], "next_cursor"}`` (a cursor is
    the last command's seq of the page before)."""
    task_id = require_id(task_id, "task_id")
    task = found(await ctx.queries.get_task(task_id), "task")
    if task.kind != wire.TaskKind.SESSION:
        raise Conflict("this task is not a session: it takes no commands", code=ErrorCode.NOT_A_SESSION.value)
    commands = await ctx.queries.session_commands(task_id, cursor or 0, limit + 1)
    page = commands[:limit]
    return {"commands": [command_view(task_id, c) for c in page],
            "next_cursor": page[-1]["seq"] if len(commands) > limit else None}


# -- the routes: HTTP in, the functions above, HTTP out ---------------------------------------


def _wait_query(request: Request) -> float:
    raw = request.query_params.get("wait_s")
    if raw is None:
        return float(wire.SESSION_COMMAND_WAIT_MAX_S // 2)
    try:
        return float(raw)
    except ValueError:
        raise InvalidRequest("wait_s must be a number of seconds") from None


async def post_command(ctx: Context, request: Request) -> Response:
    operator = access_of(request).operator
    task_id = require_id(request.path_params["task_id"], "task_id")
    wait_s = _wait(_wait_query(request))
    body = load_object(await read_body(request, ctx.settings.max_body_bytes))
    validate(CommandCreate, body)  # an unknown field, or none, named before anything is queued
    status, answer = await send_command(ctx, operator, task_id, body["action"], wait_s, request)
    return json_response(answer, status)


async def read_command(ctx: Context, request: Request) -> Response:
    status, answer = await get_command(ctx, access_of(request).operator, request.path_params["task_id"],
                                       request.path_params["command_id"], _wait(_wait_query(request)), request)
    return json_response(answer, status)


async def post_end(ctx: Context, request: Request) -> Response:
    # No body: app.py refused anything but nothing or {} before this runs.
    return json_response(await end_session(ctx, access_of(request).operator, request.path_params["task_id"]))


async def list_commands(ctx: Context, request: Request) -> Response:
    query = Query(request)
    limit = query.limit(*limits.COMMANDS_LIMIT)
    cursor = query.integer("cursor", default=0, low=0, high=limits.COMMAND_CURSOR_MAX)
    return json_response(await session_log(ctx, access_of(request).operator, request.path_params["task_id"],
                                           limit, cursor or None))
