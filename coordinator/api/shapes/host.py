"""What the host API answers: heartbeat, claim, renewals, results, artifact uploads, enrollment."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

import wire
from coordinator.api.shapes.common import ContentType, Count, Id, ProgressOutcome, ResultStatus, TaskKind, Time, one_of
from coordinator.api.shapes.sessions import SessionSettings


class Heartbeated(TypedDict):
    host_id: Id
    devices: Count
    heartbeat_interval_s: int
    draining: bool


class WorkflowCall(TypedDict):
    """A workflow task's work: the workflow's name and its parameters."""

    name: Id
    params: dict[str, Any]


class Assignment(TypedDict):
    task_id: Id
    attempt: int
    lease_id: Id
    lease_ttl_ms: int
    lease_expires_at: Time
    device_id: Id
    kind: TaskKind
    max_steps: int | None
    goal: NotRequired[str]  # a goal task's
    workflow: NotRequired[WorkflowCall]  # a workflow task's
    session: NotRequired[SessionSettings]  # a live session's


class Renewed(TypedDict):
    lease_ttl_ms: int
    lease_expires_at: Time
    cancel_requested: bool
    progress: ProgressOutcome


class LeaseRenewed(TypedDict):
    lease_id: Id
    status: Literal[200]
    lease_ttl_ms: int
    lease_expires_at: Time
    cancel_requested: bool
    progress: ProgressOutcome


class LeaseRefused(TypedDict):
    lease_id: Id
    status: Literal[409]
    code: Annotated[str, one_of("lease_expired", "lease_replaced", "lease_not_owned")]


class RenewedBatch(TypedDict):
    leases: list[LeaseRenewed | LeaseRefused]  # in the order sent


class Recorded(TypedDict):
    task_id: Id
    attempt: int
    status: ResultStatus
    task_status: Annotated[str, one_of("succeeded", "failed", "cancelled", "queued")]  # queued: retried
    recorded_at: Time
    replayed: bool
    # Only when the result asked for it (`next: true`): the freed device's next assignment, under
    # a fresh lease, or null (PROTOCOL.md, results, "eager dispatch").
    next_assignment: NotRequired[Assignment | None]


class ArtifactStored(TypedDict):
    name: Annotated[str, Field(pattern=f"^{wire.ARTIFACT_NAME_PATTERN}$")]
    size: Count
    sha256: str
    content_type: ContentType
    step_index: int | None


class Enrolled(TypedDict):
    host_id: Id
    created: bool


class DeviceEnrolled(TypedDict):
    local_id: Id
    driver: Id
    device_id: Id


class DevicesEnrolled(TypedDict):
    devices: list[DeviceEnrolled]
