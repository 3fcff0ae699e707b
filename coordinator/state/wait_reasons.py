"""Why a queued task waits: its candidates and its waiting reason (PROTOCOL.md, "Waiting work").

Computed from the pool, never stored. A script reads a target's devices in one step
(``lua/includes/candidates.lua``): the create script when it queues a task, ``readWaiting``
otherwise; this module matches labels and counts. The cost is bounded: a selector's candidates
are the first ``candidates_scanned`` (a setting) pooled devices of its driver (in device-id
order); past that the counts say ``"truncated": true``. Queued tasks with the same target share one read
(``Queries.candidates``).
"""

from __future__ import annotations

from typing import Any

import orjson

import wire
from coordinator.state.records import DeviceRecord, DeviceState, TaskRecord

# Host flags in a candidates reply (lua/includes/candidates.lua, hostFlags).
_ONLINE, _DRAINING, _STALLED, _RUNS_WORKFLOW = 1, 2, 4, 8


def labels_match(wanted: dict[str, str], have: dict[str, str]) -> bool:
    """Every wanted label present with the same value (the scheduler's rule, lua/includes/pool.lua)."""
    return all(have.get(name) == value for name, value in wanted.items())


def count_candidates(devices: list[DeviceState], truncated: bool = False) -> dict[str, Any]:
    """The contract's ``candidates`` object. Each matching device is counted once, under the
    first reason in this order that keeps it from work: disabled, host offline, no workflow (its
    online host does not list the task's workflow), host draining, busy (reserved, or reported
    busy), unavailable, host stalled (it let a claim time out and has not polled since)."""
    counts = {"matching": len(devices), "busy": 0, "unavailable": 0, "host_offline": 0,
              "host_draining": 0, "disabled": 0, "host_stalled": 0, "no_workflow": 0}
    for device in devices:
        if device.disabled is not None:
            counts["disabled"] += 1
        elif not device.host_online:
            counts["host_offline"] += 1
        elif not device.host_runs_workflow:
            counts["no_workflow"] += 1
        elif device.host_draining:
            counts["host_draining"] += 1
        elif device.reserved_by is not None or device.device.status == wire.DeviceStatus.BUSY:
            counts["busy"] += 1
        elif device.device.status == wire.DeviceStatus.UNAVAILABLE:
            counts["unavailable"] += 1
        elif device.host_stalled:
            counts["host_stalled"] += 1
    if truncated:
        counts["truncated"] = True
    return counts


def waiting_reason(candidates: dict[str, Any]) -> str:
    """The contract's rule, in its order. ``no_capable_host``: devices match, and every one that
    is not disabled or offline is on an online host that does not list the task's workflow."""
    if candidates["matching"] == 0:
        return wire.WaitingReason.NO_MATCHING_DEVICE.value
    no_workflow = candidates.get("no_workflow", 0)
    if no_workflow > 0 and candidates["matching"] == candidates["disabled"] + candidates["host_offline"] + no_workflow:
        return wire.WaitingReason.NO_CAPABLE_HOST.value
    if candidates["busy"] > 0:
        return wire.WaitingReason.MATCHING_DEVICES_BUSY.value
    return wire.WaitingReason.NO_SCHEDULABLE_DEVICE.value


def workflow_name(task: TaskRecord) -> str | None:
    """A workflow task's workflow name (what a host must list to run it); None for a goal."""
    if task.kind != wire.TaskKind.WORKFLOW or not task.workflow:
        return None
    name = orjson.loads(task.workflow).get("name")
    return name if isinstance(name, str) else None


def target_of(task: TaskRecord) -> tuple[str, str, str]:
    """What a task waits for, as a cache key: ("device", id, workflow) or ("driver", driver +
    labels, workflow); the workflow's name ("" for a goal) decides which hosts count."""
    workflow = workflow_name(task) or ""
    if task.target_device:
        return "device", task.target_device, workflow
    return "driver", f"{task.driver}\0{task.labels or '{}'}", workflow


def selector_labels(task: TaskRecord) -> dict[str, str]:
    return orjson.loads(task.labels) if task.labels else {}


def candidates_from_reply(task: TaskRecord, reply: list[Any]) -> dict[str, Any]:
    """The ``candidates`` of a queued task from its target's devices as a script read them:
    ``[truncated, (device id, record JSON, reserving task, disabled JSON, host flags)...]``."""
    wanted = {} if task.target_device else selector_labels(task)
    states = []
    for i in range(1, len(reply), 5):
        device_id, raw, reserved, disabled, flags = reply[i:i + 5]
        record = DeviceRecord.from_json(device_id.decode(), raw)
        if wanted and not labels_match(wanted, orjson.loads(record.labels)):
            continue
        flags = int(flags)
        states.append(DeviceState(
            record,
            reserved_by=None if reserved is None else reserved.decode(),
            disabled=None if disabled is None else orjson.loads(disabled),
            host_online=bool(flags & _ONLINE),
            host_draining=bool(flags & _DRAINING),
            host_stalled=bool(flags & _STALLED),
            host_runs_workflow=bool(flags & _RUNS_WORKFLOW),
        ))
    return count_candidates(states, truncated=int(reply[0]) == 1)
