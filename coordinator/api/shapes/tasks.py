"""What the operator API answers of tasks: a task, a page of them, its events and artifacts."""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict

from coordinator.api.bodies import Labels
from coordinator.api.shapes.common import (
    ContentType,
    Count,
    EventType,
    Id,
    Priority,
    ResultStatus,
    TaskKind,
    TaskStatus,
    Time,
    WaitingReason,
)
from coordinator.api.shapes.host import WorkflowCall
from coordinator.api.shapes.sessions import SessionState


class TargetSelector(TypedDict):
    driver: Id
    labels: Labels


class Candidates(TypedDict):
    """Why a queued task waits (PROTOCOL.md, "Waiting work"): its matching devices, each counted
    under the first reason that keeps it from work (coordinator/state/wait_reasons.py)."""

    matching: Count
    busy: Count
    unavailable: Count
    host_offline: Count
    host_draining: Count
    disabled: Count
    host_stalled: Count
    no_workflow: Count
    truncated: NotRequired[bool]  # past COORDINATOR_CANDIDATES_SCANNED devices
    team_at_quota: bool


class TaskResult(TypedDict):
    """The attempt's result: the host's report, or the coordinator's own ending (cancel, the last
    lease expired)."""

    status: ResultStatus
    failure_reason: str | None
    metadata: dict[str, Any]
    retryable: NotRequired[bool]  # a failed report that asked for a retry
    attempt: int
    recorded_at: Time | None


class Task(TypedDict):
    task_id: Id
    kind: TaskKind
    status: TaskStatus
    attempt: int
    max_attempts: int
    device_id: Id | None  # where it runs, or the device it is aimed at
    host_id: Id | None
    selector: TargetSelector | None  # a task aimed at any device matching it
    max_steps: int | None
    idempotency_key: str | None
    cancel_requested: bool
    failure_reason: str | None  # once ended
    progress: dict[str, Any] | None  # the running attempt's latest
    result: TaskResult | None  # once ended
    waiting_reason: WaitingReason | None  # while queued
    candidates: Candidates | None  # while queued
    queue_timeout_s: int | None
    queue_deadline: Time | None  # while queued
    created_at: Time
    updated_at: Time
    finished_at: Time | None
    created_by: str | None  # the operator (a token's name, or "admin"); null before it was kept
    team: Id
    priority: Priority
    run_id: Id | None
    rerun_of: Id | None
    replaced_by: Id | None
    goal: NotRequired[str]  # a goal task's
    workflow: NotRequired[WorkflowCall]  # a workflow task's
    session: NotRequired[SessionState]  # a live session's
    # Beside the ids (coordinator/api/names.py): the host's name, the device's (null where the id is).
    host_name: NotRequired[str | None]
    device_name: NotRequired[str | None]


class TaskPage(TypedDict):
    tasks: list[Task]
    next_cursor: str | None


class Event(TypedDict):
    """A task event (lua/includes/events.lua ``taskEvent``). ``actor``: the operator whose request
    caused it (a token's name, or "admin"), ``actor_id`` its token's id; both null for what hosts
    and deadlines caused."""

    at: Time | None
    type: EventType
    task_id: Id
    attempt: int | None
    host_id: Id | None
    device_id: Id | None
    reason: str | None
    status: str | None
    actor: str | None
    actor_id: str | None
    # A session's command and command_answered events (lua/sendCommand, lua/pollCommands).
    command_id: NotRequired[Id | None]
    action: NotRequired[str | None]
    screen: NotRequired[str | None]
    host_name: NotRequired[str | None]
    device_name: NotRequired[str | None]


class Events(TypedDict):
    events: list[Event]


class Artifact(TypedDict):
    name: str
    attempt: int
    step_index: int | None
    size: Count
    sha256: str
    content_type: ContentType
    created_at: Time


class Artifacts(TypedDict):
    artifacts: list[Artifact]
