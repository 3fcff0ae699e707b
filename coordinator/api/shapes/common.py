"""The vocabulary the shapes are written in (each from ``wire``, never restated), the error
answer, and the operations' answers."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, WithJsonSchema
from typing_extensions import TypedDict

import wire


def one_of(*values: object) -> WithJsonSchema:
    return WithJsonSchema({"enum": list(values)})


Id = Annotated[str, Field(pattern=f"^{wire.ID_PATTERN}$")]
# A time as the contract writes it (wire.iso_ms): RFC 3339, UTC, milliseconds.
Time = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
TaskStatus = Annotated[str, one_of(*wire.values(wire.TaskStatus))]
TaskKind = Annotated[str, one_of(*wire.values(wire.TaskKind))]
DeviceStatus = Annotated[str, one_of(*wire.values(wire.DeviceStatus))]
RunStatus = Annotated[str, one_of(*wire.values(wire.RunStatus))]
ResultStatus = Annotated[str, one_of(*wire.values(wire.ResultStatus))]
ProgressOutcome = Annotated[str, one_of(*wire.values(wire.ProgressOutcome))]
WaitingReason = Annotated[str, one_of(*wire.values(wire.WaitingReason))]
EventType = Annotated[str, one_of(*wire.values(wire.EventType))]
WebhookEvent = Annotated[str, one_of(*wire.values(wire.WebhookEvent))]
DeliveryState = Annotated[str, one_of(*wire.values(wire.DeliveryState))]
ErrorCode = Annotated[str, one_of(*wire.values(wire.ErrorCode))]
ContentType = Annotated[str, one_of(*wire.ARTIFACT_CONTENT_TYPES)]
Scopes = Annotated[list[str], WithJsonSchema({"type": "array", "uniqueItems": True, "minItems": 1, "items": {
    "enum": list(wire.values(wire.OperatorScope))}})]
# A run's counts: tasks by status, every status named.
StatusCounts = Annotated[dict[str, int], WithJsonSchema({
    "type": "object", "required": list(wire.values(wire.TaskStatus)),
    "properties": {status: {"type": "integer", "minimum": 0} for status in wire.values(wire.TaskStatus)}})]
Priority = Annotated[int, Field(ge=wire.PRIORITY_MIN, le=wire.PRIORITY_MAX)]
Count = Annotated[int, Field(ge=0)]



class ErrorDetail(TypedDict):
    code: ErrorCode
    message: str
    details: NotRequired[Any]


class Error(TypedDict):
    """Every refusal (coordinator/errors.py ``ApiError.body``)."""

    error: ErrorDetail


class Health(TypedDict):
    status: Literal["ok"]


class Ready(TypedDict):
    status: Literal["ok", "unavailable"]
    redis: bool
    scripts: NotRequired[bool]  # once Redis answered


class OpenApiDocument(TypedDict):
    openapi: str
    info: dict[str, str]
    paths: dict[str, Any]
    components: dict[str, Any]
