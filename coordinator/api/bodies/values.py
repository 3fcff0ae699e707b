"""What every request body is made of: the bounds, the values (ids, labels, free text and what it
may not hold, strict integers) and the two base models, ``HostBody`` and ``OperatorBody``, whose
rules are drawn in ``coordinator/api/bodies/__init__.py``."""
from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationInfo,
    field_validator,
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

