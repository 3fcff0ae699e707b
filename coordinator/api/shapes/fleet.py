"""What the operator API answers of the fleet: devices, hosts, workflows, teams."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from typing_extensions import TypedDict

from coordinator.api.bodies import Labels
from coordinator.api.shapes.common import Count, DeviceStatus, Id, Time, one_of


class Device(TypedDict):
    device_id: Id
    name: str  # an enrolled device's local id on its host (its serial), else its id
    host_id: Id
    driver: Id
    status: DeviceStatus
    attributes: dict[str, Any]
    labels: Labels
    host_online: bool
    reserved_by: Id | None
    disabled: bool
    disabled_reason: str | None
    disabled_at: Time | None
    host_name: NotRequired[str | None]
    device_name: NotRequired[str | None]


class Devices(TypedDict):
    devices: list[Device]
    next_cursor: str | None


class DeviceForgotten(TypedDict):
    device_id: Id
    forgotten: Literal[True]


class DeviceRun(TypedDict):
    """One run of a device; ``outcome`` is null while it runs."""

    task_id: Id | None
    attempt: int | None
    host_id: Id | None
    started_at: Time | None
    ended_at: Time | None
    outcome: str | None
    host_name: NotRequired[str | None]


class DeviceHistory(TypedDict):
    device_id: Id
    runs: list[DeviceRun]  # newest first


class AgentInstance(TypedDict):
    """One agent process heartbeating as a host (coordinator/api/agent_instances.py)."""

    instance_id: str
    hostname: str | None
    last_seen: Time


class Host(TypedDict):
    host_id: Id
    kind: Annotated[str, one_of("static", "enrolled")]
    online: bool
    last_seen: Time | None
    devices: Count
    revoked: bool
    draining: bool
    labels: Labels
    enrollment_token_id: Id | None
    hostname: str | None  # its agent's latest word, else what it enrolled with
    agent_version: str | None
    agent_instance_id: str | None
    conflicting_agent: AgentInstance | None  # another process heartbeating as this host
    created_at: Time | None


class Hosts(TypedDict):
    hosts: list[Host]
    next_cursor: str | None


class FleetWorkflow(TypedDict):
    name: Id
    hosts: list[Id]  # the online hosts that list it
    devices: Count  # their pooled devices


class Workflows(TypedDict):
    workflows: list[FleetWorkflow]


class Team(TypedDict):
    team: Id
    weight: int
    max_devices: int | None
    running: Count
    queued: Count
    device_seconds_1h: float


class Teams(TypedDict):
    teams: list[Team]
    next_cursor: str | None
