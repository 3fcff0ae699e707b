"""Why a queued task waits: its candidates and its waiting reason (PROTOCOL.md, "Waiting work").

Computed from the pool, never stored. A script counts a target's devices in one step
(``lua/includes/candidates.lua``, with the scheduler's own predicates: labels, workflows, host
online): the create script when it queues a task, ``readWaiting`` otherwise. This module names
what the scripts answer and applies the contract's rule to the counts. The cost is bounded: a
selector's candidates are the first ``candidates_scanned`` pooled devices that match it (in
device-id order, the intersection of its labels' indexes; ``COORDINATOR_CANDIDATES_SCANNED``); past
that the counts say ``"truncated":
true``. Queued tasks with the same target share one read (``Queries.candidates``).
"""

from __future__ import annotations

from enum import IntFlag
from typing import Any

import orjson

import wire
from coordinator.state.records import TaskRecord

# The counts of the contract's ``candidates`` object, in the order the scripts answer them
# (generated into the library as CANDIDATE_COUNTS). Each matching device is counted under the
# first reason that keeps it from work (lua/includes/candidates.lua, notFreeBecause).
CANDIDATE_COUNTS = ("matching", "busy", "unavailable", "host_offline", "host_draining", "disabled", "host_stalled",
                    "no_workflow")


class HostFlag(IntFlag):
    """A host's standing as the scripts answer it, one bit each (generated into the library as
    HOST_FLAGS; lua/includes/candidates.lua, hostFlags)."""

    ONLINE = 1
    DRAINING = 2
    STALLED = 4
    RUNS_WORKFLOW = 8  # it may run the task asked about (always, when no task is)


def waiting_reason(candidates: dict[str, Any]) -> str:
    """The contract's rule, in its order. ``no_capable_host``: devices match, some on an online
    host, and no online host of theirs lists the task's workflow (the counts take a host's own
    reasons first: every matching device is then ``host_offline`` or ``no_workflow``).
    ``team_at_quota``: the team holds its quota (read in the same step as the counts, not
    inferred) and a matching device is counted under no reason, so it could take the task now.
    A queued task of a team below its quota never waits beside such a device
    (lua/includes/placement.lua); were it to, the reasons that follow say what else holds, and
    the model test fails on the stranded task itself."""
    if candidates["matching"] == 0:
        return wire.WaitingReason.NO_MATCHING_DEVICE.value
    no_workflow = candidates.get("no_workflow", 0)
    if no_workflow > 0 and candidates["matching"] == candidates["host_offline"] + no_workflow:
        return wire.WaitingReason.NO_CAPABLE_HOST.value
    free = candidates["matching"] > sum(candidates.get(name, 0) for name in CANDIDATE_COUNTS[1:])
    if free and candidates.get("team_at_quota"):
        return wire.WaitingReason.TEAM_AT_QUOTA.value
    if candidates["busy"] > 0:
        return wire.WaitingReason.MATCHING_DEVICES_BUSY.value
    return wire.WaitingReason.NO_SCHEDULABLE_DEVICE.value


def target_json(task: TaskRecord) -> str:
    """What a task waits for, as the scripts read it (``readWaiting``'s ARGV): its record's own
    target and workflow fields, uninterpreted, and its team (whose quota the read reports). Also
    the key under which tasks with the same target and team share one read."""
    fields = {"target_device": task.target_device, "driver": task.driver, "labels": task.labels,
              "kind": task.kind, "workflow": task.workflow, "team": task.team}
    return orjson.dumps({k: v for k, v in fields.items() if v is not None}).decode()


def candidates_from_reply(reply: list[Any]) -> dict[str, Any]:
    """The contract's ``candidates`` object from a script's counts: ``[truncated, count...,
    team at quota]``, the counts in the order of ``CANDIDATE_COUNTS``; ``team_at_quota`` (an extra
    field) says whether the task's team holds its quota."""
    counts: dict[str, Any] = dict(zip(CANDIDATE_COUNTS, (int(n) for n in reply[1:-1]), strict=True))
    if int(reply[0]) == 1:
        counts["truncated"] = True
    counts["team_at_quota"] = int(reply[-1]) == 1
    return counts
