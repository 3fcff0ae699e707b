"""The OpenAPI 3.1 document of the contract (PROTOCOL.md), built from the route table itself
(``coordinator/routes.py``) and the wire vocabulary (``wire``), so neither is written twice."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import wire
from coordinator import __version__


class Endpoint(Protocol):
    """What the document needs of a route (``coordinator.routes.Endpoint`` is one)."""

    method: str
    path: str
    summary: str
    security: str | None  # the bearer principal, or None for an open route
    scope: str | None  # an operator route's required scope ("any": any operator credential)
    request: str | None  # the schema name of the JSON body
    responses: dict[int, str | None]  # status -> schema name

_ID = {"type": "string", "pattern": f"^{wire.ID_PATTERN}$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_SCOPES = {"type": "array", "uniqueItems": True, "minItems": 1,
           "items": {"enum": list(wire.values(wire.OperatorScope))}}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"enum": list(wire.values(wire.ErrorCode))}, "message": {"type": "string"},
            "details": {}}}},
    },
    "Enroll": {"type": "object", "required": ["enrollment_id", "host_token"], "properties": {
        "enrollment_id": _ID, "host_token": {"type": "string", "minLength": wire.HOST_TOKEN_MIN_CHARS,
                                             "maxLength": wire.HOST_TOKEN_MAX_CHARS},
        "hostname": {"type": "string"}, "labels": _LABELS}},
    "Enrolled": {"type": "object", "properties": {"host_id": _ID, "created": {"type": "boolean"}}},
    "DeviceEnroll": {"type": "object", "required": ["devices"], "properties": {"devices": {
        "type": "array", "items": {"type": "object", "required": ["local_id", "driver"], "properties": {
            "local_id": _ID, "driver": _ID, "attributes": {"type": "object"}}}}}},
    "Heartbeat": {"type": "object", "required": ["devices"], "properties": {
        "devices": {"type": "array", "items": {"type": "object", "required": ["device_id", "driver", "status"],
                    "properties": {"device_id": _ID, "driver": _ID,
                                   "status": {"enum": list(wire.values(wire.DeviceStatus))},
                                   "attributes": {"type": "object"}, "labels": _LABELS}}},
        "agent": {"type": "object", "properties": {"version": {"type": "string"}, "hostname": {"type": "string"},
                  "capabilities": {"type": "object", "properties": {
                      kind: {"type": "array", "items": _ID, "maxItems": 1000} for kind in ("workflows", "planners")}}}}}},
    "Claim": {"type": "object", "properties": {"claim_id": _ID}},
    "Assignment": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "lease_id": _ID, "lease_ttl_ms": {"type": "integer"},
        "lease_expires_at": {"type": "string", "format": "date-time"}, "device_id": _ID,
        "kind": {"enum": list(wire.values(wire.TaskKind))}, "goal": {"type": "string"},
        "workflow": {"type": "object", "properties": {"name": _ID, "params": {"type": "object"}}},
        "max_steps": {"type": ["integer", "null"]}}},
    "Renew": {"type": "object", "required": ["task_id", "attempt"], "properties": {
        "task_id": _ID, "attempt": {"type": "integer", "minimum": 1},
        "progress": {"type": "object", "properties": {"step_index": {"type": "integer"},
                     "status": {"type": "string"}, "summary": {"type": "string"}}}}},
    "Renewed": {"type": "object", "properties": {
        "lease_ttl_ms": {"type": "integer"}, "lease_expires_at": {"type": "string"},
        "cancel_requested": {"type": "boolean"},
        "progress": {"enum": list(wire.values(wire.ProgressOutcome))}}},
    "Result": {"type": "object", "required": ["task_id", "attempt", "lease_id", "status"], "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "lease_id": _ID,
        "status": {"enum": list(wire.values(wire.ResultStatus))},
        "failure_reason": {"type": ["string", "null"]}, "metadata": {"type": "object"},
        "retryable": {"type": "boolean", "default": False}}},
    "Recorded": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "status": {"type": "string"},
        "task_status": {"enum": ["succeeded", "failed", "cancelled", "queued"]},
        "recorded_at": {"type": "string"}, "replayed": {"type": "boolean"}}},
    "Heartbeated": {"type": "object", "properties": {
        "host_id": _ID, "devices": {"type": "integer"}, "heartbeat_interval_s": {"type": "integer"},
        "draining": {"type": "boolean"}}},
    "TaskCreate": {"type": "object", "required": ["kind"], "properties": {
        "kind": {"enum": list(wire.values(wire.TaskKind))}, "goal": {"type": "string"},
        "workflow": {"type": "object", "properties": {"name": _ID, "params": {"type": "object"}}},
        "device_id": _ID, "selector": {"type": "object", "required": ["driver"],
                                       "properties": {"driver": _ID, "labels": _LABELS}},
        "max_attempts": {"type": "integer", "minimum": 1, "default": 3},
        "max_steps": {"type": "integer", "minimum": 1}, "idempotency_key": _ID,
        "queue_timeout_s": {"type": "integer", "minimum": 1}}},
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
    "DeviceDisable": {"type": "object", "properties": {"reason": {"type": "string", "maxLength": 256}}},
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
    "TokenCreate": {"type": "object", "properties": {
        "ttl_s": {"type": "integer", "minimum": 1}, "max_uses": {"type": "integer", "minimum": 1}, "labels": _LABELS}},
    "TokenCreated": {"type": "object", "properties": {
        "id": _ID, "token": {"type": "string"}, "expires_at": {"type": "string"}}},
    "Tokens": {"type": "object", "properties": {
        "enrollment_tokens": {"type": "array", "items": {"type": "object"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "OperatorTokenCreate": {"type": "object", "required": ["name", "scopes"], "additionalProperties": False,
                            "properties": {
        "name": _ID, "scopes": _SCOPES,
        "ttl_s": {"type": "integer", "minimum": wire.OPERATOR_TOKEN_TTL_MIN_S,
                  "maximum": wire.OPERATOR_TOKEN_TTL_MAX_S, "default": wire.OPERATOR_TOKEN_TTL_DEFAULT_S}}},
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
    "Me": {"type": "object", "properties": {
        "name": {"type": "string"}, "scopes": _SCOPES, "expires_at": {"type": ["string", "null"]},
        "token_id": {"type": ["string", "null"]}}},
}

_LIMIT = {"type": "integer", "minimum": 1}
_CURSOR = {"type": "string"}
# The query parameters of each operation that takes some.
_QUERY: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/internal/v1/hosts/{host_id}/claim"): {"wait_s": {"type": "number", "minimum": 0}},
    ("get", "/api/v1/tasks"): {"status": {"enum": list(wire.values(wire.TaskStatus))}, "host_id": _ID,
                               "device_id": _ID, "limit": _LIMIT, "cursor": _CURSOR},
    ("get", "/api/v1/devices"): {"host_id": _ID, "driver": _ID,
                                 "status": {"enum": list(wire.values(wire.DeviceStatus))},
                                 "limit": _LIMIT, "cursor": _CURSOR},
    ("get", "/api/v1/devices/{device_id}/history"): {"limit": _LIMIT},
    ("get", "/api/v1/hosts"): {"limit": _LIMIT, "cursor": _CURSOR},
    ("get", "/api/v1/enrollment-tokens"): {"limit": _LIMIT, "cursor": _CURSOR},
    ("get", "/api/v1/operator-tokens"): {"limit": _LIMIT, "cursor": _CURSOR},
    ("get", "/api/v1/events"): {"task_id": _ID, "host_id": _ID, "last_event_id": _CURSOR},
}


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    method, path, security, request = endpoint.method.lower(), endpoint.path, endpoint.security, endpoint.request
    op: dict[str, Any] = {"summary": endpoint.summary, "operationId": f"{method}_{path}", "responses": {}}
    params = [
        {"name": name, "in": "path", "required": True, "schema": _ID}
        for name in ("host_id", "lease_id", "task_id", "token_id", "device_id") if "{" + name + "}" in path
    ]
    params += [{"name": name, "in": "query", "required": False, "schema": schema}
               for name, schema in _QUERY.get((method, path), {}).items()]
    if params:
        op["parameters"] = params
    if security:
        # OpenAPI 3.1 lets a bearer scheme list the roles an operation needs: an operator
        # route's scope ("admin" holds them all; "any" needs none).
        scope = endpoint.scope
        op["security"] = [{security: [] if scope in (None, "any") else [scope]}]
        if scope is not None:
            op["x-required-scope"] = scope
    if request:
        op["requestBody"] = {"required": not path.endswith("/claim"), "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{request}"}}}}
    # Any route may also answer the contract's 405, 500 and 503 errors.
    responses = {**endpoint.responses, 405: "Error", 500: "Error", 503: "Error"}
    for status, schema in sorted(responses.items()):
        response: dict[str, Any] = {"description": str(status)}
        if schema:
            response["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
        op["responses"][str(status)] = response
    return op


def openapi_document(endpoints: Iterable[Endpoint]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    bearer = {"type": "http", "scheme": "bearer"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tether coordinator", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"operator": bearer, "host": bearer, "enrollment": bearer},
        },
    }
