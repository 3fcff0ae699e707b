"""What the store reads back from Redis, as typed records (the scripts write these as JSON).

Times are milliseconds of the Redis clock. Fields that hold JSON the service stored as text
(labels, workflow, attributes, a host's report) stay text here; views decode them. Fields a
record gains later in its life (``device_id`` once assigned, ``result`` once reported) are
optional. Unknown fields are ignored, so a script may add one before the Python side reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import orjson

import wire

R = TypeVar("R")
_FIELDS: dict[type, frozenset[str]] = {}


def _from_dict(cls: type[R], data: dict[str, Any], **extra: Any) -> R:
    known = _FIELDS.get(cls)
    if known is None:
        known = _FIELDS[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]  # R is one of the dataclasses below
    return cls(**{k: v for k, v in data.items() if k in known}, **extra)


@dataclass(frozen=True)
class HostPrincipal:
    """A host whose credential was accepted: the host every host script acts for."""


    host_id: str
    kind: str  # "static" or "enrolled"
    # SHA-256 of the credential it presented: what revocation is bound to. Not a secret, but
    # kept out of reprs and logs all the same.
    digest: str = field(repr=False)


@dataclass(frozen=True)
class Actor:
    """The operator an operator script acts for, as every event it writes names it: ``name`` is
    the event's ``actor`` (a token's name), ``id`` its ``actor_id`` (the token's id). Both, as
    two live tokens may share a name: a rotation mints the new one under the old one's name."""

    name: str
    id: str


# The bootstrap admin token (COORDINATOR_ADMIN_TOKEN) has no token id: its id is its name.
ADMIN_ACTOR = Actor(wire.BOOTSTRAP_ACTOR, wire.BOOTSTRAP_ACTOR)


@dataclass(frozen=True)
class TaskRecord:
    id: str
    seq: int
    kind: str
    status: str  # a wire.TaskStatus value
    attempt: int
    max_attempts: int
    created_at: int
    updated_at: int
    goal: str | None = None
    workflow: str | None = None  # JSON {name, params}
    max_steps: int | None = None
    target_device: str | None = None  # a task aimed at one device...
    driver: str | None = None  # ...or at any device matching a selector
    labels: str | None = None  # JSON of the selector's labels
    idempotency_key: str | None = None
    device_id: str | None = None
    host_id: str | None = None
    lease_id: str | None = None
    cancel_requested: bool = False
    failure_reason: str | None = None
    result_report: str | None = None  # the host's report JSON {status, failure_reason, metadata}
    result: dict[str, Any] | None = None  # {recorded_at, attempt, task_status} of the last report
    started_at: int | None = None
    finished_at: int | None = None
    queue_timeout_ms: int | None = None
    queue_deadline: int | None = None  # when it fails queue_timeout if still queued
    created_by: str | None = None  # the operator's name (a token's, or "admin")
    creator_token: str | None = None  # the id of the operator token that created it, if one did
    team: str = wire.DEFAULT_TEAM  # (tasks stored before teams have none: the default's)
    priority: int = wire.PRIORITY_DEFAULT
    # The running attempt's latest progress {step_index, status, summary}, when read with it.
    progress: dict[str, Any] | None = None
    # A task of a run (lua/includes/runs.lua): the run, its place in it, its work item, the task
    # it reran and the one that replaced it, and its last attempt's last progress.
    run_id: str | None = None
    run_place: int | None = None
    run_work: str | None = None
    rerun_of: str | None = None
    replaced_by: str | None = None
    last_step: dict[str, Any] | None = None
    # A live session's (lua/includes/sessions.lua): its timeouts, whether (and why) it was asked
    # to end, and its last command or answer (ms).
    idle_timeout_ms: int | None = None
    max_duration_ms: int | None = None
    end_requested: bool = False
    end_reason: str | None = None
    active_at: int | None = None

    @classmethod
    def from_json(cls, raw: bytes | str, progress: bytes | str | None = None) -> TaskRecord:
        return _from_dict(cls, orjson.loads(raw), progress=None if progress is None else orjson.loads(progress))


@dataclass(frozen=True)
class DeviceRecord:
    """A pooled device, as the last accepted heartbeat of its host reported it."""

    device_id: str
    host_id: str
    driver: str
    status: str  # a wire.DeviceStatus value
    attributes: str = "{}"  # JSON
    labels: str = "{}"  # JSON

    @classmethod
    def from_json(cls, device_id: str, raw: bytes | str) -> DeviceRecord:
        return _from_dict(cls, orjson.loads(raw), device_id=device_id)


@dataclass(frozen=True)
class DeviceState:
    """A pooled device and what decides whether it could take work now, as operators see it."""

    device: DeviceRecord
    reserved_by: str | None  # the task holding it
    disabled: dict[str, Any] | None  # {reason, at} while disabled
    host_online: bool
    host_draining: bool
    host_stalled: bool  # its host let a claim time out and has not polled since
    # What people call it: an enrolled device's local id on its host (the serial, `pixel-a`),
    # from its enrollment; None for a static host's device, whose id is already its local id.
    local_id: str | None = None


@dataclass(frozen=True)
class HostRecord:
    host_id: str
    kind: str | None = None  # "static" or "enrolled"
    created_at: int | None = None
    labels: str | None = None  # JSON, from the enrollment token
    token_id: str | None = None
    hostname: str | None = None
    revoked: bool = False  # enrolled hosts; a static host's revocation follows its credential
    snapshot: dict[str, Any] = field(default_factory=dict)  # the last accepted heartbeat
    last_seen: int | None = None

    @classmethod
    def from_parts(cls, host_id: str, record: bytes | None, snapshot: bytes | None,
                   last_seen: float | None) -> HostRecord:
        return _from_dict(
            cls, orjson.loads(record) if record is not None else {},
            host_id=host_id,
            snapshot=orjson.loads(snapshot) if snapshot is not None else {},
            last_seen=None if last_seen is None else int(last_seen),
        )


@dataclass(frozen=True)
class EnrollmentToken:
    id: str
    created_at: int
    expires_at: int
    max_uses: int
    uses: int
    labels: str  # JSON
    revoked: bool

    @classmethod
    def from_json(cls, raw: bytes | str) -> EnrollmentToken:
        return _from_dict(cls, orjson.loads(raw))


@dataclass(frozen=True)
class OperatorToken:
    """An operator token as stored (its secret's digest is never read back into Python)."""

    id: str
    name: str
    scopes: list[str]
    created_at: int
    expires_at: int
    revoked: bool = False
    last_used_at: int | None = None
    created_by: str | None = None
    revoked_at: int | None = None
    team: str | None = None  # every task it creates belongs to it

    @classmethod
    def from_json(cls, raw: bytes | str) -> OperatorToken:
        return _from_dict(cls, orjson.loads(raw))


@dataclass(frozen=True)
class TeamShare:
    """A team's share of the fleet (PROTOCOL.md, "Sharing the fleet"): its settings, the devices
    its tasks hold and its queued tasks, as the scripts count them, and the device time its runs
    used over the last hour."""

    team: str
    weight: int
    max_devices: int | None
    running: int
    queued: int
    device_seconds_1h: float = 0.0


@dataclass(frozen=True)
class RunCounts:
    """A run's counts as the scripts keep them (keys.py, run_counts): by task status, and the
    breakdown by device and by work item."""

    by_status: dict[str, int]
    by_device: dict[str, dict[str, int]]
    by_work: dict[str, dict[str, int]]

    @classmethod
    def from_hash(cls, raw: Mapping[bytes | str, bytes] | list[bytes]) -> RunCounts:
        """From HGETALL's answer (a dict, or a script's flat list of fields and values)."""
        pairs = list(raw.items()) if isinstance(raw, Mapping) else list(zip(raw[::2], raw[1::2], strict=True))
        by_status = dict.fromkeys(wire.values(wire.TaskStatus), 0)
        by_device: dict[str, dict[str, int]] = {}
        by_work: dict[str, dict[str, int]] = {}
        for name, value in pairs:
            field_name = name.decode() if isinstance(name, bytes) else name
            count = int(value)
            if field_name in by_status:
                by_status[field_name] = count
            elif field_name[:2] in ("d\0", "w\0") and count:
                _, key, status = field_name.split("\0")
                (by_device if field_name[0] == "d" else by_work).setdefault(key, {})[status] = count
        return cls(by_status, by_device, by_work)


@dataclass(frozen=True)
class RunRecord:
    """A run (PROTOCOL.md, "Runs"), as lua/includes/runs.lua keeps it."""

    id: str
    seq: int
    status: str  # a wire.RunStatus value
    created_at: int
    places: int  # its tasks, one per place
    name: str | None = None
    team: str = wire.DEFAULT_TEAM
    priority: int = wire.PRIORITY_DEFAULT
    ended_at: int | None = None
    cancel_requested: bool = False
    created_by: str | None = None
    creator_token: str | None = None
    idempotency_key: str | None = None

    @classmethod
    def from_json(cls, raw: bytes | str) -> RunRecord:
        return _from_dict(cls, orjson.loads(raw))
