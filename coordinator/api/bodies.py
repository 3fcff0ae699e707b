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
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    Strict,
    StringConstraints,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

import wire

# -- bounds ----------------------------------------------------------------------------------

MAX_ATTEMPTS = 100
DEFAULT_MAX_ATTEMPTS = 3
MAX_STEPS = 10_000
DEFAULT_GOAL_MAX_STEPS = 30
MAX_QUEUE_TIMEOUT_S = 365 * 24 * 3600
MAX_TOKEN_TTL_S = 30 * 24 * 3600
DEFAULT_TOKEN_TTL_S = 3600
MAX_TOKEN_USES = 100_000
MAX_REASON_CHARS = 256
NAME_MAX_CHARS = 200  # a run's name
# Labels (selectors, enrollment tokens, heartbeats): a flat object of short strings.
LABELS_MAX_ITEMS = 64
LABEL_MAX_CHARS = 256
# What a host calls itself (enrollment, a heartbeat's agent), and its agent's version.
HOSTNAME_MAX_CHARS = 255
# A heartbeat's agent.capabilities: each kind a list of at most this many names (ids).
MAX_CAPABILITY_NAMES = 1000
INT32_MAX = 2**31 - 1  # an integer's bound unless its field says less

# The deployment's COORDINATOR_MAX_DEVICES_PER_HOST bounds the lists marked with this: more is
# 409 device_limit, not 400, so the model leaves them open and the document (openapi.py) writes
# the deployment's number in.
PER_HOST_DEVICES = "x-per-host-devices"

# -- values ----------------------------------------------------------------------------------

# Characters never stored in text (PROTOCOL.md, "Conventions"): the C0 controls (tab and newline
# aside) and the C1 controls U+0080..U+009F (they corrupt terminals and logs), and what else XML
# 1.0 forbids, lone surrogates and U+FFFE, U+FFFF (every report and view built from the text stays
# well-formed: a run's JUnit report). Free text loses them, and must hold something else; an id, a
# key or a secret that holds one is refused, since stripping would make two different ones the
# same. As patterns for the models (and the document); a lone surrogate never gets this far (the
# JSON parser refuses one), but text from elsewhere loses it as well.
_BANNED = "\\x00-\\x08\\x0b-\\x1f\\x80-\\x9f\\ufffe\\uffff"
NO_CONTROL = f"^[^{_BANNED}]*$"
SOME_TEXT = f"[^{_BANNED}]"
_UNSTORED = re.compile("[\x00-\x08\x0b-\x1f\x80-\x9f\ud800-\udfff\ufffe\uffff]")


def clean_text(value: str) -> str:
    """Free text without the characters never stored: C0 (tab and newline aside) and C1 controls,
    lone surrogates, U+FFFE and U+FFFF."""
    return _UNSTORED.sub("", value) if _UNSTORED.search(value) else value


def clean_free(value: Any) -> Any:
    """A free-form JSON value (attributes, metadata, params) with clean_text applied to every
    string in it, object keys included: all of it is free text, matched by nothing."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_free(item) for item in value]
    if isinstance(value, dict):
        return {clean_text(k): clean_free(v) for k, v in value.items()}
    return value


def _integral(value: Any) -> Any:
    """``3.0`` is the integer 3 (JSON Schema says so too); anything else goes to the strict check."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer is ``Annotated[int, Field(ge=..., le=...), Integral]``: a bool or a string is none,
# and the bounds come before Integral, so that they are the int's own (and the document's).
Integral = BeforeValidator(_integral)
# Free text, bounded by its field (``Field(max_length=...)``, judged as sent), holding something
# besides controls; ``Cleaned`` after the bound stores it without them (clean_text).
Text = Annotated[str, StringConstraints(min_length=1, pattern=SOME_TEXT)]
Cleaned = AfterValidator(clean_text)
Id = Annotated[str, StringConstraints(pattern=f"^{wire.ID_PATTERN}$")]
# A label is a key that selectors match by equality: judged as sent, a control in it refused.
_LabelName = Annotated[str, StringConstraints(min_length=1, max_length=LABEL_MAX_CHARS, pattern=NO_CONTROL)]
_LabelValue = Annotated[str, StringConstraints(max_length=LABEL_MAX_CHARS, pattern=NO_CONTROL)]
Labels = Annotated[dict[_LabelName, _LabelValue], Field(max_length=LABELS_MAX_ITEMS)]


# A free-form JSON object (attributes, metadata, params): its every string is free text.
FreeObject = Annotated[dict[str, Any], AfterValidator(clean_free)]


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


class RequestBody(BaseModel):
    """A request's JSON body. ``body_optional``: a request may come without one (no byte at all),
    read as ``{}``."""

    body_optional: ClassVar[bool] = False


class HostBody(RequestBody):
    """A body of the host API: unknown fields ignored, values strict."""

    model_config = ConfigDict(extra="ignore", strict=True)


class OperatorBody(RequestBody):
    """A body of the operator API: unknown fields refused, none null, values strict."""

    model_config = ConfigDict(extra="forbid", strict=True)
    # The fields where null says something (``max_devices: null``: no cap); null elsewhere is refused.
    nullable: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any, info: ValidationInfo) -> Any:
        # Runs only on fields that were sent: a field left out takes its default.
        if value is None and info.field_name not in cls.nullable:
            raise PydanticCustomError("null", "must not be null: give a value or leave it out")
        return value

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The document says what ``_not_null`` does: a field is left out, never null, so an
        optional field's schema is its value's alone."""
        json_schema = handler.resolve_ref_schema(handler(schema))
        for name, field in list(json_schema.get("properties", {}).items()):
            if name in cls.nullable:
                continue
            options = field.get("anyOf", ())
            values = [option for option in options if option != {"type": "null"}]
            if len(values) < len(options):
                rest = {k: v for k, v in field.items() if k != "anyOf" and not (k == "default" and v is None)}
                json_schema["properties"][name] = (
                    {**values[0], **rest} if len(values) == 1 else {"anyOf": values, **rest})
        return json_schema


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


# -- live sessions (PROTOCOL.md, "Live sessions") --------------------------------------------
# A command's action: the workflow step vocabulary (what agent/runtime/actions.py performs) and
# `observe`; each answers with the screen after it unless "observe": false.

_Coordinate = Annotated[int, Field(ge=0, le=100_000), Integral]
_ActionText = Annotated[str, StringConstraints(max_length=wire.MAX_GOAL_CHARS, pattern=NO_CONTROL)]
_ActionName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NO_CONTROL)]


class _Action(OperatorBody):
    observe: bool = True


_TAP_BY = (("x", "y"), ("text",), ("id",))


def _tap_rules(schema: dict[str, Any]) -> None:
    schema["oneOf"] = [{"required": list(way), "not": {"anyOf": [
        {"required": [name]} for other in _TAP_BY if other != way for name in other]}} for way in _TAP_BY]


class TapAction(_Action):
    """A tap at a point (x, y, in the device's pixels), or on the element of a text or a resource id."""

    model_config = ConfigDict(json_schema_extra=_tap_rules)

    action: Literal["tap"]
    x: _Coordinate | None = None
    y: _Coordinate | None = None
    text: Annotated[_ActionText, StringConstraints(min_length=1)] | None = None
    id: _ActionName | None = None

    @model_validator(mode="after")
    def _rules(self) -> TapAction:
        point = self.x is not None or self.y is not None
        if point and (self.x is None or self.y is None):
            raise PydanticCustomError("rule", "a tap by point needs both x and y")
        if point + (self.text is not None) + (self.id is not None) != 1:
            raise PydanticCustomError("rule", "a tap gives exactly one of: x and y, text, id")
        return self


class TypeAction(_Action):
    action: Literal["type"]
    text: _ActionText


class SwipeAction(_Action):
    action: Literal["swipe"]
    x1: _Coordinate
    y1: _Coordinate
    x2: _Coordinate
    y2: _Coordinate
    duration_ms: Annotated[int, Field(ge=0, le=60_000), Integral] = 300


class KeyAction(_Action):
    action: Literal["key"]
    key: _ActionName


class LaunchAction(_Action):
    action: Literal["launch"]
    app: _ActionName


class WaitAction(_Action):
    action: Literal["wait"]
    ms: Annotated[int, Field(ge=0, le=60_000), Integral]


class ObserveAction(_Action):
    action: Literal["observe"]


_ACTION_MODELS: dict[str, type[_Action]] = {"tap": TapAction, "type": TypeAction, "swipe": SwipeAction,
                                             "key": KeyAction, "launch": LaunchAction, "wait": WaitAction,
                                             "observe": ObserveAction}
SESSION_ACTIONS = tuple(_ACTION_MODELS)


def _action_kind(value: Any) -> str | None:
    kind = value.get("action") if isinstance(value, dict) else getattr(value, "action", None)
    return kind if isinstance(kind, str) and kind in _ACTION_MODELS else None


SessionAction = Annotated[
    Annotated[TapAction, Tag("tap")] | Annotated[TypeAction, Tag("type")] | Annotated[SwipeAction, Tag("swipe")]
    | Annotated[KeyAction, Tag("key")] | Annotated[LaunchAction, Tag("launch")] | Annotated[WaitAction, Tag("wait")]
    | Annotated[ObserveAction, Tag("observe")],
    Discriminator(_action_kind, custom_error_type="action",
                  custom_error_message=f"'action' must be one of {', '.join(_ACTION_MODELS)}")]


class CommandCreate(OperatorBody):
    """One command for a running session (POST /api/v1/tasks/{task_id}/commands)."""

    action: SessionAction


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


# The document's name of each request body is its model's name (routes.py names them).
REQUESTS: tuple[type[RequestBody], ...] = (Enroll, DeviceEnroll, Heartbeat, Claim, Renew, Renewals, Result,
                                          TaskCreate, DeviceDisable, TokenCreate, OperatorTokenCreate, TeamSettings,
                                          RunCreate, WebhookCreate, CommandCreate, CommandsPoll)
