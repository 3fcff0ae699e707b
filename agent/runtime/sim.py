"""An in-process simulated phone with real state, for demos and tests.

It has a home screen, a Settings app (Airplane mode, Wi-Fi, Bluetooth toggles) and a Notes app
(a text field, a Save button and the list of saved notes). The screen is rendered from state on
every call, with real pixel bounds, and ``tap(x, y)`` hits whatever is drawn under the point, so
planners and workflows exercise the same coordinate path they use on a real device.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from .driver import Bounds, Driver, Observation, UINode, contains, make_node
from .errors import DriverError
from .screen_png import render_png

WIDTH, HEIGHT = 1080, 1920
APPS = {"settings": "com.android.settings", "notes": "com.tether.notes"}
TOGGLES = {"Airplane mode": "airplane_mode", "Wi-Fi": "wifi", "Bluetooth": "bluetooth"}

_ROW_HEIGHT = 180
_NOTE_HEIGHT = 120
_Target = tuple[Bounds, Callable[[], None]]


class SimDriver(Driver):
    driver = "sim"

    def __init__(self, local_id: str, *, model: str = "Tether Sim", os_version: str = "14") -> None:
        self.local_id = local_id
        self._model = model
        self._os_version = os_version
        self.screen = "home"  # "home" or an app name from APPS
        self.toggles = {"Airplane mode": False, "Wi-Fi": True, "Bluetooth": False}
        self.draft = ""
        self.editor_focused = False
        self.notes: list[str] = []
        # Everything done to the phone, in order: lets tests prove that a stopped run did nothing more.
        self.actions: list[str] = []

    def attributes(self) -> dict[str, str]:
        return {
            "model": self._model,
            "os_version": self._os_version,
            "screen": f"{WIDTH}x{HEIGHT}",
        }

    async def observe(self, *, screenshot: bool = False) -> Observation:
        await asyncio.sleep(0)  # a real device call is a suspension point; keep the sim honest
        tree, _ = self._render()
        return Observation.from_tree(tree, await self._picture(tree) if screenshot else None)

    async def screenshot(self) -> bytes:
        """A PNG of the screen as drawn now, captioned with the last thing done to the phone."""
        await asyncio.sleep(0)
        tree, _ = self._render()
        return await self._picture(tree)

    async def _picture(self, tree: UINode) -> bytes:
        caption = self.actions[-1] if self.actions else "ready"
        # Drawn from the tree taken above, off the event loop: renewals do not wait for pixels.
        return await asyncio.to_thread(render_png, tree, WIDTH, HEIGHT, f"{self.screen}: {caption}")

    async def tap(self, x: int, y: int) -> None:
        await asyncio.sleep(0)
        self.actions.append(f"tap {x} {y}")
        _, targets = self._render()
        # Later targets are drawn on top of earlier ones, as in a real view hierarchy.
        for bounds, on_tap in reversed(targets):
            if contains(bounds, x, y):
                on_tap()
                return

    async def type_text(self, text: str) -> None:
        await asyncio.sleep(0)
        self.actions.append(f"type {len(text)} chars")
        # Like a phone: keystrokes with no focused field go nowhere.
        if self.screen == "notes" and self.editor_focused:
            self.draft += text

    async def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int = 300) -> None:
        await asyncio.sleep(0)
        self.actions.append(f"swipe {x1} {y1} {x2} {y2} {duration_ms}")  # nothing here scrolls

    async def key(self, name: str) -> None:
        await asyncio.sleep(0)
        key = name.strip().lower()
        if key not in ("home", "back", "enter"):
            raise DriverError(f"sim phone has no key {name!r}")
        self.actions.append(f"key {key}")
        if key == "home":
            self._go("home")
        elif key == "back":
            if self.editor_focused:
                self.editor_focused = False  # back first hides the keyboard
            else:
                self._go("home")
        elif self.editor_focused:
            self.draft += "\n"

    async def launch_app(self, app: str) -> None:
        await asyncio.sleep(0)
        wanted = app.strip().lower()
        for name, package in APPS.items():
            if wanted in (name, package):
                self.actions.append(f"launch {name}")
                self._go(name)
                return
        raise DriverError(f"app {app!r} is not installed on the sim phone")

    def _go(self, screen: str) -> None:
        self.screen = screen
        self.editor_focused = False

    def _toggle(self, label: str) -> None:
        self.toggles[label] = not self.toggles[label]

    def _focus_editor(self) -> None:
        self.editor_focused = True

    def _save(self) -> None:
        if self.draft.strip():
            self.notes.append(self.draft)
        self.draft = ""
        self.editor_focused = False

    def _render(self) -> tuple[UINode, list[_Target]]:
        targets: list[_Target] = []
        if self.screen == "settings":
            children = self._render_settings(targets)
        elif self.screen == "notes":
            children = self._render_notes(targets)
        else:
            children = self._render_home(targets)
        root = make_node(bounds=(0, 0, WIDTH, HEIGHT), class_name="FrameLayout", children=children)
        return root, targets

    def _render_home(self, targets: list[_Target]) -> list[UINode]:
        nodes = []
        for column, (name, title) in enumerate((("settings", "Settings"), ("notes", "Notes"))):
            bounds = (60 + column * 520, 400, 500 + column * 520, 700)
            nodes.append(
                make_node(
                    title,
                    bounds=bounds,
                    resource_id=f"home:id/app_{name}",
                    class_name="TextView",
                    clickable=True,
                )
            )
            targets.append((bounds, functools.partial(self._go, name)))
        return nodes

    def _render_settings(self, targets: list[_Target]) -> list[UINode]:
        nodes = [_title("Settings")]
        for row, (label, ident) in enumerate(TOGGLES.items()):
            top = 200 + row * _ROW_HEIGHT
            bounds = (0, top, WIDTH, top + _ROW_HEIGHT)
            on = self.toggles[label]
            switch = make_node(
                "On" if on else "Off",
                bounds=(860, top + 50, 1040, top + 130),
                resource_id=f"settings:id/{ident}_switch",
                class_name="Switch",
                checked=on,
            )
            nodes.append(
                make_node(
                    label,
                    bounds=bounds,
                    resource_id=f"settings:id/{ident}",
                    class_name="LinearLayout",
                    clickable=True,
                    checked=on,
                    children=[switch],
                )
            )
            targets.append((bounds, functools.partial(self._toggle, label)))
        return nodes

    def _render_notes(self, targets: list[_Target]) -> list[UINode]:
        editor_bounds = (40, 220, 1040, 520)
        save_bounds = (760, 560, 1040, 680)
        nodes = [
            _title("Notes"),
            make_node(
                self.draft,
                bounds=editor_bounds,
                resource_id="notes:id/editor",
                class_name="EditText",
                clickable=True,
                focused=self.editor_focused,
            ),
            make_node("Save", bounds=save_bounds, resource_id="notes:id/save", class_name="Button", clickable=True),
        ]
        targets.append((editor_bounds, self._focus_editor))
        targets.append((save_bounds, self._save))
        if not self.notes:
            nodes.append(make_node("No notes yet", bounds=(40, 740, 1040, 850), class_name="TextView"))
        # Newest first; what does not fit on the screen is not drawn (and not in the tree).
        for index, note in enumerate(reversed(self.notes)):
            top = 740 + index * _NOTE_HEIGHT
            if top + _NOTE_HEIGHT > HEIGHT:
                break
            nodes.append(
                make_node(
                    note,
                    bounds=(40, top, 1040, top + _NOTE_HEIGHT - 10),
                    resource_id="notes:id/note",
                    class_name="TextView",
                )
            )
        return nodes


def _title(text: str) -> UINode:
    return make_node(text, bounds=(0, 0, WIDTH, 200), resource_id="app:id/title", class_name="TextView")
