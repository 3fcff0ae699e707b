"""Headless Chromium driven by Playwright (issue 53 §7: a maintained driver, not a DevTools client of ours).

``Chromium`` launches the system's Chromium (``executable_path``: Playwright downloads no browser)
and opens each ``Tab`` in a browser context of its own, so tabs share no storage. A ``Tab`` is a
Playwright page plus what the dashboard's tests read of it: every request it made (URL and
headers) and every error its scripts threw or logged. Its methods are the vocabulary the tests
speak (an expression's value, poll until an expression holds, click, type, press).

Playwright's async API runs on an event loop of its own thread, and each method hands it one
call. Its sync API would be shorter, but it marks the test's thread as running an event loop
between calls, and the session's browser lives as long as the pytest worker: every async test
that worker ran after a browser test would fail ("another loop is running").
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from playwright.async_api import ConsoleMessage, Page, Request, Route, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

T = TypeVar("T")
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# How long one action (a click, a navigation, an expression) may take before the test fails: a
# loaded two-core CI machine shares its cores with the coordinator, the agents and Redis.
ACTION_TIMEOUT_S = 15.0


def find_chromium() -> str | None:
    """The browser executable: ``$CHROMIUM`` if set, else the first of ``NAMES`` on the PATH."""
    configured = os.environ.get("CHROMIUM")
    if configured:
        return shutil.which(configured) or configured
    return next((path for name in NAMES if (path := shutil.which(name))), None)


class _Loop:
    """An event loop on a thread of its own, to which a caller hands a coroutine and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="playwright", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = ACTION_TIMEOUT_S) -> T:
        """The coroutine's result. ``timeout`` bounds the wait for a call with no timeout of its
        own (an expression that never settles); Playwright's own timeouts fire first otherwise."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout + 5)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Chromium:
    """One headless Chromium process under Playwright. Use as a context manager."""

    def __init__(self, executable: str, *, window: tuple[int, int] = (1400, 1000)) -> None:
        self.window = window
        self._loop = _Loop()
        try:
            self._playwright = self._loop.run(async_playwright().start(), 60)
            # Playwright runs Chromium without its sandbox unless asked (it refuses to run as
            # root, as CI does), and with a hidden tab's timers unthrottled.
            self._browser = self._loop.run(self._playwright.chromium.launch(
                executable_path=executable, args=["--disable-gpu", "--disable-extensions", "--mute-audio"]), 60)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def new_tab(self) -> Tab:
        """A blank tab in a browser context of its own (no storage shared with other tabs)."""
        async def open_tab() -> Page:
            context = await self._browser.new_context(viewport={"width": self.window[0], "height": self.window[1]})
            context.set_default_timeout(ACTION_TIMEOUT_S * 1000)
            return await context.new_page()

        return Tab(self._loop, self._loop.run(open_tab()))

    def close(self) -> None:
        try:
            if hasattr(self, "_browser"):
                self._loop.run(self._browser.close())
            if hasattr(self, "_playwright"):
                self._loop.run(self._playwright.stop())
        finally:
            self._loop.close()


class Tab:
    """One tab. ``sent`` lists every request it made as ``(url, headers)`` (headers read without
    regard to case), and ``console_errors`` every exception its scripts threw and every
    ``console.error`` they called, in order."""

    def __init__(self, loop: _Loop, page: Page) -> None:
        self._loop = loop
        self._page = page
        self.sent: list[tuple[str, httpx.Headers]] = []
        self.console_errors: list[str] = []
        loop.run(self._listen())

    async def _listen(self) -> None:
        # On the loop's thread, where the page's events are emitted.
        self._page.on("request", self._request)
        self._page.on("pageerror", lambda error: self.console_errors.append(error.stack or error.message))
        self._page.on("console", self._console)

    def _request(self, request: Request) -> None:
        self.sent.append((request.url, httpx.Headers(request.headers)))

    def _console(self, message: ConsoleMessage) -> None:
        # Chromium also logs each failed load (a 401 the page expects) as a console error; those
        # come from the browser, not from a script, and carry no arguments.
        if message.type == "error" and message.args:
            self.console_errors.append(message.text)

    @property
    def requests(self) -> list[str]:
        """The URL of every request made so far."""
        return [url for url, _ in self.sent]

    def goto(self, url: str, timeout: float = ACTION_TIMEOUT_S) -> None:
        """Navigate and wait for the load event."""
        self._loop.run(self._page.goto(url, wait_until="load", timeout=timeout * 1000), timeout)

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        return self._loop.run(self._page.evaluate(expression))

    def wait_for(self, expression: str, timeout: float = 15.0, what: str | None = None) -> Any:
        """Poll a JavaScript expression in the page until it is truthy (in JavaScript's sense); its value."""
        async def wait() -> Any:
            # As a function, not a bare expression: Playwright would eval a bare one in the page,
            # which the dashboard's Content-Security-Policy (no 'unsafe-eval') forbids.
            handle = await self._page.wait_for_function(f"() => (\n{expression}\n)", polling=20,
                                                        timeout=timeout * 1000)
            try:
                return await handle.json_value()
            finally:
                await handle.dispose()

        try:
            return self._loop.run(wait(), timeout)
        except PlaywrightTimeout:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or expression}") from None

    def text(self, selector: str) -> str | None:
        """The text of the first element matching ``selector``, or None."""
        return self.js(f"document.querySelector({json.dumps(selector)})?.textContent ?? null")

    def type_into(self, selector: str, text: str) -> None:
        """Focus an input, clear it, and type ``text`` into it as one input."""
        self._loop.run(self._page.fill(selector, text))

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the first element matching ``selector``, once it is
        visible, stands still and would receive the click (Playwright's actionability checks): a
        page still laying out what the feed brought would otherwise move it under the pointer."""
        self._loop.run(self._page.click(selector))

    def refuse_once(self, path: str, status: int, error: dict[str, str], headers: dict[str, str] | None = None) -> None:
        """The next request to ``path`` (any query) is answered ``status`` with the contract's
        ``{"error": error}`` without reaching the coordinator, as a coordinator under load or
        restarting answers it; the requests after it go through."""
        def matches(url: str) -> bool:
            return httpx.URL(url).path == path

        async def refuse(route: Route) -> None:
            await route.fulfill(status=status, content_type="application/json", headers=headers or {},
                                body=json.dumps({"error": error}))

        self._loop.run(self._page.route(matches, refuse, times=1))

    def press_enter(self) -> None:
        self._loop.run(self._page.keyboard.press("Enter"))

    def drag(self, start: tuple[float, float], end: tuple[float, float]) -> None:
        """A real mouse press at ``start`` released at ``end`` (CSS pixels from the window's top
        left): a click where the two are the same point."""
        async def drag() -> None:
            mouse = self._page.mouse
            await mouse.move(*start)
            await mouse.down()
            if end != start:
                await mouse.move(*end)
            await mouse.up()

        self._loop.run(drag())

    def resize(self, width: int, height: int) -> None:
        """The window's size in CSS pixels, as a person resizing it would set it."""
        self._loop.run(self._page.set_viewport_size({"width": width, "height": height}))

    def screenshot(self, path: Path) -> None:
        """The whole page, not only the part in the window, as a PNG."""
        self._loop.run(self._page.screenshot(path=path, full_page=True), 60)

    def close(self) -> None:
        self._loop.run(self._page.context.close())
