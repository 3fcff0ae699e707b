"""The OpenAPI 3.1 document of the contract (PROTOCOL.md), built from one table of routes."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from coordinator import __version__

_ID = {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"type": "string"}, "message": {"type": "string"}, "details": {}}}},
    },
    "Enroll": {"type": "object", "required": ["enrollment_id", "host_token"], "properties": {
        "enrollment_id": _ID, "host_token": {"type": "string", "minLength": 32, "maxLength": 256},
        "hostname": {"type": "string"}, "labels": _LABELS}},
    "Enrolled": {"type": "object", "properties": {"host_id": _ID, "created": {"type": "boolean"}}},
    "DeviceEnroll": {"type": "object", "required": ["devices"], "properties": {"devices": {
        "type": "array", "items": {"type": "object", "required": ["local_id", "driver"], "properties": {
            "local_id": _ID, "driver": _ID, "attributes": {"type": "object"}}}}}},
    "Heartbeat": {"type": "object", "required": ["devices"], "properties": {
        "devices": {"type": "array", "items": {"type": "object", "required": ["device_id", "driver", "status"],
                    "properties": {"device_id": _ID, "driver": _ID,
                                   "status": {"enum": ["available", "busy", "unavailable"]},
                                   "attributes": {"type": "object"}, "labels": _LABELS}}},
        "agent": {"type": "object", "properties": {"version": {"type": "string"}, "hostname": {"type": "string"}}}}},
    "Claim": {"type": "object", "properties": {"claim_id": _ID}},
    "Assignment": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "lease_id": _ID, "lease_ttl_ms": {"type": "integer"},
        "lease_expires_at": {"type": "string", "format": "date-time"}, "device_id": _ID,
        "kind": {"enum": ["goal", "workflow"]}, "goal": {"type": "string"},
        "workflow": {"type": "object", "properties": {"name": _ID, "params": {"type": "object"}}},
        "max_steps": {"type": ["integer", "null"]}}},
    "Renew": {"type": "object", "required": ["task_id", "attempt"], "properties": {
        "task_id": _ID, "attempt": {"type": "integer", "minimum": 1},
        "progress": {"type": "object", "properties": {"step_index": {"type": "integer"},
                     "status": {"type": "string"}, "summary": {"type": "string"}}}}},
    "Renewed": {"type": "object", "properties": {
        "lease_ttl_ms": {"type": "integer"}, "lease_expires_at": {"type": "string"},
        "cancel_requested": {"type": "boolean"},
        "progress": {"enum": ["stored", "omitted", "truncated", "rejected"]}}},
    "Result": {"type": "object", "required": ["task_id", "attempt", "lease_id", "status"], "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "lease_id": _ID,
        "status": {"enum": ["succeeded", "failed", "cancelled"]},
        "failure_reason": {"type": ["string", "null"]}, "metadata": {"type": "object"}}},
    "Recorded": {"type": "object", "properties": {
        "task_id": _ID, "attempt": {"type": "integer"}, "status": {"type": "string"},
        "recorded_at": {"type": "string"}, "replayed": {"type": "boolean"}}},
    "TaskCreate": {"type": "object", "required": ["kind"], "properties": {
        "kind": {"enum": ["goal", "workflow"]}, "goal": {"type": "string"},
        "workflow": {"type": "object", "properties": {"name": _ID, "params": {"type": "object"}}},
        "device_id": _ID, "selector": {"type": "object", "required": ["driver"],
                                       "properties": {"driver": _ID, "labels": _LABELS}},
        "max_attempts": {"type": "integer", "minimum": 1, "default": 3},
        "max_steps": {"type": "integer", "minimum": 1}, "idempotency_key": _ID}},
    "Task": {"type": "object", "properties": {
        "task_id": _ID, "kind": {"type": "string"},
        "status": {"enum": ["queued", "assigned", "running", "succeeded", "failed", "cancelled"]},
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

# (method, path, summary, security, request schema, {status: response schema or None})
ROUTES: list[tuple[str, str, str, str | None, str | None, dict[int, str | None]]] = [
    ("post", "/internal/v1/enroll", "Enroll a managed host", "enrollment", "Enroll",
     {200: "Enrolled", 201: "Enrolled", 400: "Error", 401: "Error", 409: "Error", 413: "Error"}),
    ("post", "/internal/v1/hosts/{host_id}/devices/enroll", "Enroll local devices", "host", "DeviceEnroll",
     {200: "DeviceEnroll", 400: "Error", 401: "Error", 403: "Error", 409: "Error", 413: "Error"}),
    ("put", "/internal/v1/hosts/{host_id}/heartbeat", "Heartbeat with the complete device snapshot", "host",
     "Heartbeat", {200: None, 400: "Error", 401: "Error", 403: "Error", 409: "Error", 413: "Error"}),
    ("post", "/internal/v1/hosts/{host_id}/claim", "Long-poll for one assignment", "host", "Claim",
     {200: "Assignment", 204: None, 400: "Error", 401: "Error", 403: "Error"}),
    ("post", "/internal/v1/hosts/{host_id}/leases/{lease_id}/renew", "Renew a lease, with progress", "host",
     "Renew", {200: "Renewed", 400: "Error", 401: "Error", 403: "Error", 409: "Error"}),
    ("post", "/internal/v1/hosts/{host_id}/results", "Report a terminal result (idempotent)", "host", "Result",
     {200: "Recorded", 400: "Error", 401: "Error", 403: "Error", 409: "Error"}),
    ("post", "/api/v1/tasks", "Create a task", "admin", "TaskCreate",
     {200: "Task", 201: "Task", 400: "Error", 401: "Error", 409: "Error", 413: "Error"}),
    ("get", "/api/v1/tasks", "List tasks, newest first", "admin", None, {200: "TaskPage", 400: "Error", 401: "Error"}),
    ("get", "/api/v1/tasks/{task_id}", "Get a task", "admin", None, {200: "Task", 401: "Error", 404: "Error"}),
    ("post", "/api/v1/tasks/{task_id}/cancel", "Cancel a task", "admin", None,
     {200: "Task", 401: "Error", 404: "Error", 409: "Error"}),
    ("get", "/api/v1/devices", "The aggregated device pool", "admin", None, {200: "Devices", 401: "Error"}),
    ("get", "/api/v1/hosts", "List hosts", "admin", None, {200: "Hosts", 401: "Error"}),
    ("get", "/api/v1/hosts/{host_id}", "Get a host", "admin", None, {200: "Host", 401: "Error", 404: "Error"}),
    ("post", "/api/v1/hosts/{host_id}/revoke", "Revoke a host", "admin", None, {200: "Host", 401: "Error", 404: "Error"}),
    ("post", "/api/v1/enrollment-tokens", "Create an enrollment token (secret shown once)", "admin", "TokenCreate",
     {201: "TokenCreated", 400: "Error", 401: "Error"}),
    ("get", "/api/v1/enrollment-tokens", "List enrollment tokens (never the secret)", "admin", None,
     {200: "Tokens", 401: "Error"}),
    ("delete", "/api/v1/enrollment-tokens/{token_id}", "Revoke an enrollment token", "admin", None,
     {200: None, 401: "Error", 404: "Error"}),
    ("get", "/healthz", "Process is up", None, None, {200: None}),
    ("get", "/readyz", "Redis reachable and scripts loaded", None, None, {200: None, 503: None}),
    ("get", "/metrics", "Prometheus metrics", None, None, {200: None}),
    ("get", "/openapi.json", "This document", None, None, {200: None}),
]


def _operation(method: str, path: str, summary: str, security: str | None, request: str | None,
               responses: dict[int, str | None]) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "operationId": f"{method}_{path}", "responses": {}}
    params = [
        {"name": name, "in": "path", "required": True, "schema": _ID}
        for name in ("host_id", "lease_id", "task_id", "token_id") if "{" + name + "}" in path
    ]
    if path.endswith("/claim"):
        params.append({"name": "wait_s", "in": "query", "required": False, "schema": {"type": "number", "minimum": 0}})
    if path == "/api/v1/tasks" and method == "get":
        params += [
            {"name": "status", "in": "query", "schema": {"type": "string"}},
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
    for status, schema in responses.items():
        response: dict[str, Any] = {"description": str(status)}
        if schema:
            response["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
        op["responses"][str(status)] = response
    return op


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, security, request, responses in ROUTES:
        paths.setdefault(path, {})[method] = _operation(method, path, summary, security, request, responses)
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
