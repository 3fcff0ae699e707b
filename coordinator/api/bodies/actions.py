"""A live session's command (operator API): the action it carries, the workflow step vocabulary
and ``observe``."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

import wire
from coordinator.api.bodies.values import (
    NO_CONTROL,
    Integral,
    OperatorBody,
)

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


