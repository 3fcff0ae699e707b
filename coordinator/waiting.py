"""Why a queued task waits: its candidates and its waiting reason (PROTOCOL.md, "Waiting work").

Computed on read from the pool, never stored. The cost is bounded: a selector's candidates are the
first ``CANDIDATES_SCANNED`` pooled devices of its driver (in device-id order), read in one
pipelined round trip; past that the counts say ``"truncated": true``. A device-aimed task looks at
one device, and a page of them is read in one round trip. Queued tasks with the same selector share
one computation (``Queries.candidates``).
"""

from __future__ import annotations

from typing import Any

import orjson

import wire
from coordinator.records import DeviceState, TaskRecord

CANDIDATES_SCANNED = 1000


def labels_match(wanted: dict[str, str], have: dict[str, str]) -> bool:
    """Every wanted label present with the same value (the scheduler's rule, schedule.lua)."""
    return all(have.get(name) == value for name, value in wanted.items())


def count_candidates(devices: list[DeviceState], truncated: bool = False) -> dict[str, Any]:
    """The contract's ``candidates`` object. Each matching device is counted once, under the
    first reason in this order that keeps it from work: disabled, host offline, host draining,
    busy (reserved, or reported busy), unavailable, host stalled (it let a claim time out and
    has not polled since)."""
    counts = {"matching": len(devices), "busy": 0, "unavailable": 0, "host_offline": 0,
              "host_draining": 0, "disabled": 0, "host_stalled": 0}
    for device in devices:
        if device.disabled is not None:
            counts["disabled"] += 1
        elif not device.host_online:
            counts["host_offline"] += 1
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
    if candidates["matching"] == 0:
        return wire.WaitingReason.NO_MATCHING_DEVICE.value
    if candidates["busy"] > 0:
        return wire.WaitingReason.MATCHING_DEVICES_BUSY.value
    return wire.WaitingReason.NO_SCHEDULABLE_DEVICE.value


def target_of(task: TaskRecord) -> tuple[str, str]:
    """What a task waits for, as a cache key: ("device", id) or ("driver", driver + labels)."""
    if task.target_device:
        return "device", task.target_device
    return "driver", f"{task.driver}\0{task.labels or '{}'}"


def selector_labels(task: TaskRecord) -> dict[str, str]:
    return orjson.loads(task.labels) if task.labels else {}
