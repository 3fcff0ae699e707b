"""Every request body of the contract, stated once: these models parse what clients send
(``validation.parse``) and ``openapi.py`` generates the document's request schemas from them, as
FastAPI does.

Two families, as PROTOCOL.md ("Conventions") draws them:

- the host API (``/internal/v1``, ``HostBody``) ignores unknown fields, so older and newer agents
  keep working, and reads a field sent as null as absent (agents send null for "none");
- the operator API (``/api/v1``, ``OperatorBody``) refuses an unknown field naming it
  (``max_atempts`` is a typo, not a wish), and a field sent as null: leave it out instead. Its
  optional fields are therefore not nullable in the document.

Values are taken as sent, never coerced: ``"3"`` is no integer and ``1`` no string (``3.0`` is
the integer 3, in JSON as in JSON Schema). Ids and keys are judged exactly (a control character
in one is refused, since stripping would merge two); free text loses its C0 and C1 controls (tab
and newline aside) and the characters XML 1.0 forbids after its length is judged as sent.

The models live by principal: ``host.py`` and ``operator.py`` (with ``actions.py``, a live
session's command), on ``values.py`` (the bounds, values and base models); all are named here.
"""

from __future__ import annotations

from coordinator.api.bodies.actions import (
    SESSION_ACTIONS,
    CommandCreate,
    KeyAction,
    LaunchAction,
    ObserveAction,
    SessionAction,
    SwipeAction,
    TapAction,
    TypeAction,
    WaitAction,
)
from coordinator.api.bodies.host import (
    Agent,
    Capabilities,
    Claim,
    CommandAnswer,
    CommandsPoll,
    DeviceEnroll,
    Enroll,
    EnrollDevice,
    Heartbeat,
    HeartbeatDevice,
    Observation,
    Progress,
    Renew,
    RenewalEntry,
    Renewals,
    Result,
)
from coordinator.api.bodies.operator import (
    WEBHOOK_URL_PATTERN,
    DeviceDisable,
    Matrix,
    NoBody,
    OperatorTokenCreate,
    RunCreate,
    Scope,
    Selector,
    TaskCreate,
    TeamSettings,
    TokenCreate,
    WebhookCreate,
    WebhookEventName,
    WebhookUrl,
    Workflow,
    WorkItem,
)
from coordinator.api.bodies.values import (
    DEFAULT_GOAL_MAX_STEPS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TOKEN_TTL_S,
    HOSTNAME_MAX_CHARS,
    INT32_MAX,
    LABEL_MAX_CHARS,
    LABELS_MAX_ITEMS,
    MAX_ATTEMPTS,
    MAX_CAPABILITY_NAMES,
    MAX_QUEUE_TIMEOUT_S,
    MAX_REASON_CHARS,
    MAX_STEPS,
    MAX_TOKEN_TTL_S,
    MAX_TOKEN_USES,
    NAME_MAX_CHARS,
    NO_CONTROL,
    PER_HOST_DEVICES,
    SOME_TEXT,
    Cleaned,
    FreeObject,
    HostBody,
    Id,
    Integral,
    Labels,
    OperatorBody,
    RequestBody,
    Text,
    clean_free,
    clean_text,
)

# The document's name of each request body is its model's name (routes.py names them).
REQUESTS: tuple[type[RequestBody], ...] = (Enroll, DeviceEnroll, Heartbeat, Claim, Renew, Renewals, Result,
                                          TaskCreate, DeviceDisable, TokenCreate, OperatorTokenCreate, TeamSettings,
                                          RunCreate, WebhookCreate, CommandCreate, CommandsPoll)

__all__ = [
    "DEFAULT_GOAL_MAX_STEPS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_TOKEN_TTL_S",
    "HOSTNAME_MAX_CHARS",
    "INT32_MAX",
    "LABELS_MAX_ITEMS",
    "LABEL_MAX_CHARS",
    "MAX_ATTEMPTS",
    "MAX_CAPABILITY_NAMES",
    "MAX_QUEUE_TIMEOUT_S",
    "MAX_REASON_CHARS",
    "MAX_STEPS",
    "MAX_TOKEN_TTL_S",
    "MAX_TOKEN_USES",
    "NAME_MAX_CHARS",
    "NO_CONTROL",
    "PER_HOST_DEVICES",
    "REQUESTS",
    "SESSION_ACTIONS",
    "SOME_TEXT",
    "WEBHOOK_URL_PATTERN",
    "Agent",
    "Capabilities",
    "Claim",
    "Cleaned",
    "CommandAnswer",
    "CommandCreate",
    "CommandsPoll",
    "DeviceDisable",
    "DeviceEnroll",
    "Enroll",
    "EnrollDevice",
    "FreeObject",
    "Heartbeat",
    "HeartbeatDevice",
    "HostBody",
    "Id",
    "Integral",
    "KeyAction",
    "Labels",
    "LaunchAction",
    "Matrix",
    "NoBody",
    "Observation",
    "ObserveAction",
    "OperatorBody",
    "OperatorTokenCreate",
    "Progress",
    "Renew",
    "RenewalEntry",
    "Renewals",
    "RequestBody",
    "Result",
    "RunCreate",
    "Scope",
    "Selector",
    "SessionAction",
    "SwipeAction",
    "TapAction",
    "TaskCreate",
    "TeamSettings",
    "Text",
    "TokenCreate",
    "TypeAction",
    "WaitAction",
    "WebhookCreate",
    "WebhookEventName",
    "WebhookUrl",
    "WorkItem",
    "Workflow",
    "clean_free",
    "clean_text",
]
