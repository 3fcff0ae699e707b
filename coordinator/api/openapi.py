"""The OpenAPI 3.1 document of the contract (PROTOCOL.md), built from the route table itself
(``coordinator/api/routes.py``) and the wire vocabulary (``wire``), so neither is written twice."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Protocol

import wire
from coordinator import __version__
from coordinator.api import limits
from coordinator.api.events import FILTERS as FEED_FILTERS


class Endpoint(Protocol):
    """What the document needs of a route (``coordinator.api.routes.Endpoint`` is one)."""

    method: str
    path: str
    summary: str
    security: str | None  # the bearer principal, or None for an open route
    scope: str | None  # an operator route's required scope ("any": any operator credential)
    request: str | None  # the schema name of the JSON body
    responses: dict[int, str | None]  # status -> schema name

_ID = {"type": "string", "pattern": f"^{wire.ID_PATTERN}$"}
# C0 controls, tab and newline aside (coordinator/api/validation.py): a key, a label or a secret that
# holds one is refused; free text loses them, and must hold something else.
_NO_CONTROL = "^[^\\x00-\\x08\\x0b-\\x1f]*$"
_SOME_TEXT = "[^\\x00-\\x08\\x0b-\\x1f]"
_SHORT = {"type": "string", "maxLength": limits.LABEL_MAX_CHARS, "pattern": _NO_CONTROL}
_LABELS = {"type": "object", "maxProperties": limits.LABELS_MAX_ITEMS,
           "propertyNames": {**_SHORT, "minLength": 1}, "additionalProperties": _SHORT}
_SCOPES = {"type": "array", "uniqueItems": True, "minItems": 1,
           "items": {"enum": list(wire.values(wire.OperatorScope))}}
_INT32 = 2**31 - 1  # validation.Body.integer's bound unless a field says less


def _text(max_len: int) -> dict[str, Any]:
    """Free text as ``Body.text`` reads it: at most ``max_len`` characters as sent, not only
    controls."""
    return {"type": "string", "minLength": 1, "maxLength": max_len, "pattern": _SOME_TEXT}


def _integer(low: int, high: int = _INT32, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, **extra}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """A host API field the server reads as absent when null (agents send null for "none")."""
    return {"anyOf": [schema, {"type": "null"}]}


def _strict(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """An operator body: these fields and no other (an unknown one is 400 naming it), none null."""
    schema = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = required
    return schema


def request_schemas(max_devices: int) -> dict[str, Any]:
    """The request bodies, with the bounds the handlers enforce (``coordinator/api/limits.py``,
    ``wire``, and the deployment's ``COORDINATOR_MAX_DEVICES_PER_HOST``)."""
    free_object = _nullable({"type": "object"})
    task_fields = {
        "kind": {"enum": list(wire.values(wire.TaskKind))},
        "goal": _text(wire.MAX_GOAL_CHARS),
        "workflow": _strict({"name": _ID, "params": {"type": "object"}}, ["name"]),
        "device_id": _ID,
        "selector": _strict({"driver": _ID, "labels": _LABELS}, ["driver"]),
        "max_attempts": _integer(1, limits.MAX_ATTEMPTS, default=limits.DEFAULT_MAX_ATTEMPTS),
        "max_steps": _integer(1, limits.MAX_STEPS),
        "idempotency_key": _ID,
        "queue_timeout_s": _integer(1, limits.MAX_QUEUE_TIMEOUT_S),
    }
    assert set(task_fields) == limits.TASK_FIELDS
    return {
        "Enroll": {"type": "object", "required": ["enrollment_id", "host_token"], "properties": {
            "enrollment_id": _ID,
            "host_token": {"type": "string", "minLength": wire.HOST_TOKEN_MIN_CHARS,
                           "maxLength": wire.HOST_TOKEN_MAX_CHARS, "pattern": _NO_CONTROL},
            "hostname": _nullable(_text(limits.HOSTNAME_MAX_CHARS)), "labels": _nullable(_LABELS)}},
        "DeviceEnroll": {"type": "object", "required": ["devices"], "properties": {"devices": {
            "type": "array", "minItems": 1, "maxItems": max_devices,
            "items": {"type": "object", "required": ["local_id", "driver"], "properties": {
                "local_id": _ID, "driver": _ID, "attributes": free_object}}}}},
        "Heartbeat": {"type": "object", "required": ["devices"], "properties": {
            "devices": {"type": "array", "maxItems": max_devices, "items": {
                "type": "object", "required": ["device_id", "driver", "status"], "properties": {
                    "device_id": _ID, "driver": _ID, "status": {"enum": list(wire.values(wire.DeviceStatus))},
                    "attributes": free_object, "labels": _nullable(_LABELS)}}},
            "agent": _nullable({"type": "object", "properties": {
                "version": {"type": "string"}, "hostname": {"type": "string"},
                "capabilities": _nullable({"type": "object", "properties": {
                    kind: {"type": "array", "maxItems": limits.MAX_CAPABILITY_NAMES, "items": _ID}
                    for kind in limits.CAPABILITY_KINDS}})}})}},
        "Claim": {"type": "object", "properties": {"claim_id": _nullable(_ID)}},
        # progress: any value; a bad one is answered "rejected", never a failed renewal.
        "Renew": {"type": "object", "required": ["task_id", "attempt"], "properties": {
            "task_id": _ID, "attempt": _integer(1),
            "progress": {"description": "step_index, status, summary; anything else is rejected, not stored"}}},
        "Result": {"type": "object", "required": ["task_id", "attempt", "lease_id", "status"], "properties": {
            "task_id": _ID, "attempt": _integer(1), "lease_id": _ID,
            "status": {"enum": list(wire.values(wire.ResultStatus))},
            "failure_reason": _nullable(_text(wire.FAILURE_REASON_MAX_CHARS)), "metadata": free_object,
            "retryable": _nullable({"type": "boolean", "default": False})}},
        "TaskCreate": _strict(task_fields, ["kind"], allOf=[
            # a goal task has a goal and no workflow, a workflow task the reverse...
            {"oneOf": [
                {"properties": {"kind": {"const": "goal"}}, "required": ["goal"], "not": {"required": ["workflow"]}},
                {"properties": {"kind": {"const": "workflow"}}, "required": ["workflow"], "not": {"required": ["goal"]}},
            ]},
            # ...and exactly one target
            {"oneOf": [{"required": ["device_id"]}, {"required": ["selector"]}]},
        ]),
        "DeviceDisable": _strict({"reason": _text(limits.MAX_REASON_CHARS)}),
        "TokenCreate": _strict({
            "ttl_s": _integer(1, limits.MAX_TOKEN_TTL_S, default=limits.DEFAULT_TOKEN_TTL_S),
            "max_uses": _integer(1, limits.MAX_TOKEN_USES, default=1), "labels": _LABELS}),
        "OperatorTokenCreate": _strict({
            "name": {**_ID, "not": {"const": wire.BOOTSTRAP_ACTOR}}, "scopes": _SCOPES,
            "ttl_s": _integer(wire.OPERATOR_TOKEN_TTL_MIN_S, wire.OPERATOR_TOKEN_TTL_MAX_S,
                              default=wire.OPERATOR_TOKEN_TTL_DEFAULT_S)}, ["name", "scopes"]),
    }


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"enum": list(wire.values(wire.ErrorCode))}, "message": {"type": "string"},
            "details": {}}}},
    },
    "Enrolled": {"type": "object", "properties": {"host_id": _ID, "created": {"type": "boolean"}}},
    "Assignment": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "lease_id": _ID, "lease_ttl_ms": {"type": "integer"},
        "lease_expires_at": {"type": "string", "format": "date-time"}, "device_id": _ID,
        "kind": {"enum": list(wire.values(wire.TaskKind))}, "goal": {"type": "string"},
        "workflow": {"type": "object", "properties": {"name": _ID, "params": {"type": "object"}}},
        "max_steps": {"type": ["integer", "null"]}}},
    "Renewed": {"type": "object", "properties": {
        "lease_ttl_ms": {"type": "integer"}, "lease_expires_at": {"type": "string"},
        "cancel_requested": {"type": "boolean"},
        "progress": {"enum": list(wire.values(wire.ProgressOutcome))}}},
    "Recorded": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "status": {"type": "string"},
        "task_status": {"enum": ["succeeded", "failed", "cancelled", "queued"]},
        "recorded_at": {"type": "string"}, "replayed": {"type": "boolean"}}},
    "Heartbeated": {"type": "object", "properties": {
        "host_id": _ID, "devices": {"type": "integer"}, "heartbeat_interval_s": {"type": "integer"},
        "draining": {"type": "boolean"}}},
    "Task": {"type": "object", "properties": {
        "task_id": _ID, "kind": {"type": "string"},
        "status": {"enum": list(wire.values(wire.TaskStatus))},
        "attempt": {"type": "integer"}, "max_attempts": {"type": "integer"},
        "device_id": {"type": ["string", "null"]}, "host_id": {"type": ["string", "null"]},
        "progress": {"type": ["object", "null"]}, "result": {"type": ["object", "null"]},
        "cancel_requested": {"type": "boolean"}, "created_at": {"type": "string"},
        "waiting_reason": {"enum": [*wire.values(wire.WaitingReason), None]},
        "candidates": {"type": ["object", "null"], "properties": {
            name: {"type": "integer"} for name in (
                "matching", "busy", "unavailable", "host_offline", "host_draining", "disabled", "host_stalled",
                "no_workflow")}},
        "queue_timeout_s": {"type": ["integer", "null"]}}},
    "Events": {"type": "object", "properties": {"events": {"type": "array", "items": {"type": "object", "properties": {
        "at": {"type": "string"}, "type": {"enum": list(wire.values(wire.EventType))}, "task_id": _ID,
        "attempt": {"type": "integer"}, "host_id": {"type": ["string", "null"]},
        "device_id": {"type": ["string", "null"]}, "reason": {"type": ["string", "null"]},
        "status": {"type": ["string", "null"]}}}}}},
    "TaskPage": {"type": "object", "properties": {
        "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/Task"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "Device": {"type": "object", "properties": {
        "device_id": _ID, "name": {"type": "string"}, "host_id": _ID, "driver": _ID, "status": {"type": "string"},
        "attributes": {"type": "object"}, "labels": _LABELS, "host_online": {"type": "boolean"},
        "reserved_by": {"type": ["string", "null"]}, "disabled": {"type": "boolean"},
        "disabled_reason": {"type": ["string", "null"]}}},
    "Devices": {"type": "object", "properties": {
        "devices": {"type": "array", "items": {"$ref": "#/components/schemas/Device"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "Runs": {"type": "object", "properties": {"runs": {"type": "array", "items": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "host_id": _ID, "started_at": {"type": "string"},
        "ended_at": {"type": ["string", "null"]}, "outcome": {"type": ["string", "null"]}}}}}},
    "Host": {"type": "object", "properties": {
        "host_id": _ID, "kind": {"enum": ["static", "enrolled"]}, "online": {"type": "boolean"},
        "last_seen": {"type": ["string", "null"]}, "devices": {"type": "integer"},
        "revoked": {"type": "boolean"}, "draining": {"type": "boolean"}, "labels": _LABELS,
        "hostname": {"type": ["string", "null"]}, "enrollment_token_id": {"type": ["string", "null"]}}},
    "Hosts": {"type": "object", "properties": {
        "hosts": {"type": "array", "items": {"$ref": "#/components/schemas/Host"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "Workflows": {"type": "object", "properties": {"workflows": {"type": "array", "items": {
        "type": "object", "properties": {"name": _ID, "hosts": {"type": "array", "items": _ID},
                                         "devices": {"type": "integer", "minimum": 0}}}}}},
    "TokenCreated": {"type": "object", "properties": {
        "id": _ID, "token": {"type": "string"}, "expires_at": {"type": "string"}}},
    "Tokens": {"type": "object", "properties": {
        "enrollment_tokens": {"type": "array", "items": {"type": "object"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "OperatorToken": {"type": "object", "properties": {
        "id": _ID, "name": _ID, "scopes": _SCOPES, "created_at": {"type": "string"},
        "expires_at": {"type": "string"}, "last_used_at": {"type": ["string", "null"]},
        "created_by": {"type": ["string", "null"]}, "expired": {"type": "boolean"},
        "revoked": {"type": "boolean"}}},
    "OperatorTokenCreated": {"type": "object", "properties": {
        "id": _ID, "name": _ID, "scopes": _SCOPES, "token": {"type": "string", "pattern": f"^{wire.OPERATOR_TOKEN_PREFIX}"},
        "expires_at": {"type": "string"}}},
    "OperatorTokens": {"type": "object", "properties": {
        "operator_tokens": {"type": "array", "items": {"$ref": "#/components/schemas/OperatorToken"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "ArtifactStored": {"type": "object", "properties": {
        "name": {"type": "string", "pattern": f"^{wire.ARTIFACT_NAME_PATTERN}$"}, "size": {"type": "integer"},
        "sha256": {"type": "string"}, "content_type": {"enum": list(wire.ARTIFACT_CONTENT_TYPES)},
        "step_index": {"type": ["integer", "null"]}}},
    "Artifacts": {"type": "object", "properties": {"artifacts": {"type": "array", "items": {
        "type": "object", "properties": {
            "name": {"type": "string"}, "attempt": {"type": "integer"}, "step_index": {"type": ["integer", "null"]},
            "size": {"type": "integer"}, "sha256": {"type": "string"},
            "content_type": {"enum": list(wire.ARTIFACT_CONTENT_TYPES)}, "created_at": {"type": "string"}}}}}},
    "Me": {"type": "object", "properties": {
        "name": {"type": "string"}, "scopes": _SCOPES, "expires_at": {"type": ["string", "null"]},
        "token_id": {"type": ["string", "null"]}}},
}

def _limit(default: int, high: int) -> dict[str, Any]:
    return _integer(1, high, default=default)


_STATUS = {"enum": list(wire.values(wire.TaskStatus))}
_DEVICE_STATUS = {"enum": list(wire.values(wire.DeviceStatus))}
_OFFSET_PAGE = {"limit": _limit(*limits.TOKENS_LIMIT), "cursor": _integer(0, limits.OFFSET_CURSOR_MAX)}
# A feed position, <ms>-<seq> or <ms> (coordinator/feed.py StreamId); empty is "from now".
_STREAM_ID = {"type": "string", "pattern": "^([0-9]{1,19}(-[0-9]{1,19})?)?$"}
# The artifact routes (coordinator/api/artifacts.py): the upload takes the raw bytes and names its
# lease's task and attempt in the query; a read answers the bytes in their own type.
_UPLOAD = ("put", "/internal/v1/hosts/{host_id}/leases/{lease_id}/artifacts/{name}")
_ARTIFACT_BYTES = ("get", "/api/v1/tasks/{task_id}/artifacts/{name}")
_REQUIRED_QUERY: dict[tuple[str, str], frozenset[str]] = {_UPLOAD: frozenset({"task_id", "attempt"})}
_ARTIFACT_NAME = {"type": "string", "pattern": f"^{wire.ARTIFACT_NAME_PATTERN}$"}
# The query parameters of each operation that takes some, as the handlers read them.
_QUERY: dict[tuple[str, str], dict[str, Any]] = {
    # Any finite number of seconds; more than COORDINATOR_CLAIM_WAIT_MAX_S waits that long.
    ("post", "/internal/v1/hosts/{host_id}/claim"): {"wait_s": {"type": "number", "minimum": 0,
                                                                "maximum": sys.float_info.max}},
    ("get", "/api/v1/tasks"): {"status": _STATUS, "host_id": _ID, "device_id": _ID,
                               "limit": _limit(*limits.TASKS_LIMIT),
                               "cursor": _integer(0, limits.TASK_CURSOR_MAX)},
    ("get", "/api/v1/devices"): {"host_id": _ID, "driver": _ID, "status": _DEVICE_STATUS,
                                 "limit": _limit(*limits.DEVICES_LIMIT),
                                 # opaque, printable ASCII, as the previous page gave it
                                 "cursor": {"type": "string", "minLength": 1, "maxLength": limits.CURSOR_MAX_CHARS,
                                            "pattern": "^[ -~]*$"}},
    ("get", "/api/v1/devices/{device_id}/history"): {"limit": _limit(100, wire.DEVICE_RUNS_KEPT)},
    ("get", "/api/v1/hosts"): {"limit": _limit(*limits.HOSTS_LIMIT), "cursor": _ID},
    ("get", "/api/v1/enrollment-tokens"): _OFFSET_PAGE,
    ("get", "/api/v1/operator-tokens"): _OFFSET_PAGE,
    ("get", "/api/v1/events"): {**dict.fromkeys(FEED_FILTERS, _ID), "last_event_id": _STREAM_ID},
    _UPLOAD: {"task_id": _ID, "attempt": _integer(1), "step_index": _integer(0)},
    _ARTIFACT_BYTES: {"attempt": _integer(1)},
}
_HEADERS: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/api/v1/events"): {"Last-Event-ID": _STREAM_ID},
}
_PATH_PARAMETERS = ("host_id", "lease_id", "task_id", "token_id", "device_id")
# Bodies a client may leave out (read as {}).
_OPTIONAL_BODIES = frozenset({"Claim", "TokenCreate", "DeviceDisable"})
# Content of the successful answers that are not JSON.
_CONTENT: dict[tuple[str, str], str] = {("get", "/api/v1/events"): "text/event-stream"}


def _errors(endpoint: Endpoint, has_parameters: bool) -> dict[int, str]:
    """Every error status the route can answer, beyond those its table entry names."""
    errors = {405: "Error", 500: "Error", 503: "Error"}  # any route (503: Redis unreachable)
    if has_parameters or endpoint.request:
        errors[400] = "Error"  # a malformed id, query value or body
    if any("{" + name + "}" in endpoint.path for name in _PATH_PARAMETERS):
        errors[404] = "Error"  # an id that names nothing, or a path no route matches
    if endpoint.request:
        errors[413] = "Error"
    if endpoint.security:
        errors.update({401: "Error", 429: "Error"})  # refused credential; too many from one address
        if endpoint.security != "enrollment":
            errors[403] = "Error"  # another host's path; a scope the operator token lacks
    return errors


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    method, path, security, request = endpoint.method.lower(), endpoint.path, endpoint.security, endpoint.request
    op: dict[str, Any] = {"summary": endpoint.summary, "operationId": f"{method}_{path}", "responses": {}}
    params = [
        {"name": name, "in": "path", "required": True, "schema": _ID}
        for name in _PATH_PARAMETERS if "{" + name + "}" in path
    ]
    if "{name}" in path:  # an artifact's name
        params.append({"name": "name", "in": "path", "required": True, "schema": _ARTIFACT_NAME})
    required = _REQUIRED_QUERY.get((method, path), frozenset())
    params += [{"name": name, "in": "query", "required": name in required, "schema": schema}
               for name, schema in _QUERY.get((method, path), {}).items()]
    params += [{"name": name, "in": "header", "required": False, "schema": schema}
               for name, schema in _HEADERS.get((method, path), {}).items()]
    if params:
        op["parameters"] = params
    if security:
        # OpenAPI 3.1 lets a bearer scheme list the roles an operation needs: an operator
        # route's scope ("admin" holds them all; "any" needs none).
        scope = endpoint.scope
        op["security"] = [{security: [] if scope in (None, "any") else [scope]}]
        if scope is not None:
            op["x-required-scope"] = scope
    if request == "ArtifactBody":  # the raw bytes, in one of the allowed types
        op["requestBody"] = {"required": True, "content": {
            media_type: {"schema": {"type": "string", "format": "binary"}}
            for media_type in wire.ARTIFACT_CONTENT_TYPES}}
    elif request:
        op["requestBody"] = {"required": request not in _OPTIONAL_BODIES, "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{request}"}}}}
    responses = {**_errors(endpoint, bool(params)), **endpoint.responses}
    for status, schema in sorted(responses.items()):
        response: dict[str, Any] = {"description": str(status)}
        if schema:
            response["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
        elif status == 200 and (method, path) == _ARTIFACT_BYTES:
            response["content"] = {media_type: {"schema": {"type": "string", "format": "binary"}}
                                   for media_type in wire.ARTIFACT_CONTENT_TYPES}
        elif 200 <= status < 300 and (method, path) in _CONTENT:
            response["content"] = {_CONTENT[(method, path)]: {"schema": {"type": "string"}}}
        op["responses"][str(status)] = response
    return op


def openapi_document(endpoints: Iterable[Endpoint], max_devices_per_host: int = 256) -> dict[str, Any]:
    """The document; ``max_devices_per_host`` is the deployment's (a snapshot's bound)."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    bearer = {"type": "http", "scheme": "bearer"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tether coordinator", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, **request_schemas(max_devices_per_host)},
            "securitySchemes": {"operator": bearer, "host": bearer, "enrollment": bearer},
        },
    }
