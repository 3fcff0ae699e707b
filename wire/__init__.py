"""The wire vocabulary of Tether's HTTP contract (PROTOCOL.md), defined once.

Status names, the id grammar, the limits a client must respect and the error codes. The
coordinator validates and answers with these, the agent's protocol client and the ``tether``
operator client speak them, and the OpenAPI document is built from them. It imports nothing of
the project, so ``coordinator/``, ``agent/`` and ``tether/`` can each depend on it without
depending on one another. The Lua scripts mirror the status names and error codes; a test keeps
them equal.
"""

from __future__ import annotations

import re
import time
from enum import Enum
from typing import TypeGuard, overload


class TaskStatus(str, Enum):
    QUEUED = "queued"
    ASSIGNED = "assigned"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The wire strings of the statuses a task never leaves (an Enum member hashes by its name, so a
# set of members would not find a plain "failed").
TERMINAL_STATUSES = frozenset(s.value for s in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED))


class ResultStatus(str, Enum):
    """What a host may report as an attempt's outcome."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DeviceStatus(str, Enum):
    AVAILABLE = "available"
    BUSY = "busy"
    UNAVAILABLE = "unavailable"


class TaskKind(str, Enum):
    GOAL = "goal"
    WORKFLOW = "workflow"
    SESSION = "session"  # a live session (PROTOCOL.md, "Live sessions")


class ProgressOutcome(str, Enum):
    """What a renewal did with the progress it carried."""

    STORED = "stored"
    OMITTED = "omitted"
    TRUNCATED = "truncated"
    REJECTED = "rejected"


class EventType(str, Enum):
    """What a task's history and the live feed record (GET /api/v1/tasks/{id}/events, /events)."""

    CREATED = "created"
    ASSIGNED = "assigned"
    UNASSIGNED = "unassigned"
    CLAIMED = "claimed"
    CANCEL_REQUESTED = "cancel_requested"
    LEASE_EXPIRED = "lease_expired"
    REQUEUED = "requeued"
    RESULT = "result"
    QUEUE_TIMEOUT = "queue_timeout"
    CANCELLED = "cancelled"
    # a session's (PROTOCOL.md, "Live sessions")
    COMMAND = "command"
    COMMAND_ANSWERED = "command_answered"
    END_REQUESTED = "end_requested"
    # the live feed only
    HOST_ONLINE = "host_online"
    HOST_OFFLINE = "host_offline"
    HOST_DRAINING = "host_draining"
    HOST_REVOKED = "host_revoked"
    DEVICE_DISABLED = "device_disabled"
    DEVICE_ENABLED = "device_enabled"
    DEVICE_FORGOTTEN = "device_forgotten"
    ENROLLMENT_TOKEN_CREATED = "enrollment_token_created"
    ENROLLMENT_TOKEN_REVOKED = "enrollment_token_revoked"
    OPERATOR_TOKEN_CREATED = "operator_token_created"
    OPERATOR_TOKEN_REVOKED = "operator_token_revoked"
    PROGRESS = "progress"  # a running attempt's new progress (step_index, status, summary)
    ARTIFACT = "artifact"  # an artifact stored (name, attempt, step_index, size, content_type)
    RUN_CREATED = "run_created"  # a run and its tasks created (run_id, name, team, tasks)
    RUN_ENDED = "run_ended"  # a run's last task ended (run_id, name, team, status)


class WaitingReason(str, Enum):
    """Why a queued task waits (PROTOCOL.md, "Waiting work")."""

    NO_MATCHING_DEVICE = "no_matching_device"
    NO_CAPABLE_HOST = "no_capable_host"
    TEAM_AT_QUOTA = "team_at_quota"
    MATCHING_DEVICES_BUSY = "matching_devices_busy"
    NO_SCHEDULABLE_DEVICE = "no_schedulable_device"


# Sharing the fleet (PROTOCOL.md): a task's priority, higher first; a team's weight; the team of a
# task nobody named one for.
PRIORITY_MIN, PRIORITY_MAX, PRIORITY_DEFAULT = -100, 100, 0
TEAM_WEIGHT_MIN, TEAM_WEIGHT_MAX = 1, 1000
DEFAULT_TEAM = "default"

# Runs (PROTOCOL.md, "Runs"): a run's status, and how many tasks one holds at most.
class RunStatus(str, Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


MAX_RUN_TASKS = 1000
# A matrix's create answer lists at most this many of the matching devices it left out (and counts
# them all in ``excluded_count``).
RUN_EXCLUDED_LISTED = 100

# A run's breakdown (GET /api/v1/runs/{id}) names each work item by at most this many bytes of
# UTF-8: its text when that fits, else its start, an ellipsis and 8 hex digits of the text's
# SHA-1 (lua/includes/runs.lua, workLabel). A goal is up to MAX_GOAL_CHARS characters.
RUN_WORK_LABEL_MAX_BYTES = 120


def values(enum: type[Enum]) -> tuple[str, ...]:
    """The wire strings of an enum, in declaration order."""
    return tuple(member.value for member in enum)


# Ids: host, device, local device, task, lease, enrollment, claim, workflow name.
ID_PATTERN = r"[A-Za-z0-9._:-]{1,128}"
_ID = re.compile(ID_PATTERN)


def is_valid_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


# Progress carried by a renewal (step_index, status, summary: coordinator/api/bodies/host.py Progress),
# the summary cut to the coordinator's bound (COORDINATOR_PROGRESS_SUMMARY_MAX_CHARS, this by
# default), the status short.
PROGRESS_SUMMARY_MAX_CHARS = 500
PROGRESS_STATUS_MAX_CHARS = 32

# Artifacts (PROTOCOL.md, the upload route): a name is 1..128 of these characters, and its
# Content-Type one of these media types.
ARTIFACT_NAME_PATTERN = r"[A-Za-z0-9._-]{1,128}"
ARTIFACT_CONTENT_TYPES = ("image/png", "image/jpeg", "image/webp", "text/plain", "application/json", "video/mp4")

MAX_JSON_DEPTH = 32
MAX_GOAL_CHARS = 4000
FAILURE_REASON_MAX_CHARS = 256
HOST_TOKEN_MIN_CHARS = 32
HOST_TOKEN_MAX_CHARS = 256
ENROLLMENT_TOKEN_PREFIX = "tet_"
OPERATOR_TOKEN_PREFIX = "tto_"
# An operator token lives between a minute and a year: long enough to be handed over, short
# enough that a forgotten one ends. Ninety days unless its creator says otherwise.
OPERATOR_TOKEN_TTL_MIN_S = 60
OPERATOR_TOKEN_TTL_MAX_S = 366 * 24 * 3600
OPERATOR_TOKEN_TTL_DEFAULT_S = 90 * 24 * 3600


class OperatorScope(str, Enum):
    """What an operator token may do (PROTOCOL.md, "Operator scopes"); ``admin`` may do all."""

    READ = "read"
    SUBMIT = "submit"
    CONTROL = "control"
    ADMIN = "admin"


class WebhookEvent(str, Enum):
    """What a webhook may be told of (PROTOCOL.md, "Webhooks")."""

    TASK_ENDED = "task.ended"
    RUN_ENDED = "run.ended"
    HOST_OFFLINE = "host.offline"
    DEVICE_DISABLED = "device.disabled"


class DeliveryState(str, Enum):
    """Where one webhook delivery stands: tried until a 2xx (``delivered``) or until its retries
    run out (``failed``)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


# A webhook's signing secret carries this prefix (as tokens do theirs), so a scanner finds a leak.
WEBHOOK_SECRET_PREFIX = "whsec_"
# The headers of a delivery (PROTOCOL.md, "Webhooks").
WEBHOOK_SIGNATURE_HEADER = "Tether-Signature"
WEBHOOK_DELIVERY_HEADER = "Tether-Delivery"
# Webhooks a deployment may hold, and the deliveries of each that stay listed.
WEBHOOKS_MAX = 100
WEBHOOK_DELIVERIES_KEPT = 100
WEBHOOK_URL_MAX_CHARS = 2048

# The actor of an event the bootstrap admin token (COORDINATOR_ADMIN_TOKEN) caused; no operator
# token may take this name.
BOOTSTRAP_ACTOR = "admin"

# Live sessions (PROTOCOL.md): a session's timeouts (s: least, most, default), the commands that
# may wait at once, how long an operator's request waits for an answer (s), how many commands
# a session's recording keeps (the oldest dropped), how many elements an observation holds.
SESSION_IDLE_TIMEOUT_S = (10, 3600, 300)
SESSION_MAX_DURATION_S = (60, 86400, 3600)
SESSION_COMMANDS_WAITING_MAX = 16
SESSION_COMMAND_WAIT_MAX_S = 60
SESSION_COMMANDS_KEPT = 1000
SESSION_ELEMENTS_MAX = 500
# The most bytes of one answer the recording keeps (its JSON): past it, its last elements go.
SESSION_ANSWER_MAX_BYTES = 64 * 1024
# The end reasons a session's result carries (metadata.end_reason).
SESSION_END_REASONS = ("ended", "idle_timeout", "max_duration")

# What the coordinator keeps: a task's history, a device's runs, the live feed.
TASK_EVENTS_KEPT = 200
DEVICE_RUNS_KEPT = 1000
FEED_EVENTS_KEPT = 10_000


class ErrorCode(str, Enum):
    """Every ``error.code`` the contract names."""

    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    REQUEST_HEADER_TOO_LARGE = "request_header_too_large"
    REQUEST_TIMEOUT = "request_timeout"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    # conflicts (409)
    LEASE_EXPIRED = "lease_expired"
    LEASE_REPLACED = "lease_replaced"
    LEASE_NOT_OWNED = "lease_not_owned"
    STALE_ATTEMPT = "stale_attempt"
    RESULT_CONFLICT = "result_conflict"
    DEVICE_CONFLICT = "device_conflict"
    UNKNOWN_DEVICE = "unknown_device"
    DRIVER_CONFLICT = "driver_conflict"
    DEVICE_LIMIT = "device_limit"
    TASK_TERMINAL = "task_terminal"
    ENROLLMENT_CONFLICT = "enrollment_conflict"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    DEVICE_BUSY = "device_busy"
    TOKEN_LIMIT = "token_limit"
    ARTIFACT_CONFLICT = "artifact_conflict"
    ARTIFACT_LIMIT = "artifact_limit"
    NO_MATCHING_DEVICE = "no_matching_device"  # a run's matrix matches no device
    WEBHOOK_LIMIT = "webhook_limit"
    # live sessions
    NOT_A_SESSION = "not_a_session"
    SESSION_NOT_RUNNING = "session_not_running"
    SESSION_ENDED = "session_ended"
    TOO_MANY_COMMANDS = "too_many_commands"


@overload
def iso_ms(ms: int) -> str: ...
@overload
def iso_ms(ms: None) -> None: ...
@overload
def iso_ms(ms: int | None) -> str | None: ...
def iso_ms(ms: int | None) -> str | None:
    """A time in milliseconds since the epoch as the contract writes it: RFC 3339 UTC with
    milliseconds, e.g. ``2026-12-02T08:00:00.123Z``; ``None`` stays ``None``."""
    if ms is None:
        return None
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
