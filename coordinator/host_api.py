"""The host API (/internal/v1/hosts/{host_id}/...): heartbeat, claim, renew, results.

Each handler authorizes the caller for the path's host first, validates the whole body, then runs
exactly one script. Validation runs inside ``Authenticator.parse_for``, so that a bad request from
a credential revoked meanwhile (through any process) still gets the credential's 401 first.
"""

from __future__ import annotations

import asyncio
import secrets

from starlette.background import BackgroundTask
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.auth import HostPrincipal
from coordinator.context import Context
from coordinator.errors import ApiError, InvalidRequest, device_limit
from coordinator.metrics import Metrics
from coordinator.server import CONNECTION, ClientConnection
from coordinator.store import Claimed
from coordinator.validation import (
    Body,
    canonical_json,
    clean_text,
    read_json,
    require_id,
)
from coordinator.views import assignment_view, iso_ms, json_response
from coordinator.waiter import ClaimWaiter, Wakeup

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


async def _parse_heartbeat(ctx: Context, request: Request) -> tuple[str, int]:
    """The canonical snapshot JSON and its device count."""
    body = await read_json(request, ctx.settings.max_body_bytes)
    devices = parse_snapshot(body, ctx.settings.max_devices_per_host)
    agent = body.free_object("agent")
    return canonical_json({"agent": agent, "devices": devices}), len(devices)


async def heartbeat(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    snapshot, count = await ctx.auth.parse_for(principal, _parse_heartbeat(ctx, request))
    draining = await ctx.auth.run_for(principal, ctx.store.heartbeat(principal, snapshot))
    return json_response({
        "host_id": principal.host_id,
        "devices": count,
        "heartbeat_interval_s": ctx.settings.heartbeat_interval_whole_s,
        "draining": draining,
    })


# -- claim ---------------------------------------------------------------------------------


def _query_value(query: bytes, name: str) -> str | None:
    """``name``'s value in the query string, as Starlette's ``QueryParams`` reads it (the last
    one). Not request.query_params: the request keeps what that parses for as long as it lives,
    a waiting poll's whole wait (0.4 KB of it). A plain ``wait_s=5`` is split here, and only
    percent-encoded text goes through ``QueryParams``' parser, which costs far more."""
    if b"%" in query or b"+" in query or not query.isascii():
        return QueryParams(query).get(name)
    value = None
    for pair in query.decode().split("&"):
        key, _, text = pair.partition("=")
        if key == name:
            value = text
    return value


def _wait_seconds(request: Request, ctx: Context) -> float:
    raw = _query_value(request.scope["query_string"], "wait_s")
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


async def _client_gone(request: Request) -> None:
    """Returns once the client has disconnected (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class _Hangup:
    """Sets a waiting poll's wake-up when its client hangs up, and says whether it has.

    Through the connection (``server.CONNECTION``) where the server is ours: a callback when it
    is lost, and a look at the socket, since a request handled late, after a stall, may have lost
    its client before the event loop read the hang-up. Elsewhere (another ASGI server, the tests'
    in-process transport) through a task that reads the request's messages until
    ``http.disconnect``, started before the first wait."""

    __slots__ = ("_connection", "_lost", "_reader", "_request", "_wakeup")

    def __init__(self, request: Request, wakeup: Wakeup) -> None:
        self._request = request
        self._wakeup = wakeup
        self._reader: asyncio.Task[None] | None = None
        self._lost = False
        self._connection: ClientConnection | None = request.scope.get("extensions", {}).get(CONNECTION)
        if self._connection is not None:
            self._connection.on_lost(self._on_lost)

    def _on_lost(self) -> None:
        self._lost = True
        self._wakeup.set()

    def happened(self, ask_socket: bool) -> bool:
        """Whether the client has hung up. ``ask_socket`` before the first attempt: the request
        may have waited in the kernel behind its client's hang-up, which the event loop has not
        read yet. After a wait it has read what came before the wake-up, and a hang-up it read
        ended the wait already (``_on_lost``): asking the socket again cost 0.03 ms of every idle
        dispatch (``bench.hops``)."""
        if self._reader is not None and self._reader.done():
            return True
        if self._connection is None:
            return False
        return self._lost or (ask_socket and self._connection.peer_closed())

    def watch(self) -> None:
        """Before each wait: make sure the hang-up will be noticed while the poll waits."""
        if self._connection is None and self._reader is None:
            self._reader = asyncio.ensure_future(_client_gone(self._request))
            self._reader.add_done_callback(lambda _: self._wakeup.set())

    def close(self) -> None:
        if self._connection is not None:
            self._connection.on_lost(None)
        if self._reader is not None:
            self._reader.cancel()


async def _parse_claim(ctx: Context, request: Request) -> tuple[float, str]:
    """How long to wait, and the claim id ("" for none)."""
    wait_s = _wait_seconds(request, ctx)
    body = await read_json(request, ctx.settings.max_body_bytes, required=False)
    claim_id = body.id("claim_id") if body.get("claim_id") is not None else ""
    return wait_s, claim_id


async def claim(ctx: Context, request: Request) -> Response:
    principal = await _authorize(ctx, request)
    wait_s, claim_id = await ctx.auth.parse_for(principal, _parse_claim(ctx, request))
    store, waiter, metrics = ctx.store, ctx.waiter, ctx.metrics
    host_id = principal.host_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s

    # Register before the first attempt, so a wake-up between the attempt and the wait is kept.
    # Every attempt first checks that the client is still there: a poll whose client has gone
    # claims nothing.
    wakeup = waiter.register(host_id)
    hangup = _Hangup(request, wakeup)
    # Minted now, not after a wake-up: an attempt that claims nothing binds no lease, so the id
    # stays unused for the next.
    lease_id = "l_" + secrets.token_hex(16)
    answering = False
    first_attempt = True
    try:
        while True:
            if hangup.happened(ask_socket=first_attempt):
                metrics.claims.inc("disconnected")
                return Response(status_code=204)
            if waiter.closed:
                metrics.claims.inc("shutdown")
                return Response(status_code=204)
            first_attempt = False
            wakeup.clear()
            wait_ms = int((deadline - loop.time()) * 1000)
            claimed = await store.claim(principal, claim_id, lease_id, ctx.settings.lease_ttl_ms,
                                        waiter.process_id, max(wait_ms, 0))
            if claimed is not None:
                response = _assignment_response(claimed, metrics, waiter, wakeup)
                answering = True
                return response
            waiter.settled(wakeup)
            remaining = deadline - loop.time()
            if remaining <= 0:
                metrics.claims.inc("empty")
                return Response(status_code=204)
            hangup.watch()
            await wakeup.wait(remaining)
    finally:
        waiter.unregister(host_id, wakeup)
        hangup.close()
        if not answering:
            waiter.settled(wakeup)


def _assignment_response(claimed: Claimed, metrics: Metrics, waiter: ClaimWaiter, wakeup: Wakeup) -> Response:
    """The claimed assignment's answer. What the claim leaves (counting it, and letting the
    wake-up loop pop again) waits until the answer is written: on an idle process the agent's
    wait for it is the dispatch latency."""
    response = json_response(assignment_view(claimed.assignment))
    response.background = BackgroundTask(_after_answer, claimed.waited_ms, metrics, waiter, wakeup)
    return response


async def _after_answer(waited_ms: int | None, metrics: Metrics, waiter: ClaimWaiter, wakeup: Wakeup) -> None:
    waiter.settled(wakeup)
    metrics.claims.inc("assigned")
    if waited_ms is not None:
        metrics.schedule_to_start.observe(waited_ms / 1000)


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
