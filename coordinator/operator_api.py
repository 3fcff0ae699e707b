"""The operator API (/api/v1): tasks, the device pool and hosts. Bearer = the admin token."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.context import Context
from coordinator.errors import InvalidRequest, NotFound
from coordinator.records import HostRecord, HostState
from coordinator.validation import Body, canonical_json, read_json, require_id
from coordinator.views import device_view, host_view, json_response, task_view

_TASK_STATUSES = wire.values(wire.TaskStatus)


def parse_task(body: Body) -> dict[str, Any]:
    """The task record to create, from a validated request (ids and status are added later)."""
    kind = body.get("kind")
    task: dict[str, Any] = {"kind": kind}
    if kind == "goal":
        task["goal"] = body.text("goal", max_len=wire.MAX_GOAL_CHARS, required=True)
        task["max_steps"] = body.integer("max_steps", default=30, low=1, high=10_000)
    elif kind == "workflow":
        workflow = body.object("workflow", required=True)
        task["workflow"] = canonical_json({"name": workflow.id("name"), "params": workflow.object("params")})
        task["max_steps"] = body.integer("max_steps", low=1, high=10_000)
    else:
        raise InvalidRequest("kind must be goal or workflow")

    has_device, has_selector = body.get("device_id") is not None, body.get("selector") is not None
    if has_device == has_selector:
        raise InvalidRequest("give exactly one target: device_id or selector")
    if has_device:
        task["target_device"] = body.id("device_id")
    else:
        selector = body.object("selector", required=True)
        task["driver"] = selector.id("driver")
        task["labels"] = canonical_json(selector.labels("labels"))
    task["max_attempts"] = body.integer("max_attempts", default=3, low=1, high=100)
    if body.get("idempotency_key") is not None:
        task["idempotency_key"] = body.id("idempotency_key")
    # What makes two requests "the same" for the idempotency key.
    task["request_hash"] = hashlib.sha256(canonical_json(task).encode()).hexdigest()
    return {k: v for k, v in task.items() if v is not None}


async def create_task(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    task = parse_task(await read_json(request, ctx.settings.max_body_bytes))
    task["id"] = "t_" + secrets.token_hex(12)
    stored, created = await ctx.store.create_task(task)
    return json_response(task_view(stored), 201 if created else 200)


async def get_task(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    task_id = require_id(request.path_params["task_id"], "task_id")
    task = await ctx.store.get_task(task_id)
    if task is None:
        raise NotFound("no such task")
    return json_response(task_view(task))


async def list_tasks(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    params = request.query_params
    status = params.get("status")
    if status is not None and status not in _TASK_STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(_TASK_STATUSES)}")
    try:
        limit = int(params.get("limit", "50"))
        cursor = int(params["cursor"]) if "cursor" in params else None
    except ValueError:
        raise InvalidRequest("limit and cursor must be integers") from None
    if not 1 <= limit <= 500 or (cursor is not None and cursor < 0):
        raise InvalidRequest("limit must be in [1, 500] and cursor a value from next_cursor")
    tasks = await ctx.store.list_tasks(status, limit, cursor)
    next_cursor = str(tasks[-1].seq) if len(tasks) == limit else None
    return json_response({"tasks": [task_view(t) for t in tasks], "next_cursor": next_cursor})


async def cancel_task(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    task_id = require_id(request.path_params["task_id"], "task_id")
    return json_response(task_view(await ctx.store.cancel_task(task_id)))


def _online(last_seen: dict[str, int], now_ms: int, ctx: Context) -> set[str]:
    threshold = now_ms - ctx.settings.host_offline_after_ms
    return {host for host, seen in last_seen.items() if seen > threshold}


async def list_devices(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    pool = await ctx.store.pool()
    live = _online(pool.last_seen, pool.now_ms, ctx)
    return json_response({
        "devices": [
            device_view(device, device.host_id in live, pool.reservations.get(device_id))
            for device_id, device in sorted(pool.devices.items())
        ]
    })


def _host_view(host: HostRecord, state: HostState, ctx: Context) -> dict[str, Any]:
    static_digest = ctx.auth.static_digest(host.host_id)
    # Revocation is bound to the credential: a static host is revoked while its configured token
    # is, an enrolled one for good.
    if static_digest is not None:
        revoked = static_digest in state.revoked_tokens
    else:
        revoked = host.revoked
    online = (
        host.online_seen is not None
        and host.online_seen > state.now_ms - ctx.settings.host_offline_after_ms
        and not revoked
    )
    kind = host.kind or ("static" if static_digest is not None else "enrolled")
    return host_view(host, kind=kind, online=online, revoked=revoked)


async def list_hosts(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    state = await ctx.store.hosts()
    hosts = dict(state.hosts)
    for host_id in ctx.auth.static_host_ids - set(hosts):  # configured, never seen
        hosts[host_id] = HostRecord(host_id)
    return json_response({"hosts": [_host_view(hosts[h], state, ctx) for h in sorted(hosts)]})


async def host_view_for(ctx: Context, host_id: str) -> dict[str, Any]:
    state = await ctx.store.hosts(host_id)
    host = state.hosts.get(host_id)
    if host is None:
        if host_id not in ctx.auth.static_host_ids:
            raise NotFound("no such host")
        host = HostRecord(host_id)
    return _host_view(host, state, ctx)


async def revoke_host(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    host_id = require_id(request.path_params["host_id"], "host_id")
    await ctx.store.revoke_host(host_id, ctx.auth.static_digest(host_id))
    ctx.auth.forget(host_id)
    return json_response(await host_view_for(ctx, host_id))


async def get_host(ctx: Context, request: Request) -> Response:
    ctx.auth.require_admin(request)
    host_id = require_id(request.path_params["host_id"], "host_id")
    return json_response(await host_view_for(ctx, host_id))
