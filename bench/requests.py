"""Requests of the wire contract (PROTOCOL.md) as the bytes the load generator sends, and the
static fleets that send them."""

from __future__ import annotations

from typing import Any

from bench.loadgen import build

GOAL = "Turn on airplane mode"


def fleet(count: int, tag: str) -> dict[str, str]:
    """Static hosts: id -> plain-text token."""
    return {f"h{i:05d}": f"bench-{tag}-token-{i:05d}" for i in range(count)}


def heartbeat_req(host: str, token: str, devices: list[str]) -> bytes:
    return build("PUT", f"/internal/v1/hosts/{host}/heartbeat", token, {
        "devices": [{"device_id": d, "driver": "adb", "status": "available",
                     "attributes": {"model": "Pixel 7", "os_version": "14"}, "labels": {"tier": "a"}}
                    for d in devices],
        "agent": {"version": "bench", "hostname": host},
    })


def claim_req(host: str, token: str, wait_s: float) -> bytes:
    return build("POST", f"/internal/v1/hosts/{host}/claim?wait_s={wait_s:g}", token)


def renew_body(assignment: dict[str, Any], step: int = 1) -> dict[str, Any]:
    return {"task_id": assignment["task_id"], "attempt": assignment["attempt"],
            "progress": {"step_index": step, "status": "running", "summary": "Opened Settings"}}


def renew_req(host: str, token: str, assignment: dict[str, Any], step: int = 1) -> bytes:
    return build("POST", f"/internal/v1/hosts/{host}/leases/{assignment['lease_id']}/renew", token,
                 renew_body(assignment, step))


def result_req(host: str, token: str, assignment: dict[str, Any], *, eager: bool = False) -> bytes:
    """A succeeded result; ``eager`` asks for the device's next assignment (``"next": true``)."""
    body: dict[str, Any] = {
        "task_id": assignment["task_id"], "attempt": assignment["attempt"],
        "lease_id": assignment["lease_id"], "status": "succeeded", "failure_reason": None,
        "metadata": {"steps": 3},
    }
    if eager:
        body["next"] = True
    return build("POST", f"/internal/v1/hosts/{host}/results", token, body)


def create_body(device_id: str) -> dict[str, Any]:
    """A create request's body: all an operator gives of a task."""
    return {"kind": "goal", "goal": GOAL, "device_id": device_id}


def create_req(admin: str, device_id: str) -> bytes:
    return build("POST", "/api/v1/tasks", admin, create_body(device_id))
