"""The host API (/internal/v1/hosts/{host_id}/...): heartbeat, claim, renew (one lease or a batch),
results.

Each handler authorizes the caller for the path's host first, validates the whole body, then runs
exactly one script. Validation runs inside ``Authenticator.parse_for``, so that a bad request from
a credential revoked meanwhile (through any process) still gets the credential's 401 first.
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import shapes
from coordinator.api.bodies import Agent, Claim, Heartbeat, Progress, Renew, Renewals, Result
from coordinator.api.context import Context
from coordinator.api.responses import assignment_view, json_response
from coordinator.api.validation import canonical_json, read, require_id
from coordinator.errors import ApiError, InvalidRequest, ScriptError, device_limit, error_for
from coordinator.longpoll import CONNECTION, claim_until_assigned
from coordinator.state.records import HostPrincipal
from coordinator.state.store import RenewalEntry
from wire import iso_ms


async def _authorize(ctx: Context, request: Request) -> HostPrincipal:
    # A path id that is not even valid belongs to no host: it gets the same 403 as another host's.
    return await ctx.auth.host_for_path(request, request.path_params["host_id"])


# -- heartbeat -----------------------------------------------------------------------------


def parse_snapshot(body: Heartbeat, max_devices: int) -> list[dict[str, str]]:
    """The snapshot's devices as stored, in device id order."""
    if len(body.devices) > max_devices:
        raise device_limit(max_devices)
    return sorted(({
        "device_id": device.device_id,
        "driver": device.driver,
        "status": device.status.value,
        "attributes": canonical_json(device.attributes or {}),
        "labels": canonical_json(device.labels or {}),
    } for device in body.devices), key=lambda d: d["device_id"])


def parse_capabilities(agent: Agent | None) -> dict[str, Any] | None:
    """``agent.capabilities``: what the host can run, each kind a list of names, sorted and
    without repeats, and ``sessions: true`` when it runs live sessions (left out otherwise, so an
    agent without sessions stores what it did before); ``None`` when the agent sent none (an
    older agent: it runs anything but sessions)."""
    if agent is None or agent.capabilities is None:
        return None
    caps = agent.capabilities
    parsed: dict[str, Any] = {"workflows": sorted(set(caps.workflows)), "planners": sorted(set(caps.planners))}
    if caps.sessions:
        parsed["sessions"] = True
    return parsed


async def _parse_heartbeat(ctx: Context, request: Request) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    """The agent as it was sent (fields it left out stay out, its capabilities normalised), the
    devices as stored, and the capabilities' canonical JSON ("" for none)."""
    body = await read(request, Heartbeat, ctx.settings.max_body_bytes)
    devices = parse_snapshot(body, ctx.settings.max_devices_per_host)
    capabilities = parse_capabilities(body.agent)
    agent = body.agent.model_dump(exclude_unset=True) if body.agent is not None else {}
    if capabilities is not None:
        agent["capabilities"] = capabilities
    return agent, devices, "" if capabilities is None else canonical_json(capabilities)


async def heartbeat(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    agent, devices, capabilities = await ctx.auth.parse_for(principal, _parse_heartbeat(ctx, request))
    instance_id = agent.get("instance_id")
    if isinstance(instance_id, str):
        other = ctx.agents.saw(principal.host_id, instance_id, agent.get("hostname"))
        if other is not None:  # stored with the snapshot, in the same step: the host's record says so
            agent["conflicting_agent"] = other.describe()
    snapshot = canonical_json({"agent": agent, "devices": devices})
    draining = await ctx.auth.run_for(principal, ctx.store.heartbeat(principal, snapshot, capabilities))
    ctx.names.heard(principal.host_id, agent.get("hostname"))
    answer: shapes.Heartbeated = {"host_id": principal.host_id, "devices": len(devices),
                                  "heartbeat_interval_s": ctx.settings.heartbeat_interval_whole_s,
                                  "draining": draining}
    return json_response(answer)


# -- claim ---------------------------------------------------------------------------------


def wait_seconds(request: Request, ctx: Context) -> float:
    """A poll's ``wait_s``: the default when absent, capped at the configured maximum."""
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
    wait_s = wait_seconds(request, ctx)
    body = await read(request, Claim, ctx.settings.max_body_bytes)
    return wait_s, body.claim_id or ""


async def claim(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    wait_s, claim_id = await ctx.auth.parse_for(principal, _parse_claim(ctx, request))
    end = await claim_until_assigned(ctx.waiter, ctx.store, principal, claim_id, wait_s, ctx.settings.lease_ttl_ms,
                                     request.scope.get("extensions", {}).get(CONNECTION), request.receive)
    ctx.metrics.claims.labels(end.outcome).inc()
    if end.claimed is None:
        return Response(status_code=204)
    if end.claimed.waited_ms is not None:
        ctx.metrics.schedule_to_start.observe(end.claimed.waited_ms / 1000)
    return json_response(assignment_view(end.claimed.assignment))


# -- renew ---------------------------------------------------------------------------------


def parse_progress(progress: Any, max_chars: int) -> tuple[wire.ProgressOutcome, str]:
    """(outcome, JSON to store or ""): a bad progress never fails the renewal, it is rejected."""
    if progress is None:
        return wire.ProgressOutcome.OMITTED, ""
    try:
        judged = Progress.model_validate(progress)
    except ValidationError:
        return wire.ProgressOutcome.REJECTED, ""
    outcome, summary = wire.ProgressOutcome.STORED, judged.summary
    if len(summary) > max_chars:
        outcome, summary = wire.ProgressOutcome.TRUNCATED, summary[:max_chars]
    return outcome, canonical_json({"step_index": judged.step_index, "status": judged.status, "summary": summary})


async def _parse_renew(ctx: Context, request: Request) -> tuple[str, str, int, wire.ProgressOutcome, str]:
    """Lease id, task id, attempt, progress outcome and progress JSON."""
    lease_id = require_id(request.path_params["lease_id"], "lease_id")
    # Progress is judged by parse_progress alone (a bad one is "rejected", never a failed
    # renewal), so it is exempt from the depth check, and the body may be large.
    async with ctx.large_bodies.turn(request):
        body = await read(request, Renew, ctx.settings.max_renew_body_bytes, unchecked=("progress",))
        outcome, progress_json = parse_progress(body.progress, ctx.settings.progress_summary_max_chars)
        task_id, attempt = body.task_id, body.attempt
        del body  # the progress as sent: its memory goes with the turn
    return lease_id, task_id, attempt, outcome, progress_json


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
        ctx.metrics.renewals.labels(exc.code).inc()
        raise
    ctx.metrics.renewals.labels("ok").inc()
    answer: shapes.Renewed = {"lease_ttl_ms": ctx.settings.lease_ttl_ms, "lease_expires_at": iso_ms(expires_ms),
                              "cancel_requested": cancel, "progress": outcome}
    return json_response(answer)


async def _parse_renewals(ctx: Context, request: Request) -> tuple[list[RenewalEntry], list[wire.ProgressOutcome]]:
    """The batch's leases, in the order sent, and each one's progress outcome."""
    async with ctx.large_bodies.turn(request):
        body = await read(request, Renewals, ctx.settings.max_renew_body_bytes, unchecked=("progress",))
        if len(body.leases) > ctx.settings.max_devices_per_host:
            # A host holds at most one lease per device: more is a malformed batch, not a device limit.
            raise InvalidRequest(f"at most {ctx.settings.max_devices_per_host} leases in one batch "
                                 "(COORDINATOR_MAX_DEVICES_PER_HOST)")
        entries, outcomes = [], []
        for lease in body.leases:
            outcome, progress_json = parse_progress(lease.progress, ctx.settings.progress_summary_max_chars)
            entries.append(RenewalEntry(lease.lease_id, lease.task_id, lease.attempt, progress_json))
            outcomes.append(outcome)
        del body  # the progress as sent: its memory goes with the turn
    return entries, outcomes


def _renewal_view(entry: RenewalEntry, answer: tuple[int, bool] | ScriptError, outcome: wire.ProgressOutcome,
                  ttl_ms: int) -> shapes.LeaseRenewed | shapes.LeaseRefused:
    if isinstance(answer, ScriptError):
        return {"lease_id": entry.lease_id, "status": 409, "code": error_for(answer).code}
    expires_ms, cancel = answer
    return {"lease_id": entry.lease_id, "status": 200, "lease_ttl_ms": ttl_ms, "lease_expires_at": iso_ms(expires_ms),
            "cancel_requested": cancel, "progress": outcome}


async def renewals(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    entries, outcomes = await ctx.auth.parse_for(principal, _parse_renewals(ctx, request))
    ttl_ms = ctx.settings.lease_ttl_ms
    answers = await ctx.store.renew_many(principal, ttl_ms, entries)
    views = [_renewal_view(*judged, ttl_ms) for judged in zip(entries, answers, outcomes, strict=True)]
    for view in views:
        ctx.metrics.renewals.labels(view.get("code", "ok")).inc()
    answer: shapes.RenewedBatch = {"leases": views}
    return json_response(answer)


# -- results -------------------------------------------------------------------------------


def _new_lease_id() -> str:
    """A lease id for a result's eager dispatch, minted as a claim's is (coordinator/longpoll.py)."""
    return "l_" + secrets.token_hex(16)


async def _parse_result(ctx: Context, request: Request) -> tuple[str, str, int, str, str, bool]:
    """Task id, lease id, attempt, status, the canonical report JSON (``retryable`` only in a
    failed report that asks for a retry, so the same report always has the same bytes), and
    whether eager dispatch is asked (``next``: not part of the report, so a replay is judged by
    the report alone)."""
    body = await read(request, Result, ctx.settings.max_body_bytes)
    status = body.status.value
    report: dict[str, object] = {"status": status, "failure_reason": body.failure_reason,
                                 "metadata": body.metadata or {}}
    if body.retryable and status == wire.ResultStatus.FAILED:
        report["retryable"] = True
    return body.task_id, body.lease_id, body.attempt, status, canonical_json(report), body.next is True


async def results(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    task_id, lease_id, attempt, status, report, eager = await ctx.auth.parse_for(
        principal, _parse_result(ctx, request))
    try:
        recorded = await ctx.store.record_result(principal, task_id, attempt, lease_id, report,
                                                 next_lease_id=_new_lease_id() if eager else "",
                                                 ttl_ms=ctx.settings.lease_ttl_ms)
    except ApiError as exc:
        ctx.metrics.results.labels(exc.code).inc()
        raise
    ctx.metrics.results.labels("replayed" if recorded.replayed else "recorded").inc()
    answer: shapes.Recorded = {"task_id": task_id, "attempt": attempt, "status": status,
                               "task_status": recorded.task_status, "recorded_at": iso_ms(recorded.recorded_at_ms),
                               "replayed": recorded.replayed}
    if eager:
        answer["next_assignment"] = None if recorded.next is None else assignment_view(recorded.next.assignment)
        if recorded.next is not None and recorded.next.waited_ms is not None:
            ctx.metrics.schedule_to_start.observe(recorded.next.waited_ms / 1000)
    return json_response(answer)
