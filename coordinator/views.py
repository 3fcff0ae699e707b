"""How stored records look on the wire: timestamps, tasks, devices, hosts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson
from starlette.responses import Response

import wire

TERMINAL = frozenset(status.value for status in wire.TERMINAL_STATUSES)


def json_response(content: Any, status_code: int = 200) -> Response:
    try:
        body = orjson.dumps(content)
    except orjson.JSONEncodeError:
        # orjson stops at 255 levels. Input deeper than 32 is refused today, but a host may have
        # stored deeper data before that: the views must still answer whatever is stored.
        body = json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status_code=status_code, media_type="application/json")


def iso_ms(ms: int | None) -> str | None:
    """RFC 3339 UTC with milliseconds, e.g. 2026-12-02T08:00:00.123Z."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@lru_cache(maxsize=64)
def _second(seconds: int) -> str:
    # Formatting a datetime costs more than the rest of a renewal's response; most answers in a
    # busy second share the same prefix.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _json_field(raw: str | None) -> Any:
    return None if raw is None else orjson.loads(raw)


def task_result(task: dict[str, Any]) -> dict[str, Any] | None:
    if task["status"] not in TERMINAL:
        return None
    recorded = task.get("result")
    if task.get("result_report") and recorded:
        report = orjson.loads(task["result_report"])
        return {**report, "attempt": recorded["attempt"], "recorded_at": iso_ms(recorded["recorded_at"])}
    # Ended by the coordinator itself (cancel, or the lease expired for the last time).
    return {
        "status": task["status"],
        "failure_reason": task.get("failure_reason"),
        "metadata": {},
        "attempt": task["attempt"],
        "recorded_at": iso_ms(task.get("finished_at")),
    }


def task_view(task: dict[str, Any], progress: dict[str, Any] | None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "task_id": task["id"],
        "kind": task["kind"],
        "status": task["status"],
        "attempt": task["attempt"],
        "max_attempts": task["max_attempts"],
        "device_id": task.get("device_id") or task.get("target_device"),
        "host_id": task.get("host_id"),
        "selector": None,
        "max_steps": task.get("max_steps"),
        "idempotency_key": task.get("idempotency_key"),
        "cancel_requested": bool(task.get("cancel_requested")),
        "failure_reason": task.get("failure_reason") if task["status"] in TERMINAL else None,
        # Progress belongs to the running attempt only; once a result is in it is history.
        "progress": progress if task["status"] == "running" else None,
        "result": task_result(task),
        "created_at": iso_ms(task["created_at"]),
        "updated_at": iso_ms(task["updated_at"]),
    }
    if task["kind"] == "goal":
        view["goal"] = task["goal"]
    else:
        view["workflow"] = _json_field(task["workflow"])
    if task.get("driver"):
        view["selector"] = {"driver": task["driver"], "labels": _json_field(task.get("labels")) or {}}
    return view


def device_view(device_id: str, device: dict[str, Any], host_online: bool,
                reserved_by: str | None) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "host_id": device["host_id"],
        "driver": device["driver"],
        "status": device["status"],
        "attributes": _json_field(device.get("attributes")) or {},
        "labels": _json_field(device.get("labels")) or {},
        "host_online": host_online,
        "reserved_by": reserved_by,
    }
