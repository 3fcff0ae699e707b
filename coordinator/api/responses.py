"""How stored records look on the wire: the views, each built as its shape in ``shapes/`` says."""

from __future__ import annotations

import json
from typing import Any, cast

import orjson
from starlette.responses import Response

import wire
from coordinator.api import shapes
from coordinator.state.records import (
    DeviceState,
    EnrollmentToken,
    HostRecord,
    OperatorToken,
    RunCounts,
    RunRecord,
    TaskRecord,
)
from coordinator.state.wait_reasons import waiting_reason
from coordinator.state.webhooks import Delivery, Webhook
from wire import iso_ms


def json_response(content: Any, status_code: int = 200) -> Response:
    try:
        body = orjson.dumps(content)
    except orjson.JSONEncodeError:
        # orjson stops at 255 levels. Input deeper than 32 is refused today, but a host may have
        # stored deeper data before that: the views must still answer whatever is stored.
        body = json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status_code, media_type="application/json")


def offset_page(field: str, items: list[Any], offset: int, limit: int, more: bool) -> Response:
    """A page of a listing paged by position: its items, and the cursor of the next page."""
    return json_response({field: items, "next_cursor": str(offset + limit) if more else None})


def _json_field(raw: str | None) -> Any:
    return None if raw is None else orjson.loads(raw)


def task_result(task: TaskRecord) -> shapes.TaskResult | None:
    if task.status not in wire.TERMINAL_STATUSES:
        return None
    if task.result_report and task.result and task.result["attempt"] == task.attempt:
        report = orjson.loads(task.result_report)
        result = shapes.TaskResult(status=report["status"], failure_reason=report["failure_reason"],
                                   metadata=report["metadata"], attempt=task.result["attempt"],
                                   recorded_at=iso_ms(task.result["recorded_at"]))
        if "retryable" in report:
            result["retryable"] = report["retryable"]
        return result
    # Ended by the coordinator itself (cancel, or the lease expired for the last time).
    return {
        "status": task.status,
        "failure_reason": task.failure_reason,
        "metadata": {},
        "attempt": task.attempt,
        "recorded_at": iso_ms(task.finished_at),
    }


def session_view(task: TaskRecord) -> shapes.SessionState:
    """A live session's settings and state: its timeouts, when it ends if idle (while running),
    and whether (and why) it was asked to end."""
    idle_ms, most_ms = task.idle_timeout_ms or 0, task.max_duration_ms or 0
    running = task.status == wire.TaskStatus.RUNNING and task.started_at is not None
    return {
        "idle_timeout_s": idle_ms // 1000,
        "max_duration_s": most_ms // 1000,
        "idle_deadline": iso_ms((task.active_at or task.started_at or 0) + idle_ms) if running else None,
        "max_deadline": iso_ms((task.started_at or 0) + most_ms) if running else None,
        "end_requested": bool(task.end_requested),
        "end_reason": task.end_reason,
    }


def task_view(task: TaskRecord, candidates: dict[str, Any] | None = None) -> shapes.Task:
    """``candidates`` of a queued task (``queries.candidates``) give its waiting reason."""
    view: shapes.Task = {
        "task_id": task.id,
        "kind": task.kind,
        "status": task.status,
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        "device_id": task.device_id or task.target_device,
        "host_id": task.host_id,
        "selector": None,
        "max_steps": task.max_steps,
        "idempotency_key": task.idempotency_key,
        "cancel_requested": bool(task.cancel_requested),
        "failure_reason": task.failure_reason if task.status in wire.TERMINAL_STATUSES else None,
        # Progress belongs to the running attempt only; once a result is in it is history.
        "progress": task.progress if task.status == wire.TaskStatus.RUNNING else None,
        "result": task_result(task),
        "waiting_reason": waiting_reason(candidates) if candidates is not None else None,
        # As wait_reasons.candidates_from_reply built them, in the shape's fields.
        "candidates": cast("shapes.Candidates | None", candidates),
        "queue_timeout_s": None if task.queue_timeout_ms is None else task.queue_timeout_ms // 1000,
        "queue_deadline": iso_ms(task.queue_deadline) if task.status == wire.TaskStatus.QUEUED else None,
        "created_at": iso_ms(task.created_at),
        "updated_at": iso_ms(task.updated_at),
        "finished_at": iso_ms(task.finished_at) if task.status in wire.TERMINAL_STATUSES else None,
        # The operator who created it (a token's name, or "admin"); null for tasks of earlier versions.
        "created_by": task.created_by,
        "team": task.team,
        "priority": task.priority,
        "run_id": task.run_id,
        "rerun_of": task.rerun_of,
        "replaced_by": task.replaced_by,
    }
    if task.kind == wire.TaskKind.GOAL:
        view["goal"] = task.goal or ""
    elif task.kind == wire.TaskKind.SESSION:
        view["session"] = session_view(task)
    else:
        view["workflow"] = _json_field(task.workflow)
    if task.driver:
        view["selector"] = {"driver": task.driver, "labels": _json_field(task.labels) or {}}
    return view


def _status_counts(counts: dict[str, int]) -> dict[str, int]:
    """Every task status, each with its count (0 when none)."""
    return {status: counts.get(status, 0) for status in wire.values(wire.TaskStatus)}


def run_state_view(run: RunRecord, counts: RunCounts) -> shapes.Run:
    """A run's summary (PROTOCOL.md, "Runs"), as listings, creates, cancels and reruns answer it: its
    status and counts by task status, never its breakdown (run_detail_view), so a listing's size
    is bounded by its limit whatever its runs' work items."""
    return {
        "run_id": run.id,
        "name": run.name,
        "status": run.status,
        "counts": _status_counts(counts.by_status),
        "tasks": run.places,
        "created_at": iso_ms(run.created_at),
        "ended_at": iso_ms(run.ended_at) if run.status != wire.RunStatus.RUNNING else None,
        "team": run.team,
        "priority": run.priority,
        "created_by": run.created_by,
        "cancel_requested": bool(run.cancel_requested),
        "idempotency_key": run.idempotency_key,
    }


def run_detail_view(run: RunRecord, counts: RunCounts) -> shapes.RunDetail:
    """One run (GET /api/v1/runs/{id}): its summary and the breakdown by device (null: a
    selector's task not placed yet) and by work item (named by a bounded label:
    wire.RUN_WORK_LABEL_MAX_BYTES), each in name order."""
    return {
        **run_state_view(run, counts),
        "breakdown": {
            "devices": [{"device_id": device or None, "counts": _status_counts(by)}
                        for device, by in sorted(counts.by_device.items())],
            "work": [{"work": work, "counts": _status_counts(by)} for work, by in sorted(counts.by_work.items())],
        },
    }


def device_view(state: DeviceState) -> shapes.Device:
    device = state.device
    return {
        "device_id": device.device_id,
        # What people call it: an enrolled device's local id on its host (its serial), else its id.
        "name": state.local_id or device.device_id,
        "host_id": device.host_id,
        "driver": device.driver,
        "status": device.status,
        "attributes": _json_field(device.attributes) or {},
        "labels": _json_field(device.labels) or {},
        "host_online": state.host_online,
        "reserved_by": state.reserved_by,
        "disabled": state.disabled is not None,
        "disabled_reason": state.disabled.get("reason") if state.disabled is not None else None,
        "disabled_at": iso_ms(state.disabled.get("at")) if state.disabled is not None else None,
    }


def host_view(host: HostRecord, *, kind: str, online: bool, revoked: bool, draining: bool) -> shapes.Host:
    agent = host.snapshot.get("agent") or {}
    return {
        "host_id": host.host_id,
        "kind": kind,
        "online": online,
        "last_seen": iso_ms(host.last_seen),
        "devices": len(host.snapshot.get("devices", [])),
        "revoked": revoked,
        "draining": draining,
        "labels": _json_field(host.labels) or {},
        "enrollment_token_id": host.token_id,
        # What the host calls itself: its agent's latest word, else what it enrolled with.
        "hostname": agent.get("hostname") or host.hostname or None,
        "agent_version": agent.get("version"),
        # Two agent processes heartbeating as this host (coordinator/api/agent_instances.py): the
        # other one, as the latest heartbeat's process saw it; null when none.
        "agent_instance_id": agent.get("instance_id"),
        "conflicting_agent": agent.get("conflicting_agent"),
        "created_at": iso_ms(host.created_at),
    }


def token_view(token: EnrollmentToken, now_ms: int) -> shapes.EnrollmentToken:
    return {
        "id": token.id,
        "created_at": iso_ms(token.created_at),
        "expires_at": iso_ms(token.expires_at),
        "expired": now_ms >= token.expires_at,
        "max_uses": token.max_uses,
        "uses": token.uses,
        "uses_left": max(0, token.max_uses - token.uses),
        "labels": _json_field(token.labels) or {},
        "revoked": bool(token.revoked),
    }


def operator_token_view(token: OperatorToken, now_ms: int) -> shapes.OperatorToken:
    """An operator token, never its secret nor its digest."""
    return {
        "id": token.id,
        "name": token.name,
        "scopes": token.scopes,
        "created_at": iso_ms(token.created_at),
        "expires_at": iso_ms(token.expires_at),
        "last_used_at": iso_ms(token.last_used_at),
        "created_by": token.created_by,
        "team": token.team,
        "expired": now_ms >= token.expires_at,
        "revoked": bool(token.revoked),
    }


def assignment_view(assignment: dict[str, Any]) -> shapes.Assignment:
    """A claimed assignment, as the claim script stored and returned it."""
    view: shapes.Assignment = {
        "task_id": assignment["task_id"],
        "attempt": assignment["attempt"],
        "lease_id": assignment["lease_id"],
        "lease_ttl_ms": assignment["lease_ttl_ms"],
        "lease_expires_at": iso_ms(assignment["lease_expires_at_ms"]),
        "device_id": assignment["device_id"],
        "kind": assignment["kind"],
        "max_steps": assignment.get("max_steps"),
    }
    if assignment["kind"] == wire.TaskKind.GOAL:
        view["goal"] = assignment["goal"]
    elif assignment["kind"] == wire.TaskKind.SESSION:
        bounds = assignment["session"]
        view["session"] = {"idle_timeout_s": int(bounds["idle_timeout_s"]),
                           "max_duration_s": int(bounds["max_duration_s"])}
    else:
        view["workflow"] = orjson.loads(assignment["workflow"])
    return view


def event_view(event: dict[str, Any]) -> shapes.Event:
    """A task event as the scripts wrote it (lua/includes/events.lua ``taskEvent``)."""
    view = shapes.Event(at=iso_ms(event.get("at")), type=event["type"], task_id=event["task_id"],
                        attempt=event.get("attempt"), host_id=event.get("host_id"), device_id=event.get("device_id"),
                        reason=event.get("reason"), status=event.get("status"), actor=event.get("actor"),
                        actor_id=event.get("actor_id"))
    if "command_id" in event:  # a session's command events (lua/sendCommand, lua/pollCommands)
        view["command_id"] = event.get("command_id")
        view["action"] = event.get("action")
        view["screen"] = event.get("screen")
    return view


def run_view(run: dict[str, Any]) -> shapes.DeviceRun:
    """One run of a device (``startRun``/``endRun``); ``outcome`` is null while it runs."""
    return {
        "task_id": run.get("task_id"),
        "attempt": run.get("attempt"),
        "host_id": run.get("host_id"),
        "started_at": iso_ms(run.get("started_at")),
        "ended_at": iso_ms(run.get("ended_at")),
        "outcome": run.get("outcome"),
    }


def webhook_view(webhook: Webhook) -> shapes.Webhook:
    """A webhook as listed: never its secret (only the create's answer adds it)."""
    return {
        "id": webhook.id,
        "url": webhook.url,
        "events": webhook.events,
        "team": webhook.team,
        "created_at": iso_ms(webhook.created_at),
        "created_by": webhook.created_by,
    }


def delivery_view(delivery: Delivery) -> shapes.Delivery:
    return {
        "id": delivery.id,
        "event": delivery.event,
        "subject": delivery.subject,
        "created_at": iso_ms(delivery.created_at),
        "attempts": delivery.attempts,
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "last_attempt_at": iso_ms(delivery.last_attempt_at),
        "next_attempt_at": iso_ms(delivery.next_attempt_at),
        "delivered_at": iso_ms(delivery.delivered_at),
        "state": delivery.state,
    }
