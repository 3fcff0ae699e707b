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
session's command), on ``values.py`` (the bounds, values and base models); what the rest of the project
uses is named here.
"""

from __future__ import annotations

from coordinator.api.bodies.actions import CommandCreate
from coordinator.api.bodies.host import (
    Agent,
    Claim,
    CommandAnswer,
    CommandsPoll,
    DeviceEnroll,
    Enroll,
    Heartbeat,
    Progress,
    Renew,
    Renewals,
    Result,
)
from coordinator.api.bodies.operator import (
    DeviceDisable,
    NoBody,
    OperatorTokenCreate,
    RunCreate,
    TaskCreate,
    TeamSettings,
    TokenCreate,
    WebhookCreate,
)
from coordinator.api.bodies.values import (
    DEFAULT_GOAL_MAX_STEPS,
    INT32_MAX,
    NO_CONTROL,
    PER_HOST_DEVICES,
    SOME_TEXT,
    Id,
    Labels,
    OperatorBody,
    RequestBody,
    clean_text,
)

# The document's name of each request body is its model's name (routes.py names them).
REQUESTS: tuple[type[RequestBody], ...] = (Enroll, DeviceEnroll, Heartbeat, Claim, Renew, Renewals, Result,
                                          TaskCreate, DeviceDisable, TokenCreate, OperatorTokenCreate, TeamSettings,
                                          RunCreate, WebhookCreate, CommandCreate, CommandsPoll)

__all__ = [
    "DEFAULT_GOAL_MAX_STEPS",
    "INT32_MAX",
    "NO_CONTROL",
    "PER_HOST_DEVICES",
    "REQUESTS",
    "SOME_TEXT",
    "Agent",
    "Claim",
    "CommandAnswer",
    "CommandCreate",
    "CommandsPoll",
    "DeviceDisable",
    "DeviceEnroll",
    "Enroll",
    "Heartbeat",
    "Id",
    "Labels",
    "NoBody",
    "OperatorBody",
    "OperatorTokenCreate",
    "Progress",
    "Renew",
    "Renewals",
    "RequestBody",
    "Result",
    "RunCreate",
    "TaskCreate",
    "TeamSettings",
    "TokenCreate",
    "WebhookCreate",
    "clean_text",
]
