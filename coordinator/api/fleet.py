"""The operator API for the fleet: devices (/api/v1/devices), hosts (/api/v1/hosts), and what
they can run (/api/v1/workflows).
Bearer = an operator credential; its scope was checked before any handler here runs (app.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import limits, shapes
from coordinator.api.auth import access_of
from coordinator.api.bodies import DeviceDisable
from coordinator.api.context import Context
from coordinator.api.responses import device_view, host_view, json_response, run_view
from coordinator.api.validation import Query, read, require_id
from coordinator.errors import NotFound
from coordinator.state.reads.fleet import HostEntry

_DEVICE_STATUSES = wire.values(wire.DeviceStatus)


# -- devices -------------------------------------------------------------------------------


async def device_page(ctx: Context, *, host_id: str | None, driver: str | None, status: str | None,
                      limit: int, cursor: str | None) -> shapes.Devices:
    """A page of the pool as ``GET /api/v1/devices`` answers it (/mcp's ``list_devices`` too)."""
    page = await ctx.queries.list_devices(host_id=host_id, driver=driver, status=status, limit=limit, cursor=cursor)
    views = await ctx.names.add([device_view(d) for d in page.items])
    return shapes.Devices(devices=views, next_cursor=page.next_cursor)


async def list_devices(ctx: Context, request: Request) -> Response:
    query = Query(request)
    return json_response(await device_page(
        ctx,
        host_id=query.id("host_id"),
        driver=query.id("driver"),
        status=query.choice("status", _DEVICE_STATUSES),
        limit=query.limit(*limits.DEVICES_LIMIT),
        cursor=query.text("cursor", max_len=limits.CURSOR_MAX_CHARS),
    ))


async def _device(ctx: Context, device_id: str) -> shapes.Device:
    found = await ctx.queries.devices([device_id])
    if not found:
        raise NotFound("no such device in the pool")
    [view] = await ctx.names.add([device_view(found[0])])
    return view


async def get_device(ctx: Context, request: Request) -> Response:
    return json_response(await _device(ctx, require_id(request.path_params["device_id"], "device_id")))


async def device_history(ctx: Context, request: Request) -> Response:
    device_id = require_id(request.path_params["device_id"], "device_id")
    limit = Query(request).limit(default=100, high=wire.DEVICE_RUNS_KEPT)
    runs = await ctx.queries.device_runs(device_id, limit)
    if not runs and not await ctx.queries.device_known(device_id):
        raise NotFound("no such device")
    views = await ctx.names.add([run_view(r) for r in runs])
    return json_response(shapes.DeviceHistory(device_id=device_id, runs=views))


async def disable_device(ctx: Context, request: Request) -> Response:
    device_id = require_id(request.path_params["device_id"], "device_id")
    reason = (await read(request, DeviceDisable, ctx.settings.max_body_bytes)).reason or ""
    await ctx.store.set_device_disabled(device_id, True, reason, actor=access_of(request).operator.actor)
    return json_response(await _device(ctx, device_id))


async def enable_device(ctx: Context, request: Request) -> Response:
    device_id = require_id(request.path_params["device_id"], "device_id")
    await ctx.store.set_device_disabled(device_id, False, actor=access_of(request).operator.actor)
    return json_response(await _device(ctx, device_id))


async def forget_device(ctx: Context, request: Request) -> Response:
    device_id = require_id(request.path_params["device_id"], "device_id")
    await ctx.store.forget_device(device_id, actor=access_of(request).operator.actor)
    return json_response(shapes.DeviceForgotten(device_id=device_id, forgotten=True))


# -- hosts ---------------------------------------------------------------------------------


def _host_view(ctx: Context, entry: HostEntry) -> shapes.Host:
    host = entry.host
    static = ctx.auth.static_digest(host.host_id) is not None
    # Revocation is bound to the credential: a static host is revoked while its configured token
    # is, an enrolled one for good.
    revoked = entry.static_revoked if static else host.revoked
    # Online as every script reads it (the one notion), less a credential that no longer works.
    online = entry.online and not revoked
    kind = host.kind or ("static" if static else "enrolled")
    return host_view(host, kind=kind, online=online, revoked=revoked, draining=entry.draining)


def _static_digests(ctx: Context, host_ids: list[str]) -> dict[str, str]:
    digests = {h: ctx.auth.static_digest(h) for h in host_ids}
    return {h: d for h, d in digests.items() if d is not None}


async def _require_host(ctx: Context, host_id: str) -> None:
    """404 unless the host has a record or is configured (a static host never seen)."""
    if host_id not in ctx.auth.static_host_ids and not await ctx.queries.host_exists(host_id):
        raise NotFound("no such host")


async def _read_host(ctx: Context, host_id: str) -> shapes.Host:
    [entry] = await ctx.queries.hosts([host_id], _static_digests(ctx, [host_id]))
    return _host_view(ctx, entry)


async def host_view_for(ctx: Context, host_id: str) -> shapes.Host:
    await _require_host(ctx, host_id)
    return await _read_host(ctx, host_id)


async def list_hosts(ctx: Context, request: Request) -> Response:
    query = Query(request)
    page = await ctx.queries.host_ids_page(ctx.auth.static_host_ids, query.limit(*limits.HOSTS_LIMIT),
                                           query.id("cursor"))
    entries = await ctx.queries.hosts(page.items, _static_digests(ctx, page.items))
    return json_response(shapes.Hosts(hosts=[_host_view(ctx, e) for e in entries], next_cursor=page.next_cursor))


async def get_host(ctx: Context, request: Request) -> Response:
    return json_response(await host_view_for(ctx, require_id(request.path_params["host_id"], "host_id")))


async def _set_draining(ctx: Context, request: Request, draining: bool) -> Response:
    host_id = require_id(request.path_params["host_id"], "host_id")
    await _require_host(ctx, host_id)
    await ctx.store.set_host_draining(host_id, draining, actor=access_of(request).operator.actor)
    return json_response(await _read_host(ctx, host_id))


async def drain_host(ctx: Context, request: Request) -> Response:
    return await _set_draining(ctx, request, True)


async def undrain_host(ctx: Context, request: Request) -> Response:
    return await _set_draining(ctx, request, False)


async def revoke_host(ctx: Context, request: Request) -> Response:
    host_id = require_id(request.path_params["host_id"], "host_id")
    await ctx.store.revoke_host(host_id, ctx.auth.static_digest(host_id), actor=access_of(request).operator.actor)
    ctx.auth.forget(host_id)
    return json_response(await host_view_for(ctx, host_id))


# -- workflows -----------------------------------------------------------------------------


async def list_workflows(ctx: Context, request: Request) -> Response:
    """What the fleet can run: ``{"workflows": [{"name", "hosts", "devices"}]}`` from the online
    hosts' capabilities (``hosts``: their ids; ``devices``: how many pooled devices they have)."""
    return json_response({"workflows": await ctx.queries.workflows()})
