"""The route table: every endpoint of the contract once, with what the OpenAPI document says of it.

``app.py`` builds the Starlette routes from it and ``/openapi.json`` is generated from it, so a
route cannot exist without being documented, nor be documented without existing. Every operator
route names the scope it needs (PROTOCOL.md, "Operator scopes"): an ``Endpoint`` of the operator
API without one cannot be built, and ``app.py`` enforces it before the handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import wire
from coordinator.api import (
    artifacts,
    enrollment,
    events,
    fleet,
    host,
    landing,
    operators,
    ops,
    runs,
    session_host,
    sessions,
    tasks,
    teams,
    ui,
    webhooks,
)
from coordinator.api.auth import ANY_SCOPE
from coordinator.api.context import Context
from coordinator.api.openapi import openapi_document
from coordinator.api.responses import json_response

Handler = Callable[[Context, Request], Awaitable[Response]]

HOST = "/internal/v1/hosts/{host_id}"
# 429: a refused credential from a client address that refused too many (coordinator/api/throttle.py).
_HOST_ERRORS: dict[int, str | None] = {400: "Error", 401: "Error", 403: "Error", 413: "Error", 429: "Error"}
_ADMIN_ERRORS: dict[int, str | None] = {401: "Error", 403: "Error", 429: "Error"}
_SCOPES = frozenset({*wire.values(wire.OperatorScope), ANY_SCOPE})
READ, SUBMIT, CONTROL, ADMIN = (s.value for s in wire.OperatorScope)


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    security: str | None  # the bearer principal: "host", "operator", "enrollment", or None
    request: str | None = None  # schema name of the JSON body
    responses: dict[int, str | None] = field(default_factory=dict)  # status -> schema name
    # An operator route's required scope (a wire.OperatorScope value, or ANY_SCOPE: any valid
    # operator credential), and the scope that lets a token in limited to what it created.
    scope: str | None = None
    own_scope: str | None = None

    def __post_init__(self) -> None:
        if (self.security == "operator") != (self.scope is not None):
            raise ValueError(f"{self.method} {self.path}: an operator route, and only one, names its scope")
        if self.scope is not None and self.scope not in _SCOPES:
            raise ValueError(f"{self.method} {self.path}: unknown scope {self.scope!r}")
        if self.own_scope is not None and (self.scope is None or self.own_scope not in _SCOPES):
            raise ValueError(f"{self.method} {self.path}: own_scope needs a scope, and a known one")


async def _openapi(ctx: Context, request: Request) -> Response:
    return json_response(_document(ctx.settings.max_devices_per_host))


ENDPOINTS: list[Endpoint] = [
    # Starlette tries routes in this order: the four calls of every task's lifecycle come first.
    Endpoint("POST", "/api/v1/tasks", tasks.create_task, "Create a task", "operator", "TaskCreate",
             {200: "Task", 201: "Task", 400: "Error", 409: "Error", 413: "Error", **_ADMIN_ERRORS}, scope=SUBMIT),
    Endpoint("POST", f"{HOST}/claim", host.claim, "Long-poll for one assignment", "host", "Claim",
             {200: "Assignment", 204: None, **_HOST_ERRORS}),
    Endpoint("POST", f"{HOST}/leases/{{lease_id}}/renew", host.renew, "Renew a lease, with progress",
             "host", "Renew", {200: "Renewed", 409: "Error", **_HOST_ERRORS}),
    Endpoint("POST", f"{HOST}/renewals", host.renewals, "Renew every lease of a host at once", "host",
             "Renewals", {200: "RenewedBatch", **_HOST_ERRORS}),
    Endpoint("POST", f"{HOST}/results", host.results, "Report a terminal result (idempotent)", "host",
             "Result", {200: "Recorded", 409: "Error", **_HOST_ERRORS}),
    Endpoint("POST", f"{HOST}/leases/{{lease_id}}/commands", session_host.poll_commands,
             "A live session's poll: answers delivered, lease renewed, the next command", "host",
             "CommandsPoll", {200: "CommandsPolled", 204: None, 409: "Error", **_HOST_ERRORS}),
    Endpoint("PUT", f"{HOST}/leases/{{lease_id}}/artifacts/{{name}}", artifacts.upload,
             "Upload an artifact of the running attempt (raw body)", "host", "ArtifactBody",
             {200: "ArtifactStored", 201: "ArtifactStored", 409: "Error", **_HOST_ERRORS}),
    Endpoint("POST", "/internal/v1/enroll", enrollment.enroll, "Enroll a managed host", "enrollment",
             "Enroll", {200: "Enrolled", 201: "Enrolled", 400: "Error", 401: "Error", 409: "Error", 413: "Error",
                        429: "Error"}),
    Endpoint("POST", f"{HOST}/devices/enroll", enrollment.enroll_devices, "Enroll local devices", "host",
             "DeviceEnroll", {200: "DevicesEnrolled", 409: "Error", **_HOST_ERRORS}),
    Endpoint("PUT", f"{HOST}/heartbeat", host.heartbeat, "Heartbeat with the complete device snapshot",
             "host", "Heartbeat", {200: "Heartbeated", 409: "Error", **_HOST_ERRORS}),
    Endpoint("GET", "/api/v1/tasks", tasks.list_tasks, "List tasks, newest first", "operator", None,
             {200: "TaskPage", 400: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/tasks/{task_id}", tasks.get_task, "Get a task", "operator", None,
             {200: "Task", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/tasks/{task_id}/events", tasks.task_events, "A task's history, oldest first",
             "operator", None, {200: "Events", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/tasks/{task_id}/artifacts", artifacts.list_artifacts,
             "A task's artifacts, every attempt's", "operator", None, {200: "Artifacts", 404: "Error", **_ADMIN_ERRORS},
             scope=READ),
    Endpoint("GET", "/api/v1/tasks/{task_id}/artifacts/{name}", artifacts.get_artifact,
             "One artifact's bytes (latest attempt unless ?attempt=N)", "operator", None,
             {200: None, 400: "Error", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("POST", "/api/v1/tasks/{task_id}/cancel", tasks.cancel_task, "Cancel a task", "operator",
             None, {200: "Task", 404: "Error", 409: "Error", **_ADMIN_ERRORS}, scope=CONTROL, own_scope=SUBMIT),
    # Live sessions (PROTOCOL.md, "Live sessions"): the creator (or an admin) drives, `read` watches.
    Endpoint("POST", "/api/v1/tasks/{task_id}/commands", sessions.post_command,
             "Send a command to a running session, and wait for its answer", "operator", "CommandCreate",
             {200: "Command", 202: "Command", 404: "Error", 409: "Error", **_ADMIN_ERRORS}, scope=SUBMIT),
    Endpoint("GET", "/api/v1/tasks/{task_id}/commands", sessions.list_commands,
             "A session's recording, oldest first", "operator", None,
             {200: "Commands", 404: "Error", 409: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/tasks/{task_id}/commands/{command_id}", sessions.read_command,
             "One command of a session and its answer, waiting for it", "operator", None,
             {200: "Command", 202: "Command", 404: "Error", 409: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("POST", "/api/v1/tasks/{task_id}/end", sessions.post_end, "End a session (idempotent)", "operator",
             None, {200: "Task", 404: "Error", 409: "Error", **_ADMIN_ERRORS}, scope=SUBMIT),
    Endpoint("GET", "/api/v1/devices", fleet.list_devices, "The aggregated device pool", "operator",
             None, {200: "Devices", 400: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/devices/{device_id}", fleet.get_device, "One pooled device", "operator",
             None, {200: "Device", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("DELETE", "/api/v1/devices/{device_id}", fleet.forget_device,
             "Un-enroll a managed host's device", "operator", None,
             {200: "DeviceForgotten", 404: "Error", 409: "Error", **_ADMIN_ERRORS}, scope=CONTROL),
    Endpoint("GET", "/api/v1/devices/{device_id}/history", fleet.device_history,
             "A device's runs, newest first", "operator", None, {200: "DeviceHistory", 404: "Error", **_ADMIN_ERRORS},
             scope=READ),
    Endpoint("POST", "/api/v1/devices/{device_id}/disable", fleet.disable_device, "Disable a device",
             "operator", "DeviceDisable", {200: "Device", 400: "Error", 404: "Error", **_ADMIN_ERRORS}, scope=CONTROL),
    Endpoint("POST", "/api/v1/devices/{device_id}/enable", fleet.enable_device, "Enable a device",
             "operator", None, {200: "Device", 404: "Error", **_ADMIN_ERRORS}, scope=CONTROL),
    Endpoint("GET", "/api/v1/hosts", fleet.list_hosts, "List hosts", "operator", None,
             {200: "Hosts", 400: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/workflows", fleet.list_workflows, "What the fleet can run", "operator", None,
             {200: "Workflows", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/hosts/{host_id}", fleet.get_host, "Get a host", "operator", None,
             {200: "Host", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("POST", "/api/v1/hosts/{host_id}/drain", fleet.drain_host, "Drain a host", "operator", None,
             {200: "Host", 404: "Error", **_ADMIN_ERRORS}, scope=CONTROL),
    Endpoint("POST", "/api/v1/hosts/{host_id}/undrain", fleet.undrain_host, "Undrain a host", "operator",
             None, {200: "Host", 404: "Error", **_ADMIN_ERRORS}, scope=CONTROL),
    Endpoint("POST", "/api/v1/hosts/{host_id}/revoke", fleet.revoke_host, "Revoke a host", "operator",
             None, {200: "Host", 404: "Error", **_ADMIN_ERRORS}, scope=ADMIN),
    Endpoint("POST", "/api/v1/enrollment-tokens", enrollment.create_token,
             "Create an enrollment token (secret shown once)", "operator", "TokenCreate",
             {201: "TokenCreated", 400: "Error", **_ADMIN_ERRORS}, scope=ADMIN),
    Endpoint("GET", "/api/v1/enrollment-tokens", enrollment.list_tokens,
             "List enrollment tokens (never the secret)", "operator", None, {200: "Tokens", **_ADMIN_ERRORS},
             scope=ADMIN),  # "admin": enrollment tokens, as the contract's scope table says
    Endpoint("DELETE", "/api/v1/enrollment-tokens/{token_id}", enrollment.revoke_token,
             "Revoke an enrollment token", "operator", None, {200: "EnrollmentToken", 404: "Error", **_ADMIN_ERRORS},
             scope=ADMIN),
    Endpoint("POST", "/api/v1/operator-tokens", operators.create_token,
             "Create an operator token (secret shown once)", "operator", "OperatorTokenCreate",
             {201: "OperatorTokenCreated", 400: "Error", 409: "Error", 413: "Error", **_ADMIN_ERRORS},
             scope=ADMIN),
    Endpoint("GET", "/api/v1/operator-tokens", operators.list_tokens,
             "List operator tokens (never the secret)", "operator", None,
             {200: "OperatorTokens", 400: "Error", **_ADMIN_ERRORS}, scope=ADMIN),
    Endpoint("DELETE", "/api/v1/operator-tokens/{token_id}", operators.revoke_token,
             "Revoke an operator token", "operator", None, {200: "OperatorToken", 404: "Error", **_ADMIN_ERRORS},
             scope=ADMIN),
    Endpoint("GET", "/api/v1/teams", teams.list_teams, "Every team and its share of the fleet", "operator",
             None, {200: "Teams", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("PUT", "/api/v1/teams/{team}", teams.set_team, "Set a team's weight and cap", "operator",
             "TeamSettings", {200: "Team", 400: "Error", **_ADMIN_ERRORS}, scope=ADMIN),
    # Runs (PROTOCOL.md, "Runs"): many tasks as one.
    Endpoint("POST", "/api/v1/runs", runs.create_run, "Create a run: a list of tasks or a matrix, all or nothing",
             "operator", "RunCreate", {200: "RunCreated", 201: "RunCreated", 400: "Error", 409: "Error", 413: "Error",
                                       **_ADMIN_ERRORS}, scope=SUBMIT),
    Endpoint("GET", "/api/v1/runs", runs.list_runs, "List runs, newest first", "operator", None,
             {200: "RunPage", 400: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/runs/{run_id}", runs.get_run, "Get a run, with its breakdown", "operator", None,
             {200: "RunDetail", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/api/v1/runs/{run_id}/report", runs.run_report,
             "A run's report: JSON, or JUnit XML (?format=junit)", "operator", None,
             {200: "RunReport", 400: "Error", 404: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("POST", "/api/v1/runs/{run_id}/cancel", runs.cancel_run, "Cancel every task of a run not yet ended",
             "operator", None, {200: "Run", 404: "Error", **_ADMIN_ERRORS}, scope=CONTROL, own_scope=SUBMIT),
    Endpoint("POST", "/api/v1/runs/{run_id}/rerun-failed", runs.rerun_failed,
             "Rerun a run's failed tasks, each in its place", "operator", None,
             # PROTOCOL's scopes: submit reruns the runs it created; control cancels any run but
             # reruns none it did not create, so rerunning any run is the admin's.
             {201: "RunRerun", 404: "Error", **_ADMIN_ERRORS}, scope=ADMIN, own_scope=SUBMIT),
    Endpoint("POST", "/api/v1/webhooks", webhooks.create_webhook, "Register a webhook (secret shown once)",
             "operator", "WebhookCreate", {201: "WebhookCreated", 400: "Error", 409: "Error", 413: "Error",
                                           **_ADMIN_ERRORS}, scope=ADMIN),
    Endpoint("GET", "/api/v1/webhooks", webhooks.list_webhooks, "List webhooks (never the secret)", "operator",
             None, {200: "Webhooks", **_ADMIN_ERRORS}, scope=ADMIN),
    Endpoint("DELETE", "/api/v1/webhooks/{webhook_id}", webhooks.delete_webhook, "Remove a webhook", "operator",
             None, {200: "Webhook", 404: "Error", **_ADMIN_ERRORS}, scope=ADMIN),
    Endpoint("GET", "/api/v1/webhooks/{webhook_id}/deliveries", webhooks.list_deliveries,
             "A webhook's latest deliveries, newest first", "operator", None,
             {200: "Deliveries", 400: "Error", 404: "Error", **_ADMIN_ERRORS}, scope=ADMIN),
    # An addition to the contract: who the caller is, for any valid operator credential.
    Endpoint("GET", "/api/v1/me", operators.me, "The calling operator: name, scopes, expiry", "operator",
             None, {200: "Me", **_ADMIN_ERRORS}, scope=ANY_SCOPE),
    Endpoint("GET", "/api/v1/events", events.events, "The live event feed (server-sent events)", "operator",
             None, {200: None, 400: "Error", **_ADMIN_ERRORS}, scope=READ),
    Endpoint("GET", "/ui", ui.page, "The live dashboard (HTML)", None, None, {200: None, 304: None}),
    Endpoint("GET", "/", landing.root, "Leads to the dashboard (/ui)", None, None, {302: None}),
    Endpoint("GET", "/favicon.ico", landing.favicon, "No icon: an empty answer, not a 404", None, None,
             {204: None}),
    *(Endpoint("GET", ui.PREFIX + name, ui.asset, "A file of the dashboard", None, None,
               {200: None, 304: None})
      for name in ui.ASSETS),
    Endpoint("GET", "/healthz", ops.healthz, "Process is up", None, None, {200: "Health"}),
    Endpoint("GET", "/readyz", ops.readyz, "Redis reachable and scripts loaded", None, None,
             {200: "Ready", 503: "Ready"}),
    Endpoint("GET", "/metrics", ops.metrics, "Prometheus metrics", None, None, {200: None}),
    Endpoint("GET", "/openapi.json", _openapi, "This document", None, None, {200: "OpenApiDocument"}),
]


@lru_cache(maxsize=4)
def _document(max_devices_per_host: int) -> dict[str, Any]:
    return openapi_document(ENDPOINTS, max_devices_per_host)
