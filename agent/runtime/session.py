"""One command of a live session on a device: the action performed, then what the screen shows.

A session command (PROTOCOL.md, "Live sessions") is an action of the workflow step vocabulary
(``agent/runtime/actions.py``: ``tap`` by point or by ``text``/``id``, ``type``, ``swipe``,
``key``, ``launch``, ``wait``) or ``{"action": "observe"}``, optionally with ``"observe":
false``. ``perform_command`` validates it with the workflow's own parser, performs it with the
device's driver, and (unless ``observe`` is false) takes the screenshot and the element list.

A command that cannot be done (malformed, an element not on screen, a key the device lacks, a
driver error) answers ``failed`` with one line: the session goes on. Only ``DeviceLost`` (adb
lost the phone) is raised: then the session cannot go on. The agent side (``agent/session_run.py``)
uploads the screen and delivers the answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .actions import DEVICE_ACTIONS, clip, parse_action, perform
from .base import RunControl
from .driver import Driver, UINode, iter_nodes
from .errors import ActionError, DeviceLost, DriverError

OBSERVE = "observe"
# What a session may do to a device: the workflow's device actions, less its assertion (a
# session's caller looks at the screen itself), plus ``observe``.
SESSION_ACTIONS = tuple(kind for kind in DEVICE_ACTIONS if kind != "assert_text")
MAX_ELEMENTS = 500
ERROR_MAX_CHARS = 200


@dataclass(frozen=True, repr=False)
class CommandAnswer:
    """What one command came to: ``done`` or ``failed`` (``error``: one line), the driver's time,
    and, when observed, the screen (PNG bytes, uploaded before the answer is delivered), the
    device's size in its own pixels (what a point of ``tap`` means) and the elements."""

    status: str
    error: str | None
    duration_ms: int
    screen: bytes | None = None
    width: int = 0
    height: int = 0
    elements: list[dict[str, Any]] = field(default_factory=list)

    def __repr__(self) -> str:  # never the screen's bytes, nor the elements' text, in a log
        shot = f"{len(self.screen)} bytes" if self.screen is not None else "none"
        return f"CommandAnswer(status={self.status!r}, duration_ms={self.duration_ms}, screen={shot})"


def elements_of(tree: UINode, limit: int = MAX_ELEMENTS) -> list[dict[str, Any]]:
    """The screen's elements a person or a program can act on, in reading order: every node with
    an area and a text, an id or a tap target (bare layout containers are left out), at most
    ``limit``. Each is ``{"text", "id", "bounds": [x1, y1, x2, y2], "clickable"}``."""
    elements: list[dict[str, Any]] = []
    for node in iter_nodes(tree):
        x1, y1, x2, y2 = node["bounds"]
        if x2 <= x1 or y2 <= y1 or not (node["text"].strip() or node["resource_id"] or node["clickable"]):
            continue
        elements.append({"text": node["text"], "id": node["resource_id"], "bounds": [x1, y1, x2, y2],
                         "clickable": node["clickable"]})
        if len(elements) >= limit:
            break
    return elements


def _wants_observation(action: Mapping[str, Any]) -> bool:
    return action.get("observe") is not False


async def perform_command(driver: Driver, action: Any, control: RunControl) -> CommandAnswer:
    """Do ``action`` (a command's ``action`` object) on ``driver``; raises only ``DeviceLost``."""
    started = time.perf_counter()
    try:
        if not isinstance(action, Mapping):
            raise ActionError("an action is a JSON object")
        if action.get("action") != OBSERVE:
            await perform(driver, parse_action(action, allowed=SESSION_ACTIONS), control)
    except DeviceLost:
        raise
    except (ActionError, DriverError) as exc:  # ElementNotFound is a DriverError
        return CommandAnswer("failed", clip(str(exc) or type(exc).__name__, ERROR_MAX_CHARS), _ms_since(started))
    if not _wants_observation(action):
        return CommandAnswer("done", None, _ms_since(started))
    try:
        observation = await driver.observe()
        screen = await driver.screenshot()
    except DeviceLost:
        raise
    except DriverError as exc:
        # The action was done; only the look after it failed. Said so, in one line.
        return CommandAnswer("failed", clip(f"done, but the screen could not be read: {exc}", ERROR_MAX_CHARS),
                             _ms_since(started))
    _, _, width, height = observation.tree["bounds"]
    return CommandAnswer("done", None, _ms_since(started), screen=screen, width=width, height=height,
                         elements=elements_of(observation.tree))


def _ms_since(started: float) -> int:
    return max(0, round((time.perf_counter() - started) * 1000))
