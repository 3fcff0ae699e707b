"""The bodies of the host API (``/internal/v1``): enrollment, heartbeats, claims, renewals,
results, and a live session's host poll with its answers."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
)
from pydantic_core import PydanticCustomError

import wire
from coordinator.api.bodies.values import (
    HOSTNAME_MAX_CHARS,
    INT32_MAX,
    MAX_CAPABILITY_NAMES,
    MAX_REASON_CHARS,
    NO_CONTROL,
    PER_HOST_DEVICES,
    Cleaned,
    FreeObject,
    HostBody,
    Id,
    Integral,
    Labels,
    Text,
    clean_text,
)


def _unique(field: str) -> Any:
    """A validator of a list of objects keyed by ``field``: each key at most once."""
    def check(items: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for item in items:
            key = getattr(item, field)
            if key in seen:
                raise PydanticCustomError("duplicate", "{field} {key} appears twice", {"field": field, "key": key})
            seen.add(key)
        return items
    return AfterValidator(check)


def _listed_once(field: str) -> dict[str, Any]:
    """What the document says of a list keyed by ``field``: JSON Schema has no keyword for "each
    key once", so uniqueItems (no two identical entries) and the words."""
    return {"uniqueItems": True, "description": f"each {field} at most once: a list naming one twice is "
                                                f"400 invalid_request"}


# -- host API --------------------------------------------------------------------------------


class Enroll(HostBody):
    """Bootstrap a managed host (POST /internal/v1/enroll). The agent generates the id and the host
    token and keeps both before calling, so a retry is the identical request."""

    enrollment_id: Id
    # A secret, kept as sent: stripped, two tokens would share a digest, and the one stored would
    # not be the one the agent holds (a control character cannot travel in its bearer header).
    host_token: Annotated[str, StringConstraints(min_length=wire.HOST_TOKEN_MIN_CHARS,
                                                 max_length=wire.HOST_TOKEN_MAX_CHARS, pattern=NO_CONTROL)]
    hostname: Annotated[Text, Field(max_length=HOSTNAME_MAX_CHARS), Cleaned] | None = None
    labels: Labels | None = None


class EnrollDevice(HostBody):
    local_id: Id
    driver: Id
    attributes: FreeObject | None = None


class DeviceEnroll(HostBody):
    """Enroll local devices (POST /internal/v1/hosts/{host_id}/devices/enroll)."""

    devices: Annotated[list[EnrollDevice], Field(min_length=1, json_schema_extra={
        PER_HOST_DEVICES: True, **_listed_once("local_id")}), _unique("local_id")]


class HeartbeatDevice(HostBody):
    device_id: Id
    driver: Id
    status: Annotated[wire.DeviceStatus, Strict(False)]
    attributes: FreeObject | None = None
    labels: Labels | None = None


class Capabilities(HostBody):
    """What a host can run, each kind a list of names; a kind left out is none."""

    workflows: Annotated[list[Id], Field(max_length=MAX_CAPABILITY_NAMES)] = []
    planners: Annotated[list[Id], Field(max_length=MAX_CAPABILITY_NAMES)] = []
    sessions: bool = False  # it runs live sessions (PROTOCOL.md, "Live sessions")


_AgentWord = Annotated[str, StringConstraints(max_length=HOSTNAME_MAX_CHARS), AfterValidator(clean_text)]


class Agent(HostBody):
    """Who sends the heartbeat. An agent that sends no capabilities is taken to run anything."""

    version: _AgentWord | None = None
    hostname: _AgentWord | None = None
    capabilities: Capabilities | None = None
    # One agent process: two of them heartbeating as one host are told apart by it
    # (coordinator/api/agent_instances.py).
    instance_id: Id | None = None


class Heartbeat(HostBody):
    """The complete device snapshot (PUT /internal/v1/hosts/{host_id}/heartbeat)."""

    devices: Annotated[list[HeartbeatDevice], Field(json_schema_extra={
        PER_HOST_DEVICES: True, **_listed_once("device_id")}), _unique("device_id")]
    agent: Agent | None = None


class Claim(HostBody):
    """Long-poll for one assignment (POST /internal/v1/hosts/{host_id}/claim); the body may be left
    out."""

    body_optional = True

    claim_id: Id | None = None


class Progress(BaseModel):
    """A renewal's progress: these fields and no other. Anything else is answered rejected and not
    stored, never a failed renewal."""

    model_config = ConfigDict(extra="forbid", strict=True)

    step_index: Annotated[int, Field(ge=0, le=INT32_MAX), Integral]
    status: Annotated[str, StringConstraints(min_length=1, max_length=wire.PROGRESS_STATUS_MAX_CHARS),
                      AfterValidator(clean_text)]
    summary: Annotated[str, AfterValidator(clean_text)] = ""


class Renew(HostBody):
    """Renew a lease, with progress (POST /internal/v1/hosts/{host_id}/leases/{lease_id}/renew)."""

    task_id: Id
    attempt: Annotated[int, Field(ge=1, le=INT32_MAX), Integral]
    # Any value: judged by Progress after the body is read, so a bad one fails nothing.
    progress: Any = Field(default=None, description="a Progress: step_index, status, summary; anything "
                                                    "else is answered rejected and not stored, never a "
                                                    "failed renewal")


class RenewalEntry(Renew):
    """One lease of a batch renewal: a single renewal's body, with the lease the path names there."""

    lease_id: Id


class Renewals(HostBody):
    """Renew every lease of a host at once (POST /internal/v1/hosts/{host_id}/renewals)."""

    leases: Annotated[list[RenewalEntry], Field(min_length=1, json_schema_extra={PER_HOST_DEVICES: True})]


class Result(HostBody):
    """A terminal result (POST /internal/v1/hosts/{host_id}/results)."""

    task_id: Id
    attempt: Annotated[int, Field(ge=1, le=INT32_MAX), Integral]
    lease_id: Id
    status: Annotated[wire.ResultStatus, Strict(False)]
    failure_reason: Annotated[Text, Field(max_length=wire.FAILURE_REASON_MAX_CHARS), Cleaned] | None = None
    metadata: FreeObject | None = None
    retryable: bool | None = Field(default=None, description="a failed report asking for another attempt")
    next: bool | None = Field(default=None, description="eager dispatch: the agent can run another assignment on "
                              "this device at once; the answer's next_assignment carries it, or null")



class Observation(HostBody):
    """What the device showed after a command: the screen's artifact name and size, its elements."""

    screen: Annotated[str, StringConstraints(pattern=f"^{wire.ARTIFACT_NAME_PATTERN}$")] | None = None
    width: Annotated[int, Field(ge=0, le=INT32_MAX), Integral] | None = None
    height: Annotated[int, Field(ge=0, le=INT32_MAX), Integral] | None = None
    elements: Annotated[list[FreeObject], Field(max_length=wire.SESSION_ELEMENTS_MAX)] = []


class CommandAnswer(HostBody):
    command_id: Id
    status: Literal["done", "failed"]
    error: Annotated[str, StringConstraints(max_length=MAX_REASON_CHARS * 4), AfterValidator(clean_text)] | None = None
    duration_ms: Annotated[int, Field(ge=0, le=INT32_MAX), Integral] | None = None
    observation: Observation | None = None


class CommandsPoll(HostBody):
    """A session's host poll (POST .../leases/{lease_id}/commands): the answers of the commands it
    ran, then the next commands are returned."""

    body_optional = False
    task_id: Id
    attempt: Annotated[int, Field(ge=1, le=INT32_MAX), Integral]
    answers: Annotated[list[CommandAnswer], Field(max_length=wire.SESSION_COMMANDS_WAITING_MAX)] = []


