"""The bodies of the operator API (``/api/v1``): tasks and runs, devices, tokens, teams and
webhooks (a live session's commands: ``actions.py``)."""
from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    model_validator,
)
from pydantic_core import PydanticCustomError

import wire
from coordinator.api.bodies.values import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TOKEN_TTL_S,
    INT32_MAX,
    MAX_ATTEMPTS,
    MAX_QUEUE_TIMEOUT_S,
    MAX_REASON_CHARS,
    MAX_STEPS,
    MAX_TOKEN_TTL_S,
    MAX_TOKEN_USES,
    NAME_MAX_CHARS,
    Cleaned,
    FreeObject,
    Id,
    Integral,
    Labels,
    OperatorBody,
    Text,
)

# -- operator API ----------------------------------------------------------------------------


class Workflow(OperatorBody):
    name: Id
    params: FreeObject = {}


class Selector(OperatorBody):
    driver: Id
    labels: Labels = {}


# A task's kind needs one field and excludes the other; its target is exactly one of two fields.
# Stated here once, for the check below and for the document.
_KIND_NEEDS = {wire.TaskKind.GOAL.value: ("goal", "workflow"), wire.TaskKind.WORKFLOW.value: ("workflow", "goal")}
# A session (PROTOCOL.md, "Live sessions") carries no work: none of these; and only it has these.
_SESSION_HAS_NO = ("goal", "workflow", "max_steps")
_SESSION_ONLY = ("idle_timeout_s", "max_duration_s")
_TARGETS = ("device_id", "selector")


def _task_rules(schema: dict[str, Any]) -> None:
    schema["allOf"] = [
        {"oneOf": [*({"properties": {"kind": {"const": kind}}, "required": [needs],
                      "not": {"anyOf": [{"required": [excludes]}, *({"required": [f]} for f in _SESSION_ONLY)]}}
                     for kind, (needs, excludes) in _KIND_NEEDS.items()),
                   {"properties": {"kind": {"const": wire.TaskKind.SESSION.value}},
                    "not": {"anyOf": [{"required": [f]} for f in _SESSION_HAS_NO]}}]},
        {"oneOf": [{"required": [target]} for target in _TARGETS]},
    ]


class TaskCreate(OperatorBody):
    """Create a task (POST /api/v1/tasks): a goal or a workflow, on one device or on any device a
    selector matches."""

    model_config = ConfigDict(json_schema_extra=_task_rules)

    kind: Annotated[wire.TaskKind, Strict(False)]
    goal: Annotated[Text, Field(max_length=wire.MAX_GOAL_CHARS), Cleaned] | None = None
    workflow: Workflow | None = None
    device_id: Id | None = None
    selector: Selector | None = None
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS), Integral] = DEFAULT_MAX_ATTEMPTS
    max_steps: Annotated[int, Field(ge=1, le=MAX_STEPS), Integral] | None = None
    idempotency_key: Id | None = None
    queue_timeout_s: Annotated[int, Field(ge=1, le=MAX_QUEUE_TIMEOUT_S), Integral] | None = None
    priority: Annotated[int, Field(ge=wire.PRIORITY_MIN, le=wire.PRIORITY_MAX), Integral] = wire.PRIORITY_DEFAULT
    team: Id | None = None
    # a session's (PROTOCOL.md, "Live sessions"); its max_attempts is 1 whatever was sent
    idle_timeout_s: Annotated[int, Field(ge=wire.SESSION_IDLE_TIMEOUT_S[0], le=wire.SESSION_IDLE_TIMEOUT_S[1]),
                              Integral] | None = None
    max_duration_s: Annotated[int, Field(ge=wire.SESSION_MAX_DURATION_S[0], le=wire.SESSION_MAX_DURATION_S[1]),
                              Integral] | None = None

    @model_validator(mode="after")
    def _rules(self) -> TaskCreate:
        if sum(getattr(self, target) is not None for target in _TARGETS) != 1:
            raise PydanticCustomError("rule", "give exactly one target: {targets}", {"targets": " or ".join(_TARGETS)})
        if self.kind is wire.TaskKind.SESSION:
            for name in _SESSION_HAS_NO:
                if name in self.model_fields_set:
                    raise PydanticCustomError("rule", "a session task has no {excludes}", {"excludes": name})
            return self
        for name in _SESSION_ONLY:
            if name in self.model_fields_set:
                raise PydanticCustomError("rule", "only a session task has {name}", {"name": name})
        needs, excludes = _KIND_NEEDS[self.kind.value]
        if getattr(self, needs) is None:
            raise PydanticCustomError("rule", "a {kind} task needs {needs}", {"kind": self.kind.value, "needs": needs})
        if excludes in self.model_fields_set:
            raise PydanticCustomError("rule", "a {kind} task has no {excludes}",
                                      {"kind": self.kind.value, "excludes": excludes})
        return self


class NoBody(OperatorBody):
    """What an operator route that takes no body accepts: nothing, or an empty object. A field
    sent there (``{"reason": "x"}`` on a drain) is a mistake, answered naming it, never ignored."""

    body_optional = True


# A run's tasks take its team and priority, and its idempotency key is the run's: a task of a
# run naming one of these is refused (one place to say each, the run).
_RUN_SETS = ("team", "priority", "idempotency_key")


def _run_task(task: TaskCreate) -> TaskCreate:
    if task.kind is wire.TaskKind.SESSION:
        raise PydanticCustomError("run", "a run's tasks are goals or workflows, not sessions", {})
    for name in _RUN_SETS:
        if name in task.model_fields_set:
            raise PydanticCustomError("run", "{name} is the run's: set it on the run, for every task", {"name": name})
    return task


_RUN_TASK_SCHEMA = {"description": f"a task of a run names none of {', '.join(_RUN_SETS)}: the run's apply; "
                                   "and is no session",
                    "not": {"anyOf": [*({"required": [name]} for name in _RUN_SETS),
                                      {"required": ["kind"], "properties": {"kind": {"const": "session"}}}]}}


class WorkItem(OperatorBody):
    """One work item of a run's matrix: a goal or a workflow, as a task names it."""

    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update(
        oneOf=[{"properties": {"kind": {"const": kind}}, "required": [needs], "not": {"required": [excludes]}}
               for kind, (needs, excludes) in _KIND_NEEDS.items()]))

    kind: Annotated[wire.TaskKind, Strict(False)]
    goal: Annotated[Text, Field(max_length=wire.MAX_GOAL_CHARS), Cleaned] | None = None
    workflow: Workflow | None = None
    max_steps: Annotated[int, Field(ge=1, le=MAX_STEPS), Integral] | None = None

    @model_validator(mode="after")
    def _rules(self) -> WorkItem:
        if self.kind.value not in _KIND_NEEDS:
            raise PydanticCustomError("rule", "a work item is a goal or a workflow, not a {kind}",
                                      {"kind": self.kind.value})
        needs, excludes = _KIND_NEEDS[self.kind.value]
        if getattr(self, needs) is None:
            raise PydanticCustomError("rule", "a {kind} work item needs {needs}",
                                      {"kind": self.kind.value, "needs": needs})
        if excludes in self.model_fields_set:
            raise PydanticCustomError("rule", "a {kind} work item has no {excludes}",
                                      {"kind": self.kind.value, "excludes": excludes})
        return self


class Matrix(OperatorBody):
    """Work items x every pooled, enabled device the selector matches when the run is created,
    each task pinned to its device."""

    work: Annotated[list[WorkItem], Field(min_length=1, max_length=wire.MAX_RUN_TASKS)]
    devices: Selector
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS), Integral] = DEFAULT_MAX_ATTEMPTS
    queue_timeout_s: Annotated[int, Field(ge=1, le=MAX_QUEUE_TIMEOUT_S), Integral] | None = None


def _run_rules(schema: dict[str, Any]) -> None:
    schema["oneOf"] = [{"required": ["tasks"], "not": {"required": ["matrix"]}},
                       {"required": ["matrix"], "not": {"required": ["tasks"]}}]


class RunCreate(OperatorBody):
    """Create a run (POST /api/v1/runs): a list of tasks, or a matrix; 1..MAX_RUN_TASKS tasks."""

    model_config = ConfigDict(json_schema_extra=_run_rules)

    name: Annotated[Text, Field(max_length=NAME_MAX_CHARS), Cleaned] | None = None
    tasks: Annotated[list[Annotated[TaskCreate, AfterValidator(_run_task), Field(json_schema_extra=_RUN_TASK_SCHEMA)]],
                     Field(min_length=1, max_length=wire.MAX_RUN_TASKS)] | None = None
    matrix: Matrix | None = None
    priority: Annotated[int, Field(ge=wire.PRIORITY_MIN, le=wire.PRIORITY_MAX), Integral] = wire.PRIORITY_DEFAULT
    team: Id | None = None
    idempotency_key: Id | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> RunCreate:
        if (self.tasks is None) == (self.matrix is None):
            raise PydanticCustomError("rule", "give exactly one of tasks or matrix")
        return self


class DeviceDisable(OperatorBody):
    """Disable a device (POST /api/v1/devices/{device_id}/disable); the body may be left out."""

    body_optional = True

    reason: Annotated[Text, Field(max_length=MAX_REASON_CHARS), Cleaned] | None = None


class TokenCreate(OperatorBody):
    """Create an enrollment token (POST /api/v1/enrollment-tokens); the body may be left out."""

    body_optional = True

    ttl_s: Annotated[int, Field(ge=1, le=MAX_TOKEN_TTL_S), Integral] = DEFAULT_TOKEN_TTL_S
    max_uses: Annotated[int, Field(ge=1, le=MAX_TOKEN_USES), Integral] = 1
    labels: Labels = {}


# One of the enum's wire strings (strict mode would want the member itself).
Scope = Annotated[wire.OperatorScope, Strict(False)]


def _not_bootstrap(name: str) -> str:
    if name == wire.BOOTSTRAP_ACTOR:
        raise PydanticCustomError("reserved", "{name} is the bootstrap admin's name; choose another",
                                  {"name": name})
    return name


def _distinct(scopes: list[wire.OperatorScope]) -> list[wire.OperatorScope]:
    if len(set(scopes)) != len(scopes):
        raise PydanticCustomError("duplicate", "each scope at most once")
    return scopes


class OperatorTokenCreate(OperatorBody):
    """Create an operator token (POST /api/v1/operator-tokens)."""

    name: Annotated[Id, AfterValidator(_not_bootstrap),
                    Field(json_schema_extra={"not": {"const": wire.BOOTSTRAP_ACTOR}})]
    scopes: Annotated[list[Scope], Field(min_length=1, json_schema_extra={"uniqueItems": True}),
                      AfterValidator(_distinct)]
    ttl_s: Annotated[int, Field(ge=wire.OPERATOR_TOKEN_TTL_MIN_S, le=wire.OPERATOR_TOKEN_TTL_MAX_S),
                     Integral] = wire.OPERATOR_TOKEN_TTL_DEFAULT_S
    team: Id | None = None


class TeamSettings(OperatorBody):
    """A team's share (PUT /api/v1/teams/{team}): either or both; ``max_devices: null`` lifts the
    cap."""

    nullable = frozenset({"max_devices"})

    weight: Annotated[int, Field(ge=wire.TEAM_WEIGHT_MIN, le=wire.TEAM_WEIGHT_MAX), Integral] | None = None
    max_devices: Annotated[int, Field(ge=0, le=INT32_MAX), Integral] | None = None


def _webhook_url(url: str) -> str:
    """An endpoint deliveries may be posted to: http or https, a host, and no credentials in it
    (they would sit in every listing, and a redirect-free POST has no use for them)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise PydanticCustomError("webhook_url", "is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PydanticCustomError("webhook_url", "must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise PydanticCustomError("webhook_url", "must not carry credentials (user:password@)")
    try:
        port = parts.port  # raises ValueError on a port out of range
    except ValueError:
        raise PydanticCustomError("webhook_url", "has an invalid port") from None
    if port == 0:  # no server listens there: the system would pick a port of its own
        raise PydanticCustomError("webhook_url", "has an invalid port")
    return url


# What the document says a webhook's URL is, so a client can tell a good one before sending it:
# http(s), a host name or IPv4 address (no user:password@, which has no character here), a port
# in range, then any printable ASCII. _webhook_url checks the same with the URL parser.
_PORT = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
WEBHOOK_URL_PATTERN = f"^https?://[A-Za-z0-9._-]+(?::{_PORT})?(?:[/?#][!-~]*)?$"
WebhookUrl = Annotated[str, StringConstraints(min_length=1, max_length=wire.WEBHOOK_URL_MAX_CHARS,
                                              pattern=WEBHOOK_URL_PATTERN),
                       AfterValidator(_webhook_url)]


WebhookEventName = Annotated[wire.WebhookEvent, Strict(False)]  # its wire string, as Scope


def _distinct_events(events: list[wire.WebhookEvent]) -> list[wire.WebhookEvent]:
    if len(set(events)) != len(events):
        raise PydanticCustomError("duplicate", "each event at most once")
    return events


class WebhookCreate(OperatorBody):
    """Register a webhook (POST /api/v1/webhooks): where to post, which events, and optionally
    the one team whose task and run events it hears of."""

    url: WebhookUrl
    events: Annotated[list[WebhookEventName], Field(min_length=1, json_schema_extra={"uniqueItems": True}),
                      AfterValidator(_distinct_events)]
    team: Id | None = None


