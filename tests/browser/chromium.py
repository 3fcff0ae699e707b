"""Headless Chromium driven over the Chrome DevTools Protocol (a WebSocket; no other library).

``Chromium`` starts the browser with ``--remote-debugging-port=0`` and a fresh profile, reads the
port it chose from ``DevToolsActivePort`` in that profile, and speaks the protocol over one
connection to the browser target. A background thread reads every message: answers go to the
call waiting for them, events to the ``Page`` (a tab in its own browser context, so tabs share no
storage) whose session they belong to.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Self

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support import stop_process, wait_until

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CALL_TIMEOUT_S = 15.0


def find_chromium() -> str | None:
    """The browser executable: ``$CHROMIUM`` if set, else the first of ``NAMES`` on the PATH."""
    configured = os.environ.get("CHROMIUM")
    if configured:
        return shutil.which(configured) or configured
    return next((path for name in NAMES if (path := shutil.which(name))), None)


class CdpError(Exception):
    """The browser answered a call with an error, or a page script threw."""


class Chromium:
    """A headless Chromium process and its DevTools connection. Use as a context manager."""

    def __init__(self, executable: str, *, window: tuple[int, int] = (1400, 1000)) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="tether-chromium-"))
        args = [
            executable, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
            "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--mute-audio", f"--window-size={window[0]},{window[1]}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._ids = itertools.count(1)
        self._calls: dict[int, Future[dict[str, Any]]] = {}
        self._pages: dict[str, Page] = {}
        self._lock = threading.Lock()
        self._exits = contextlib.ExitStack()  # websockets wants its connection used as a context manager
        try:
            self._ws: ClientConnection = self._exits.enter_context(
                connect(self._devtools_url(), max_size=None, open_timeout=10))
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _devtools_url(self, timeout: float = 20.0) -> str:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                stderr = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"chromium exited with {self.process.returncode}: {stderr[-2000:]}")
            try:
                port, path = port_file.read_text().split("\n")[:2]
                return f"ws://127.0.0.1:{int(port)}{path}"
            except (FileNotFoundError, ValueError):
                time.sleep(0.02)  # the browser writes the file once it listens
        raise RuntimeError("chromium wrote no DevToolsActivePort in time")

    def _read(self) -> None:
        try:
            for raw in self._ws:
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        future = self._calls.pop(message["id"], None)
                    if future is not None:
                        future.set_result(message)
                elif (page := self._pages.get(message.get("sessionId", ""))) is not None:
                    page._event(message["method"], message.get("params", {}))  # noqa: SLF001 - its own Page
        except ConnectionClosed:
            pass
        finally:
            with self._lock:
                calls, self._calls = self._calls, {}
            for future in calls.values():
                future.set_exception(CdpError("the browser connection closed"))

    def call(self, method: str, session: str | None = None, *, wait_s: float = CALL_TIMEOUT_S,
             **params: Any) -> dict[str, Any]:
        """One protocol call; its result, or ``CdpError``."""
        call_id = next(self._ids)
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            self._calls[call_id] = future
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        answer = future.result(wait_s)
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def new_page(self) -> Page:
        """A blank tab in a browser context of its own (no storage shared with other tabs)."""
        context = self.call("Target.createBrowserContext")["browserContextId"]
        target = self.call("Target.createTarget", url="about:blank", browserContextId=context)["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session, target, context)
        self._pages[session] = page
        page.call("Page.enable")
        page.call("Runtime.enable")
        page.call("Network.enable")
        return page

    def close(self) -> None:
        self._exits.close()
        stop_process(self.process, 10)
        if self.process.stderr:
            self.process.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab. ``sent`` lists every request it made (Network domain) as ``(url, headers)``, and
    ``console_errors`` every exception thrown and every console error, in order."""

    def __init__(self, browser: Chromium, session: str, target: str, context: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target
        self.context = context
        self.sent: list[tuple[str, dict[str, str]]] = []
        self.console_errors: list[str] = []
        self._loaded = threading.Event()

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            self.sent.append((params["request"]["url"], params["request"].get("headers", {})))
        elif method == "Page.loadEventFired":
            self._loaded.set()
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.console_errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))

    @property
    def requests(self) -> list[str]:
        """The URL of every request made so far."""
        return [url for url, _ in self.sent]

    def call(self, method: str, *, wait_s: float = CALL_TIMEOUT_S, **params: Any) -> dict[str, Any]:
        return self.browser.call(method, self.session, wait_s=wait_s, **params)

    def goto(self, url: str, timeout: float = 15.0) -> None:
        """Navigate and wait for the load event."""
        self._loaded.clear()
        answer = self.call("Page.navigate", url=url)
        if answer.get("errorText"):
            raise CdpError(f"navigating to {url}: {answer['errorText']}")
        if not self._loaded.wait(timeout):
            raise CdpError(f"{url} did not load in {timeout:g} s")

    def js(self, expression: str, timeout: float = CALL_TIMEOUT_S) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        answer = self.call("Runtime.evaluate", wait_s=timeout + 1, expression=expression, awaitPromise=True,
                           returnByValue=True, timeout=int(timeout * 1000))
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            raise CdpError(details.get("exception", {}).get("description") or details.get("text"))
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0, what: str | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        return wait_until(lambda: self.js(expression), timeout, interval=0.02, what=what or expression)

    def text(self, selector: str) -> str | None:
        """The text of the first element matching ``selector``, or None."""
        return self.js(f"document.querySelector({json.dumps(selector)})?.textContent ?? null")

    def type_into(self, selector: str, text: str) -> None:
        """Focus an input, clear it, and type ``text`` as keyboard input."""
        self.js(f"(e => {{ e.focus(); e.value = ''; }})(document.querySelector({json.dumps(selector)}))")
        self.call("Input.insertText", text=text)

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element (scrolled into view first), once the
        element stands still there: a page still laying out what the feed brought (a timeline
        growing above it) would otherwise move it between the measure and the click."""
        measure = f"""(() => {{
            const e = document.querySelector({json.dumps(selector)});
            if (!e) return null;
            e.scrollIntoView({{block: "center"}});
            const r = e.getBoundingClientRect();
            const x = r.x + r.width / 2, y = r.y + r.height / 2;
            return [x, y, e.contains(document.elementFromPoint(x, y))];
        }})()"""
        if self.js(measure) is None:
            raise CdpError(f"nothing matches {selector}")
        last: list[Any] = []

        def settled() -> bool:
            nonlocal last
            box, last = last, self.js(measure)
            return bool(last and last[2] and box == last)

        wait_until(settled, 5, interval=0.05, what=f"{selector} to stand still")
        x, y = last[0], last[1]
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def press_enter(self) -> None:
        self.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13,
                  text="\r")
        self.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))

    def close(self) -> None:
        self.browser._pages.pop(self.session, None)  # noqa: SLF001 - the Browser that made this page
        self.browser.call("Target.closeTarget", targetId=self.target)
        self.browser.call("Target.disposeBrowserContext", browserContextId=self.context)

