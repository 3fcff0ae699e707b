"""One action on a device: its shape, how to parse it, how to perform it, how to describe it.

Workflow steps and planner replies use the same JSON shape (``{"action": "tap", "text": ...}``),
so both runners share this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import RunControl
from .driver import Driver
from .errors import ActionError, AssertionFailed

DEVICE_ACTIONS = ("tap", "type", "swipe", "key", "launch", "wait", "assert_text")
PLANNER_ACTIONS = ("tap", "type", "swipe", "key", "launch", "wait", "done", "fail")
ACTION_KINDS = (*DEVICE_ACTIONS, "done", "fail")
MAX_SUMMARY_CHARS = 200
MAX_WAIT_MS = 3_600_000
_ASSERT_POLL_S = 0.25


@dataclass(frozen=True)
class Action:
    """``kind`` decides which fields matter; ``__post_init__`` refuses an incomplete action."""

    kind: str
    x: int | None = None  # tap point, or swipe start
    y: int | None = None
    x2: int | None = None  # swipe end
    y2: int | None = None
    selector: str | None = None  # tap by element text or resource id
    text: str | None = None  # type / assert_text
    key: str | None = None
    app: str | None = None
    ms: int = 0  # wait
    duration_ms: int = 300  # swipe
    timeout_ms: int = 0  # assert_text keeps looking this long (screens take time to settle)
    reason: str | None = None  # done / fail

    def __post_init__(self) -> None:
        kind = self.kind
        if kind not in ACTION_KINDS:
            raise ActionError(f"unknown action {kind!r}")
        if kind == "tap" and not self.selector and (self.x is None or self.y is None):
            raise ActionError("tap needs 'text', 'id', or both 'x' and 'y'")
        if kind == "type" and self.text is None:
            raise ActionError("type needs 'text'")
        if kind == "assert_text" and not self.text:
            raise ActionError("assert_text needs a non-empty 'text'")
        if kind == "swipe" and None in (self.x, self.y, self.x2, self.y2):
            raise ActionError("swipe needs 'x1', 'y1', 'x2' and 'y2'")
        if kind == "key" and not self.key:
            raise ActionError("key needs 'key'")
        if kind == "launch" and not self.app:
            raise ActionError("launch needs 'app'")
        if not 0 <= self.ms <= MAX_WAIT_MS or not 0 <= self.timeout_ms <= MAX_WAIT_MS:
            raise ActionError(f"waits are between 0 and {MAX_WAIT_MS} ms")
        if not 0 <= self.duration_ms <= 60_000:
            raise ActionError("swipe duration_ms is between 0 and 60000")


def parse_action(data: Any, *, allowed: tuple[str, ...] = ACTION_KINDS) -> Action:
    """An ``Action`` from its JSON shape; ``ActionError`` says what is wrong. Unknown keys are
    ignored (models like to add a "reasoning" field)."""
    if not isinstance(data, Mapping):
        raise ActionError("an action is a JSON object")
    kind = data.get("action")
    if not isinstance(kind, str) or kind not in allowed:
        raise ActionError(f"'action' must be one of {', '.join(allowed)}; got {str(kind)[:40]!r}")
    if kind == "tap":
        selector = _opt_str(data, "text") or _opt_str(data, "id")
        if selector:
            return Action("tap", selector=selector)
        return Action("tap", x=_int(data, "x"), y=_int(data, "y"))
    if kind == "swipe":
        return Action(
            "swipe",
            x=_int(data, "x1"),
            y=_int(data, "y1"),
            x2=_int(data, "x2"),
            y2=_int(data, "y2"),
            duration_ms=_int(data, "duration_ms", 300),
        )
    if kind in ("type", "assert_text"):
        text = _opt_str(data, "text")
        if text is None:
            raise ActionError(f"{kind} needs 'text' (a string)")
        return Action(kind, text=text, timeout_ms=_int(data, "timeout_ms", 0))
    if kind == "key":
        return Action("key", key=_opt_str(data, "key"))
    if kind == "launch":
        return Action("launch", app=_opt_str(data, "app"))
    if kind == "wait":
        return Action("wait", ms=_int(data, "ms"))
    return Action(kind, reason=_opt_str(data, "reason"))  # done / fail


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ActionError(f"{key!r} must be a string")
    return value


def _int(data: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if value is None:
        raise ActionError(f"missing {key!r}")
    # bool is an int in Python, never a coordinate; strings come from "${param}" inside text.
    if isinstance(value, bool):
        raise ActionError(f"{key!r} must be a number")
    try:
        return round(float(value))
    except (TypeError, ValueError, OverflowError):
        raise ActionError(f"{key!r} must be a number") from None


async def perform(driver: Driver, action: Action, control: RunControl) -> bool:
    """Do ``action`` on the device; return True if the run was stopped while it waited.

    ``done`` and ``fail`` are decisions, not device actions: they do nothing here.
    """
    kind = action.kind
    if kind == "tap":
        if action.selector:
            await driver.tap_element(action.selector)
        else:
            await driver.tap(_req(action.x), _req(action.y))
    elif kind == "type":
        await driver.type_text(action.text or "")
    elif kind == "swipe":
        await driver.swipe(_req(action.x), _req(action.y), _req(action.x2), _req(action.y2), action.duration_ms)
    elif kind == "key":
        await driver.key(action.key or "")
    elif kind == "launch":
        await driver.launch_app(action.app or "")
    elif kind == "wait":
        return await control.sleep(action.ms / 1000)
    elif kind == "assert_text":
        return await _assert_text(driver, action.text or "", action.timeout_ms, control)
    return False


def _req(value: int | None) -> int:
    if value is None:  # unreachable: Action.__post_init__ checked it
        raise ActionError("incomplete action")
    return value


async def _assert_text(driver: Driver, text: str, timeout_ms: int, control: RunControl) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    while True:
        if text in (await driver.observe()).text:
            return False
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise AssertionFailed(f"text not on screen: {_quote(text)}")
        if await control.sleep(min(_ASSERT_POLL_S, remaining)):
            return True


# The line each kind of action is published as; a kind not here shows its reason, if any.
_SUMMARIES: dict[str, Callable[[Action], str]] = {
    "tap": lambda a: f"tap {_quote(a.selector)}" if a.selector else f"tap ({a.x}, {a.y})",
    "type": lambda a: f"type text ({len(a.text or '')} chars)",
    "swipe": lambda a: f"swipe ({a.x}, {a.y}) -> ({a.x2}, {a.y2})",
    "key": lambda a: f"key {a.key}",
    "launch": lambda a: f"launch {a.app}",
    "wait": lambda a: f"wait {a.ms} ms",
    "assert_text": lambda a: f"assert text {_quote(a.text)}",
}


def summarize(action: Action) -> str:
    """The short plain-text line a runner publishes for a step. Typed text is counted, never
    shown: it may be a password passed as a workflow parameter."""
    describe = _SUMMARIES.get(action.kind)
    if describe is not None:
        return clip(describe(action))
    return clip(f"{action.kind}: {action.reason}" if action.reason else action.kind)


def clip(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """One line of at most ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _quote(text: str | None) -> str:
    return repr(clip(text or "", 60))
