"""The operator API for webhooks (/api/v1/webhooks, admin only; PROTOCOL.md, "Webhooks"):
register, list, remove, and a webhook's latest deliveries. Delivering them is
coordinator/webhooks.py's.

A webhook's secret carries the prefix ``whsec_`` and is shown once, in the answer that creates it.
Unlike a token it cannot be kept as a hash: each delivery is signed with it (HMAC-SHA256), so it
is stored as is, apart from the webhook's record, and read only to sign.
Bearer = an operator credential; its scope was checked before any handler here runs (app.py)."""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import fleet, shapes
from coordinator.api.auth import access_of
from coordinator.api.bodies import WebhookCreate
from coordinator.api.context import Context
from coordinator.api.responses import (
    delivery_view,
    device_view,
    json_response,
    run_detail_view,
    task_view,
    webhook_view,
)
from coordinator.api.validation import Query, read, require_id
from coordinator.errors import InvalidRequest, NotFound, found


async def create_webhook(ctx: Context, request: Request) -> Response:
    body = await read(request, WebhookCreate, ctx.settings.max_body_bytes)
    refusal = await ctx.settings.webhook_targets.refusal(body.url)
    if refusal is not None:  # checked before anything is written: a refused URL leaves nothing
        raise InvalidRequest(f"url {refusal}")
    events = [e for e in wire.values(wire.WebhookEvent) if e in body.events]  # in the contract's order
    secret = wire.WEBHOOK_SECRET_PREFIX + secrets.token_urlsafe(32)
    webhook = await ctx.webhooks.create("wh_" + secrets.token_hex(8), body.url, events, body.team, secret,
                                        actor=access_of(request).operator.name)
    return json_response(shapes.WebhookCreated(**webhook_view(webhook), secret=secret), 201)


async def list_webhooks(ctx: Context, request: Request) -> Response:
    return json_response(shapes.Webhooks(webhooks=[webhook_view(w) for w in await ctx.webhooks.all()]))


async def delete_webhook(ctx: Context, request: Request) -> Response:
    webhook_id = require_id(request.path_params["webhook_id"], "webhook_id")
    return json_response(webhook_view(await ctx.webhooks.delete(webhook_id)))


async def list_deliveries(ctx: Context, request: Request) -> Response:
    webhook_id = require_id(request.path_params["webhook_id"], "webhook_id")
    limit = Query(request).limit(wire.WEBHOOK_DELIVERIES_KEPT, wire.WEBHOOK_DELIVERIES_KEPT)
    found(await ctx.webhooks.get(webhook_id), "webhook")
    deliveries = await ctx.webhooks.deliveries(webhook_id, limit)
    return json_response(shapes.Deliveries(deliveries=[delivery_view(d) for d in deliveries]))


async def subject_view(ctx: Context, kind: str, subject: str) -> dict[str, Any]:
    """A delivery's ``data``: what the event is about, as its GET answers now (the task, the
    host, the device), or only its id when it is gone (retention deleted the task, the device
    was forgotten). Handed to the delivery loop (coordinator/webhooks.py) by app.py."""
    if kind == wire.WebhookEvent.TASK_ENDED.value:
        task = await ctx.queries.get_task(subject)
        if task is None:
            return {"task_id": subject}
        [view] = await ctx.names.add([task_view(task)])  # with its host's and device's names, as GET
        return dict(view)
    if kind == wire.WebhookEvent.HOST_OFFLINE.value:
        try:
            return dict(await fleet.host_view_for(ctx, subject))
        except NotFound:
            return {"host_id": subject}
    if kind == wire.WebhookEvent.DEVICE_DISABLED.value:
        devices = await ctx.queries.devices([subject])
        if not devices:
            return {"device_id": subject}
        [device] = await ctx.names.add([device_view(devices[0])])
        return dict(device)
    run = await ctx.queries.get_run(subject)  # run.ended
    return dict(run_detail_view(run.record, run.counts)) if run is not None else {"run_id": subject}
