"""The host API (/internal/v1/hosts/{host_id}/...): heartbeat, claim, renew, results.

Each handler authorizes the caller for the path's host first, validates the whole body, then runs
exactly one script. Validation runs inside ``Authenticator.parse_for``, so that a bad request from
a credential revoked meanwhile (through any process) still gets the credential's 401 first.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api.auth import HostPrincipal
from coordinator.api.context import Context
from coordinator.api.limits import CAPABILITY_KINDS, MAX_CAPABILITY_NAMES
from coordinator.api.responses import assignment_view, json_response
from coordinator.api.validation import (
    Body,
    canonical_json,
    clean_text,
    read_json,
    require_id,
)
from coordinator.errors import ApiError, InvalidRequest, device_limit
from coordinator.longpoll import CONNECTION, claim_until_assigned
from wire import iso_ms

_DEVICE_STATUSES = wire.values(wire.DeviceStatus)
_RESULT_STATUSES = wire.values(wire.ResultStatus)


async def _authorize(ctx: Context, request: Request) -> HostPrincipal:
    # A path id that is not even valid belongs to no host: it gets the same 403 as another host's.
    return await ctx.auth.host_for_path(request, request.path_params["host_id"])


# -- heartbeat -----------------------------------------------------------------------------


def parse_snapshot(body: Body, max_devices: int) -> list[dict[str, str]]:
    devices = body.get("devices")
    if isinstance(devices, list) and len(devices) > max_devices:
        raise device_limit(max_devices)
    parsed: list[dict[str, str]] = []
    for device_id, entry in body.entries("devices", "device_id", low=0, high=max_devices):
        status = entry.get("status")
        if status not in _DEVICE_STATUSES:
            raise InvalidRequest(f"status must be one of {', '.join(_DEVICE_STATUSES)}")
        parsed.append({
            "device_id": device_id,
            "driver": entry.id("driver"),
            "status": status,
            "attributes": canonical_json(entry.free_object("attributes")),
            "labels": canonical_json(entry.labels("labels")),
        })
    parsed.sort(key=lambda d: d["device_id"])
    return parsed


def parse_capabilities(agent: Body) -> dict[str, list[str]] | None:
    """``agent.capabilities``: what the host can run, each kind a list of names (ids), sorted and
    without repeats; ``None`` when the agent sent none (an older agent: it runs anything)."""
    if agent.get("capabilities") is None:
        return None
    capabilities = agent.object("capabilities")
    parsed: dict[str, list[str]] = {}
    for kind in CAPABILITY_KINDS:
        names = capabilities.get(kind, [])
        field = f"agent.capabilities.{kind}"
        if not isinstance(names, list) or len(names) > MAX_CAPABILITY_NAMES:
            raise InvalidRequest(f"{field} must be a list of at most {MAX_CAPABILITY_NAMES} names")
        parsed[kind] = sorted({require_id(name, f"{field}[{i}]") for i, name in enumerate(names)})
    return parsed


async def _parse_heartbeat(ctx: Context, request: Request) -> tuple[str, int, str]:
    """The canonical snapshot JSON, its device count, and its capabilities' canonical JSON ("" for
    none)."""
    body = await read_json(request, ctx.settings.max_body_bytes)
    devices = parse_snapshot(body, ctx.settings.max_devices_per_host)
    agent = body.free_object("agent")
    capabilities = parse_capabilities(body.object("agent"))
    if capabilities is not None:
        agent["capabilities"] = capabilities
    return (canonical_json({"agent": agent, "devices": devices}), len(devices),
            "" if capabilities is None else canonical_json(capabilities))


async def heartbeat(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    snapshot, count, capabilities = await ctx.auth.parse_for(principal, _parse_heartbeat(ctx, request))
    draining = await ctx.auth.run_for(principal, ctx.store.heartbeat(principal, snapshot, capabilities))
    return json_response({
        "host_id": principal.host_id,
        "devices": count,
        "heartbeat_interval_s": ctx.settings.heartbeat_interval_whole_s,
        "draining": draining,
    })


# -- claim ---------------------------------------------------------------------------------


def _wait_seconds(request: Request, ctx: Context) -> float:
    raw = request.query_params.get("wait_s")
    if raw is None:
        wait = ctx.settings.claim_wait_default_s
    else:
        try:
            wait = float(raw)
        except ValueError:
            raise InvalidRequest("wait_s must be a number of seconds") from None
        if not 0 <= wait < float("inf"):
            raise InvalidRequest("wait_s must be zero or more")
    return min(wait, ctx.settings.claim_wait_max_s)


async def _parse_claim(ctx: Context, request: Request) -> tuple[float, str]:
    """How long to wait, and the claim id ("" for none)."""
    wait_s = _wait_seconds(request, ctx)
    body = await read_json(request, ctx.settings.max_body_bytes, required=False)
    claim_id = body.id("claim_id") if body.get("claim_id") is not None else ""
    return wait_s, claim_id


async def claim(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    wait_s, claim_id = await ctx.auth.parse_for(principal, _parse_claim(ctx, request))
    end = await claim_until_assigned(ctx.waiter, ctx.store, principal, claim_id, wait_s, ctx.settings.lease_ttl_ms,
                                     request.scope.get("extensions", {}).get(CONNECTION), request.receive)
    ctx.metrics.claims.inc(end.outcome)
    if end.claimed is None:
        return Response(status_code=204)
    if end.claimed.waited_ms is not None:
        ctx.metrics.schedule_to_start.observe(end.claimed.waited_ms / 1000)
    return json_response(assignment_view(end.claimed.assignment))


# -- renew ---------------------------------------------------------------------------------


def parse_progress(body: Body, max_chars: int) -> tuple[wire.ProgressOutcome, str]:
    """(outcome, JSON to store or ""): a bad progress field never fails the renewal."""
    if "progress" not in body or body["progress"] is None:
        return wire.ProgressOutcome.OMITTED, ""
    progress = body["progress"]
    if not isinstance(progress, dict) or set(progress) - wire.PROGRESS_FIELDS:
        return wire.ProgressOutcome.REJECTED, ""
    step_index = progress.get("step_index")
    status = progress.get("status")
    summary = progress.get("summary", "")
    if (
        isinstance(step_index, bool) or not isinstance(step_index, int) or not 0 <= step_index < 2**31
        or not isinstance(status, str) or not 0 < len(status) <= wire.PROGRESS_STATUS_MAX_CHARS
        or not isinstance(summary, str)
    ):
        return wire.ProgressOutcome.REJECTED, ""
    status, summary = clean_text(status), clean_text(summary)
    outcome = wire.ProgressOutcome.STORED
    if len(summary) > max_chars:
        summary = summary[:max_chars]
        outcome = wire.ProgressOutcome.TRUNCATED
    return outcome, canonical_json({"step_index": step_index, "status": status, "summary": summary})


async def _parse_renew(ctx: Context, request: Request) -> tuple[str, str, int, wire.ProgressOutcome, str]:
    """Lease id, task id, attempt, progress outcome and progress JSON."""
    lease_id = require_id(request.path_params["lease_id"], "lease_id")
    # Progress is judged by parse_progress alone (a bad one is "rejected", never a failed
    # renewal), so it is exempt from read_json's depth check, and the body may be large.
    body = await read_json(request, ctx.settings.max_renew_body_bytes, unchecked=("progress",))
    task_id = body.id("task_id")
    attempt = body.integer("attempt", low=1, required=True)
    outcome, progress_json = parse_progress(body, ctx.settings.progress_summary_max_chars)
    return lease_id, task_id, attempt, outcome, progress_json  # type: ignore[return-value]


async def renew(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    lease_id, task_id, attempt, outcome, progress_json = await ctx.auth.parse_for(
        principal, _parse_renew(ctx, request)
    )
    try:
        expires_ms, cancel = await ctx.store.renew(
            principal, lease_id, task_id, attempt, ctx.settings.lease_ttl_ms, progress_json
        )
    except ApiError as exc:
        ctx.metrics.renewals.inc(exc.code)
        raise
    ctx.metrics.renewals.inc("ok")
    return json_response({
        "lease_ttl_ms": ctx.settings.lease_ttl_ms,
        "lease_expires_at": iso_ms(expires_ms),
        "cancel_requested": cancel,
        "progress": outcome,
    })


# -- results -------------------------------------------------------------------------------


async def _parse_result(ctx: Context, request: Request) -> tuple[str, str, int, str, str]:
    """Task id, lease id, attempt, status and the canonical report JSON (``retryable`` only in a
    failed report that asks for a retry, so the same report always has the same bytes)."""
    body = await read_json(request, ctx.settings.max_body_bytes)
    task_id = body.id("task_id")
    lease_id = body.id("lease_id")
    attempt = body.integer("attempt", low=1, required=True)
    status = body.get("status")
    if status not in _RESULT_STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(_RESULT_STATUSES)}")
    failure_reason = body.text("failure_reason", max_len=wire.FAILURE_REASON_MAX_CHARS)
    metadata = body.free_object("metadata")
    retryable = body.get("retryable")
    if retryable is not None and not isinstance(retryable, bool):
        raise InvalidRequest("retryable must be true or false")
    report: dict[str, object] = {"status": status, "failure_reason": failure_reason, "metadata": metadata}
    if retryable and status == wire.ResultStatus.FAILED:
        report["retryable"] = True
    return task_id, lease_id, attempt, status, canonical_json(report)  # type: ignore[return-value]


async def results(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    task_id, lease_id, attempt, status, report = await ctx.auth.parse_for(principal, _parse_result(ctx, request))
    try:
        recorded = await ctx.store.record_result(principal, task_id, attempt, lease_id, report)
    except ApiError as exc:
        ctx.metrics.results.inc(exc.code)
        raise
    ctx.metrics.results.inc("replayed" if recorded.replayed else "recorded")
    return json_response({
        "task_id": task_id,
        "attempt": attempt,
        "status": status,
        "task_status": recorded.task_status,
        "recorded_at": iso_ms(recorded.recorded_at_ms),
        "replayed": recorded.replayed,
    })
