"""The operator API for tasks (/api/v1/tasks): create, read, list, history, cancel.
Bearer = an operator credential; its scope was checked before any handler here runs (app.py)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import limits, shapes
from coordinator.api.auth import Operator, access_of
from coordinator.api.bodies import DEFAULT_GOAL_MAX_STEPS, TaskCreate
from coordinator.api.context import Context
from coordinator.api.responses import event_view, json_response, task_view
from coordinator.api.validation import Query, canonical_json, parse, read_body, require_id, validate
from coordinator.errors import InsufficientScope, found
from coordinator.state.records import TaskRecord

_TASK_STATUSES = wire.values(wire.TaskStatus)


def parse_task(body: TaskCreate, default_queue_timeout_ms: int) -> dict[str, Any]:
    """The task record to create, from a valid request (ids and status are added later)."""
    task: dict[str, Any] = {"kind": body.kind.value}
    if body.kind is wire.TaskKind.SESSION:  # no work: commands; one attempt (the device's state is the session)
        idle_s, duration_s = wire.SESSION_IDLE_TIMEOUT_S[2], wire.SESSION_MAX_DURATION_S[2]
        task["idle_timeout_ms"] = (body.idle_timeout_s if body.idle_timeout_s is not None else idle_s) * 1000
        task["max_duration_ms"] = (body.max_duration_s if body.max_duration_s is not None else duration_s) * 1000
    elif body.workflow is None:  # a goal task (bodies.TaskCreate: a workflow task has its workflow)
        task["goal"] = body.goal
        task["max_steps"] = body.max_steps if body.max_steps is not None else DEFAULT_GOAL_MAX_STEPS
    else:
        task["workflow"] = canonical_json({"name": body.workflow.name, "params": body.workflow.params})
        task["max_steps"] = body.max_steps
    if body.selector is None:
        task["target_device"] = body.device_id
    else:
        task["driver"] = body.selector.driver
        task["labels"] = canonical_json(body.selector.labels)
    task["max_attempts"] = 1 if body.kind is wire.TaskKind.SESSION else body.max_attempts
    task["priority"] = body.priority
    task["team"] = body.team
    task["queue_timeout_ms"] = (body.queue_timeout_s * 1000 if body.queue_timeout_s is not None
                                else default_queue_timeout_ms)
    if body.idempotency_key is not None:
        task["idempotency_key"] = body.idempotency_key
        # What makes two requests "the same" for the key; stored only where a key can match.
        task["request_hash"] = hashlib.sha256(canonical_json(task).encode()).hexdigest()
    return {k: v for k, v in task.items() if v is not None}


async def _views(ctx: Context, tasks: list[TaskRecord]) -> list[shapes.Task]:
    """Task views, with the waiting reason and candidates of the queued ones, and the names of
    their host and device."""
    candidates = await ctx.queries.candidates(tasks)
    return await ctx.names.add([task_view(t, candidates.get(t.id)) for t in tasks])


def team_for(operator: Operator, named: str | None) -> str:
    """The team a create by ``operator`` puts its task in: the token's own (naming another is
    refused), else the one named, else the default."""
    if operator.team is not None:
        if named is not None and named != operator.team:
            raise InsufficientScope("admin", f"this token creates tasks of team {operator.team!r} only")
        return operator.team
    return named or wire.DEFAULT_TEAM


async def submit_task(ctx: Context, operator: Operator, body: bytes | dict[str, Any]) -> tuple[int, shapes.Task]:
    """Create a task for ``operator`` from a request body (raw bytes, or a JSON object already
    read): the status (201 created, 200 an earlier task of the same idempotency key) and the
    task's view. The route below and MCP's ``submit_task`` both call this."""
    model = (parse(TaskCreate, body, optional=TaskCreate.body_optional) if isinstance(body, bytes)
             else validate(TaskCreate, body))
    task = parse_task(model, ctx.settings.queue_timeout_ms)
    task["id"] = "t_" + secrets.token_hex(12)
    # Who created it: named in its view, and what a submit-only token's cancel is checked against.
    # Added after parsing, so the idempotency key's request hash does not depend on the caller.
    task["team"] = team_for(operator, task.get("team"))
    task["created_by"] = operator.name
    if operator.token_id is not None:
        task["creator_token"] = operator.token_id
    answer = await ctx.store.create_task(task, actor=operator.actor)
    if answer.candidates is not None or answer.task.status != wire.TaskStatus.QUEUED:
        # Queued now, the create step read why it waits; not queued, nothing waits.
        [view] = await ctx.names.add([task_view(answer.task, answer.candidates)])
    else:  # an earlier task with the same idempotency key, still queued
        view = (await _views(ctx, [answer.task]))[0]
    return (201 if answer.created else 200), view


async def create_task(ctx: Context, request: Request) -> Response:
    raw = await read_body(request, ctx.settings.max_body_bytes)
    status, view = await submit_task(ctx, access_of(request).operator, raw)
    return json_response(view, status)


async def task_of(ctx: Context, task_id: str) -> shapes.Task:
    """The task's view, as ``GET /api/v1/tasks/{task_id}`` answers it (MCP's ``get_task`` too)."""
    task = found(await ctx.queries.get_task(task_id), "task")
    return (await _views(ctx, [task]))[0]


async def get_task(ctx: Context, request: Request) -> Response:
    return json_response(await task_of(ctx, require_id(request.path_params["task_id"], "task_id")))


async def list_tasks(ctx: Context, request: Request) -> Response:
    query = Query(request)
    status = query.choice("status", _TASK_STATUSES)
    host_id, device_id, team = query.id("host_id"), query.id("device_id"), query.id("team")
    run_id = query.id("run_id")
    limit = query.limit(*limits.TASKS_LIMIT)
    cursor = query.integer("cursor", default=-1, low=0, high=limits.TASK_CURSOR_MAX)
    page = await ctx.queries.list_tasks(status=status, host_id=host_id, device_id=device_id, limit=limit,
                                        cursor=None if cursor < 0 else cursor, team=team, run_id=run_id)
    return json_response(shapes.TaskPage(tasks=await _views(ctx, page.items), next_cursor=page.next_cursor))


async def task_events(ctx: Context, request: Request) -> Response:
    task_id = require_id(request.path_params["task_id"], "task_id")
    events = found(await ctx.queries.task_events(task_id), "task")
    return json_response(shapes.Events(events=await ctx.names.add([event_view(e) for e in events])))


async def cancel_task(ctx: Context, request: Request) -> Response:
    access = access_of(request)
    task_id = require_id(request.path_params["task_id"], "task_id")
    # access.owner: a submit-only token, which the script lets cancel only the tasks it created.
    task = await ctx.store.cancel_task(task_id, actor=access.operator.actor, owner=access.owner)
    [view] = await ctx.names.add([task_view(task)])
    return json_response(view)
