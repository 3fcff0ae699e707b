"""The one interface every device driver implements, and the UI-tree shape they all return.

A UI tree is plain nested dicts (``UINode``) so the sim driver, the adb driver (parsed from a
``uiautomator`` dump) and the planners all share one shape without conversion layers.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypedDict

from .errors import DriverError, ElementNotFound

Bounds = tuple[int, int, int, int]  # x1, y1, x2, y2 in screen pixels, x2/y2 exclusive


class UINode(TypedDict):
    text: str  # visible text (for adb: ``text``, or ``content-desc`` when the text is empty)
    resource_id: str  # e.g. "settings:id/airplane_mode"; "" when the view has none
    class_name: str
    clickable: bool
    checked: bool | None  # None when the view is not checkable
    focused: bool
    bounds: Bounds
    children: list[UINode]


def make_node(
    text: str = "",
    *,
    bounds: Bounds,
    resource_id: str = "",
    class_name: str = "View",
    clickable: bool = False,
    checked: bool | None = None,
    focused: bool = False,
    children: list[UINode] | None = None,
) -> UINode:
    return UINode(
        text=text,
        resource_id=resource_id,
        class_name=class_name,
        clickable=clickable,
        checked=checked,
        focused=focused,
        bounds=bounds,
        children=children or [],
    )


def iter_nodes(tree: UINode) -> Iterator[UINode]:
    """Depth-first, document order: the order a reader sees the screen."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node["children"]))


def flatten_text(tree: UINode) -> str:
    return "\n".join(text for node in iter_nodes(tree) if (text := node["text"].strip()))


def centre(bounds: Bounds) -> tuple[int, int]:
    x1, y1, x2, y2 = bounds
    return (x1 + x2) // 2, (y1 + y2) // 2


def contains(bounds: Bounds, x: int, y: int) -> bool:
    x1, y1, x2, y2 = bounds
    return x1 <= x < x2 and y1 <= y < y2


def _has_area(node: UINode) -> bool:
    x1, y1, x2, y2 = node["bounds"]
    return x2 > x1 and y2 > y1


def find_node(tree: UINode, selector: str) -> UINode | None:
    """The node a human means by ``selector``: its text, or its resource id.

    Tried from most to least specific (exact text, exact id, id suffix such as ``editor`` for
    ``notes:id/editor``, case-insensitive text); among equal matches a clickable one wins,
    because a selector is almost always used to tap.
    """
    wanted = selector.strip()
    if not wanted:
        return None
    folded = wanted.casefold()
    nodes = [node for node in iter_nodes(tree) if _has_area(node)]
    rules: tuple[Callable[[UINode], bool], ...] = (
        lambda n: n["text"].strip() == wanted,
        lambda n: n["resource_id"] == wanted,
        lambda n: n["resource_id"].endswith("/" + wanted),
        lambda n: n["text"].strip().casefold() == folded,
    )
    for rule in rules:
        hits = [node for node in nodes if rule(node)]
        if hits:
            return next((node for node in hits if node["clickable"]), hits[0])
    return None


@dataclass(frozen=True, repr=False)
class Observation:
    """What a driver sees: the UI tree, its visible text, and a screenshot only when asked for.

    Runners never put any of this into ``Progress``; only planners read it.
    """

    tree: UINode
    text: str
    screenshot: bytes | None = None

    @classmethod
    def from_tree(cls, tree: UINode, screenshot: bytes | None = None) -> Observation:
        return cls(tree=tree, text=flatten_text(tree), screenshot=screenshot)

    def find(self, selector: str) -> UINode | None:
        return find_node(self.tree, selector)

    def nodes(self) -> Iterator[UINode]:
        return iter_nodes(self.tree)

    def __repr__(self) -> str:
        # Keep logs small: never the tree or the screenshot bytes.
        shot = f"{len(self.screenshot)} bytes" if self.screenshot is not None else "none"
        return f"Observation(text={self.text[:60]!r}, screenshot={shot})"


class Driver(abc.ABC):
    """One device. Coordinates are screen pixels; every method may raise ``DriverError``."""

    driver: str  # "sim", "adb"
    local_id: str  # the id this host knows the device by (sim name, adb serial)

    @abc.abstractmethod
    def attributes(self) -> dict[str, str]:
        """Static facts for the device snapshot: model, os_version, ..."""

    @property
    def online(self) -> bool:
        """Whether the device can be driven now, as far as the driver knows without asking the
        device: it is read for every heartbeat, so it must be cheap. A simulated phone always is."""
        return True

    @abc.abstractmethod
    async def observe(self, *, screenshot: bool = False) -> Observation: ...

    async def screenshot(self) -> bytes:
        """The screen now, as PNG bytes (a run's evidence: ``agent/artifacts.py``). Drivers with
        a cheaper way than a full ``observe`` override it."""
        shot = (await self.observe(screenshot=True)).screenshot
        if not shot:
            raise DriverError(f"{self.driver} device {self.local_id} gave no screenshot")
        return shot

    @abc.abstractmethod
    async def tap(self, x: int, y: int) -> None: ...

    @abc.abstractmethod
    async def type_text(self, text: str) -> None:
        """Type into the focused field (tap the field first)."""

    @abc.abstractmethod
    async def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int = 300) -> None: ...

    @abc.abstractmethod
    async def key(self, name: str) -> None:
        """Press a named key: "home", "back", "enter" (drivers may know more)."""

    @abc.abstractmethod
    async def launch_app(self, app: str) -> None: ...

    async def tap_element(self, selector: str) -> None:
        """Tap the centre of the node matching ``selector`` (text or resource id)."""
        node = (await self.observe()).find(selector)
        if node is None:
            raise ElementNotFound(selector)
        await self.tap(*centre(node["bounds"]))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.driver}:{self.local_id}>"
