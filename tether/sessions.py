"""Live sessions from Python (PROTOCOL.md, "Live sessions"): a pooled device driven command by
command, each answered with the screen after it.

    with client.start_session(driver="adb", labels={"rack": "3"}) as s:
        s.tap(540, 365)
        s.type("hello")
        png = s.observe().screen()

``start_session`` creates the session task and waits until it runs; the ``Session`` it returns
ends the session when the ``with`` block is left, also on an exception. Each action answers a
``CommandAnswer``: ``status`` (``done`` or ``failed`` with ``error``: a failed action leaves the
session going), ``elements`` and ``screen()`` (the PNG, fetched on demand). The plain methods
(``create_session``, ``send_command``, ``get_command``, ``end_session``, ``session_log``) are
the operator routes one for one, returning the contract's JSON.

``SessionMethods`` is a part of ``tether.Client`` (its base class): this module holds the session
half of the client so ``client.py`` stays one concept.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import wire
from tether.calls import Calls, Json, segment
from tether.errors import TetherError

# What the coordinator allows a command request to wait (``wait_s`` 0..60).
COMMAND_WAIT_MAX_S = 60
# A long poll's read timeout is its wait plus this.
_READ_MARGIN_S = 10.0
# How often a starting session's status is read while it waits to run.
_START_POLL_S = 0.2
PENDING = "pending"


class SessionMethods(Calls):
    """The session routes of ``tether.Client`` (on ``tether.calls.Calls``, the connection)."""

    # -- the routes, one for one ---------------------------------------------------------------

    def create_session(self, *, device_id: str | None = None, driver: str | None = None,
                       labels: Mapping[str, str] | None = None, team: str | None = None,
                       idle_timeout_s: int | None = None, max_duration_s: int | None = None,
                       priority: int | None = None, idempotency_key: str | None = None) -> Json:
        """``POST /api/v1/tasks`` ``{"kind": "session", ...}`` on ``device_id``, or on any device of
        ``driver`` with ``labels``: the session's task (queued until a device is free)."""
        if (device_id is None) == (driver is None):
            raise ValueError("give exactly one of device_id and driver")
        body: Json = {"kind": "session"}
        if device_id is not None:
            body["device_id"] = device_id
        else:
            body["selector"] = {"driver": driver, "labels": dict(labels or {})}
        optional = {"team": team, "idle_timeout_s": idle_timeout_s, "max_duration_s": max_duration_s,
                    "priority": priority, "idempotency_key": idempotency_key}
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._call("POST", "/api/v1/tasks", json=body)

    def send_command(self, task_id: str, action: Mapping[str, Any], *, wait_s: int = 30) -> Json:
        """``POST /api/v1/tasks/{id}/commands``: the answer once the device has done it (within
        ``wait_s``), else ``{"command_id", "status": "pending"}`` (then ``get_command``)."""
        return self._call("POST", f"/api/v1/tasks/{segment(task_id, 'task id')}/commands",
                          params={"wait_s": wait_s}, json={"action": dict(action)}, timeout=wait_s + _READ_MARGIN_S)

    def get_command(self, task_id: str, command_id: str, *, wait_s: int = 30) -> Json:
        """``GET /api/v1/tasks/{id}/commands/{command_id}``: the command and its answer, waiting up
        to ``wait_s`` for it."""
        path = f"/api/v1/tasks/{segment(task_id, 'task id')}/commands/{segment(command_id, 'command id')}"
        return self._call("GET", path, params={"wait_s": wait_s}, timeout=wait_s + _READ_MARGIN_S)

    def end_session(self, task_id: str) -> Json:
        """``POST /api/v1/tasks/{id}/end``: the session ends ``succeeded`` (idempotent)."""
        return self._call("POST", f"/api/v1/tasks/{segment(task_id, 'task id')}/end")

    def session_log(self, task_id: str, *, limit: int | None = None, cursor: str | None = None) -> Json:
        """One page of the session's recording, oldest first: ``{"commands": [...], "next_cursor"}``,
        each command with who sent it, when, and its answer."""
        return self._call("GET", f"/api/v1/tasks/{segment(task_id, 'task id')}/commands",
                          params={"limit": limit, "cursor": cursor})

    def iter_session_log(self, task_id: str) -> Iterator[Json]:
        """Every command of the recording, page after page."""
        cursor = None
        while True:
            page = self.session_log(task_id, cursor=cursor)
            yield from page.get("commands") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def get_screen(self, screen_url: str) -> bytes:
        """The PNG an answer's ``observation.screen_url`` names. Only this coordinator's own URLs
        are fetched: the token goes nowhere else."""
        parts = urlsplit(screen_url)
        if parts.scheme or parts.netloc:
            own = urlsplit(self.url)
            if (parts.scheme, parts.netloc) != (own.scheme, own.netloc):
                raise TetherError("invalid_response", "a screen_url outside this coordinator: not fetched")
            screen_url = parts.path + (f"?{parts.query}" if parts.query else "")
        if not screen_url.startswith("/api/v1/"):
            raise TetherError("invalid_response", f"not a screen of this coordinator: {screen_url[:80]!r}")
        return self._send("GET", screen_url).content

    # -- a session as an object ----------------------------------------------------------------

    def start_session(self, *, device_id: str | None = None, driver: str | None = None,
                      labels: Mapping[str, str] | None = None, team: str | None = None,
                      idle_timeout_s: int | None = None, max_duration_s: int | None = None,
                      priority: int | None = None, wait_s: float = 120.0) -> Session:
        """A session on ``device_id`` or any device of ``driver`` with ``labels``, once it runs.
        It is cancelled, and ``TetherError("session_not_running")`` raised with the reason it
        waits, when it is not running within ``wait_s``; an ended one is ``session_ended``."""
        task = self.create_session(device_id=device_id, driver=driver, labels=labels, team=team,
                                   idle_timeout_s=idle_timeout_s, max_duration_s=max_duration_s, priority=priority)
        task_id = str(task["task_id"])
        deadline = time.monotonic() + wait_s
        try:
            while task.get("status") != wire.TaskStatus.RUNNING.value:
                if task.get("status") in wire.TERMINAL_STATUSES:
                    raise TetherError("session_ended", f"session {task_id} ended before it ran: {task.get('status')}",
                                      details={"status": task.get("status")})
                if time.monotonic() >= deadline:
                    reason = task.get("waiting_reason") or task.get("status")
                    raise TetherError("session_not_running", f"session {task_id} did not start within {wait_s:g} s "
                                      f"({reason}); cancelled", details={"status": task.get("status"),
                                                                         "waiting_reason": task.get("waiting_reason")})
                time.sleep(_START_POLL_S)
                task = self._call("GET", f"/api/v1/tasks/{segment(task_id, 'task id')}")
        except BaseException:
            self._give_up(task_id)
            raise
        return Session(self, task)

    def _give_up(self, task_id: str) -> None:
        # Ended meanwhile, or the coordinator is gone: nothing more to do.
        with contextlib.suppress(TetherError):
            self._call("POST", f"/api/v1/tasks/{segment(task_id, 'task id')}/cancel")


@dataclass(frozen=True, repr=False)
class CommandAnswer:
    """One command's answer (``send_command``'s JSON, as attributes). ``screen()`` fetches the
    PNG; ``elements`` are ``{"text", "id", "bounds": [x1, y1, x2, y2], "clickable"}``."""

    client: SessionMethods
    command_id: str
    status: str
    error: str | None = None
    duration_ms: int | None = None
    round_trip_ms: int | None = None
    screen_url: str | None = None
    width: int | None = None
    height: int | None = None
    elements: list[Json] = field(default_factory=list)
    raw: Json = field(default_factory=dict)

    @classmethod
    def from_json(cls, client: SessionMethods, answer: Json) -> CommandAnswer:
        observation = answer.get("observation") or {}
        return cls(client, str(answer.get("command_id")), str(answer.get("status")), answer.get("error"),
                   answer.get("duration_ms"), answer.get("round_trip_ms"), observation.get("screen_url"),
                   observation.get("width"), observation.get("height"), list(observation.get("elements") or []),
                   answer)

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def screen(self) -> bytes:
        """The screen after the command, as PNG bytes; ``TetherError("no_screen")`` when it was not
        observed (``observe=False``) or its upload failed."""
        if not self.screen_url:
            raise TetherError("no_screen", f"command {self.command_id} has no screen")
        return self.client.get_screen(self.screen_url)

    def find(self, text: str) -> Json | None:
        """The first element whose text or id is ``text``."""
        return next((e for e in self.elements if text in (e.get("text"), e.get("id"))), None)

    def __repr__(self) -> str:
        return f"CommandAnswer({self.command_id!r}, status={self.status!r}, elements={len(self.elements)})"


class Session:
    """A running session (``start_session``). A context manager: leaving it ends the session.

    Each action waits up to ``wait_s`` for the device's answer (asking again while it is
    pending) and returns a ``CommandAnswer``; ``observe=False`` skips the screen after it."""

    def __init__(self, client: SessionMethods, task: Json, *, wait_s: int = 30) -> None:
        self.client = client
        self.task = task
        self.task_id = str(task["task_id"])
        self.device_id: str | None = task.get("device_id")
        self.wait_s = min(wait_s, COMMAND_WAIT_MAX_S)
        self.ended = False

    def __repr__(self) -> str:
        return f"Session({self.task_id!r}, device={self.device_id!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.end()
        except TetherError as error:
            # Ended already (an idle timeout, a cancel) is what leaving wants; any other failure
            # is said, unless the block's own exception is the one to see.
            if exc is None and error.code != "session_ended":
                raise

    def do(self, action: Mapping[str, Any], *, observe: bool = True) -> CommandAnswer:
        """Send one action (``{"action": "tap", "x": 540, "y": 365}``) and wait for its answer."""
        body = dict(action)
        if not observe:
            body["observe"] = False
        answer = self.client.send_command(self.task_id, body, wait_s=self.wait_s)
        while answer.get("status") == PENDING:
            answer = self.client.get_command(self.task_id, str(answer["command_id"]), wait_s=self.wait_s)
        return CommandAnswer.from_json(self.client, answer)

    def tap(self, x: int | None = None, y: int | None = None, *, text: str | None = None, id: str | None = None,
            observe: bool = True) -> CommandAnswer:
        """Tap a point, or the element with this ``text`` or resource ``id``."""
        if text is not None:
            return self.do({"action": "tap", "text": text}, observe=observe)
        if id is not None:
            return self.do({"action": "tap", "id": id}, observe=observe)
        if x is None or y is None:
            raise ValueError("tap needs x and y, or text=, or id=")
        return self.do({"action": "tap", "x": x, "y": y}, observe=observe)

    def type(self, text: str, *, observe: bool = True) -> CommandAnswer:
        """Type into the focused field."""
        return self.do({"action": "type", "text": text}, observe=observe)

    def swipe(self, x1: int, y1: int, x2: int, y2: int, *, duration_ms: int | None = None,
              observe: bool = True) -> CommandAnswer:
        action: Json = {"action": "swipe", "x1": x1, "y1": y1, "x2": x2, "y2": y2}
        if duration_ms is not None:
            action["duration_ms"] = duration_ms
        return self.do(action, observe=observe)

    def key(self, name: str, *, observe: bool = True) -> CommandAnswer:
        """Press ``back``, ``home``, ``enter`` (an adb phone knows more)."""
        return self.do({"action": "key", "key": name}, observe=observe)

    def launch(self, app: str, *, observe: bool = True) -> CommandAnswer:
        return self.do({"action": "launch", "app": app}, observe=observe)

    def wait(self, ms: int, *, observe: bool = True) -> CommandAnswer:
        return self.do({"action": "wait", "ms": ms}, observe=observe)

    def observe(self) -> CommandAnswer:
        """The screen now, and its elements."""
        return self.do({"action": "observe"})

    def log(self) -> list[Json]:
        """The recording so far: every command, who sent it, its answer."""
        return list(self.client.iter_session_log(self.task_id))

    def end(self) -> Json | None:
        """End the session (idempotent; the first call's answer, None afterwards)."""
        if self.ended:
            return None
        answer = self.client.end_session(self.task_id)
        self.ended = True
        return answer
