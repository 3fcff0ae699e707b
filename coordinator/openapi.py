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
    request: str | None  # the schema name of the JSON body
    responses: dict[int, str | None]  # status -> schema name

_ID = {"type": "string", "pattern": f"^{wire.ID_PATTERN}$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}

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
        "agent": {"type": "object", "properties": {"version": {"type": "string"}, "hostname": {"type": "string"}}}}},
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
        "failure_reason": {"type": ["string", "null"]}, "metadata": {"type": "object"}}},
    "Recorded": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "status": {"type": "string"},
        "recorded_at": {"type": "string"}, "replayed": {"type": "boolean"}}},
    "TaskCreate": {"type": "object", "required": ["kind"], "properties": {
        "kind": {"enum": list(wire.values(wire.TaskKind))}, "goal": {"type": "string"},
        "workflow": {"type": "object", "properties": {"name": _ID, "params": {"type": "object"}}},
        "device_id": _ID, "selector": {"type": "object", "required": ["driver"],
                                       "properties": {"driver": _ID, "labels": _LABELS}},
        "max_attempts": {"type": "integer", "minimum": 1, "default": 3},
        "max_steps": {"type": "integer", "minimum": 1}, "idempotency_key": _ID}},
    "Task": {"type": "object", "properties": {
        "task_id": _ID, "kind": {"type": "string"},
        "status": {"enum": list(wire.values(wire.TaskStatus))},
        "attempt": {"type": "integer"}, "max_attempts": {"type": "integer"},
        "device_id": {"type": ["string", "null"]}, "host_id": {"type": ["string", "null"]},
        "progress": {"type": ["object", "null"]}, "result": {"type": ["object", "null"]},
        "cancel_requested": {"type": "boolean"}, "created_at": {"type": "string"}}},
    "TaskPage": {"type": "object", "properties": {
        "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/Task"}},
        "next_cursor": {"type": ["string", "null"]}}},
    "Devices": {"type": "object", "properties": {"devices": {"type": "array", "items": {"type": "object", "properties": {
        "device_id": _ID, "host_id": _ID, "driver": _ID, "status": {"type": "string"},
        "attributes": {"type": "object"}, "labels": _LABELS, "host_online": {"type": "boolean"},
        "reserved_by": {"type": ["string", "null"]}}}}}},
    "Host": {"type": "object", "properties": {
        "host_id": _ID, "kind": {"enum": ["static", "enrolled"]}, "online": {"type": "boolean"},
        "last_seen": {"type": ["string", "null"]}, "devices": {"type": "integer"},
        "revoked": {"type": "boolean"}, "labels": _LABELS,
        "enrollment_token_id": {"type": ["string", "null"]}}},
    "Hosts": {"type": "object", "properties": {"hosts": {"type": "array", "items": {"$ref": "#/components/schemas/Host"}}}},
    "TokenCreate": {"type": "object", "properties": {
        "ttl_s": {"type": "integer", "minimum": 1}, "max_uses": {"type": "integer", "minimum": 1}, "labels": _LABELS}},
    "TokenCreated": {"type": "object", "properties": {
        "id": _ID, "token": {"type": "string"}, "expires_at": {"type": "string"}}},
    "Tokens": {"type": "object", "properties": {"tokens": {"type": "array", "items": {"type": "object"}}}},
}

def _operation(endpoint: Endpoint) -> dict[str, Any]:
    method, path, security, request = endpoint.method.lower(), endpoint.path, endpoint.security, endpoint.request
    op: dict[str, Any] = {"summary": endpoint.summary, "operationId": f"{method}_{path}", "responses": {}}
    params = [
        {"name": name, "in": "path", "required": True, "schema": _ID}
        for name in ("host_id", "lease_id", "task_id", "token_id") if "{" + name + "}" in path
    ]
    if path.endswith("/claim"):
        params.append({"name": "wait_s", "in": "query", "required": False, "schema": {"type": "number", "minimum": 0}})
    if path == "/api/v1/tasks" and method == "get":
        params += [
            {"name": "status", "in": "query", "schema": {"enum": list(wire.values(wire.TaskStatus))}},
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
            {"name": "cursor", "in": "query", "schema": {"type": "string"}},
        ]
    if params:
        op["parameters"] = params
    if security:
        op["security"] = [{security: []}]
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
            "securitySchemes": {"admin": bearer, "host": bearer, "enrollment": bearer},
        },
    }
