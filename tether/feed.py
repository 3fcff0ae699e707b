"""The live feed (``GET /api/v1/events``) as an iterator of event dicts that misses nothing.

A ``Feed`` connects when it is opened (``with client.feed(...) as feed`` or ``feed.open()``):
the coordinator fixes the feed's starting position when it answers, so whatever a caller reads
after ``open()`` returns (a task's state, say) cannot be older than the first event it will get.

The first connection's failure is raised (``TetherError``): a wrong token or a coordinator that
is down is the caller's to report. After that, a dropped or ended stream, or a coordinator that
answers ``5xx`` or not at all, is reconnected with ``Last-Event-ID`` set to the last id seen,
after a jittered, growing delay capped by the server's ``retry:``, so no event the coordinator
still keeps is missed and a fleet of watchers does not come back in lock-step. A ``4xx`` on
reconnection (the token was changed, say) is raised.
"""

from __future__ import annotations

import inspect
import json
import random
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from tether.errors import TetherError
from tether.sse import decode

_FIRST_DELAY_S = 0.1
_DEFAULT_RETRY_S = 2.0  # until the server says otherwise with "retry:"


class Feed:
    """Iterate it for event dicts (``{"type": ..., "task_id": ..., ...}``); close it (or leave
    its ``with`` block) to hang up."""

    def __init__(self, http: httpx.Client, url: str, params: Mapping[str, str], *,
                 last_event_id: str | None = None, read_timeout_s: float = 45.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._http = http
        self._url = url
        self._params = dict(params)
        self._timeout = httpx.Timeout(http.timeout.connect, read=read_timeout_s)
        self._sleep = sleep
        self._retry_s = _DEFAULT_RETRY_S
        self._response: httpx.Response | None = None
        self._events: Generator[dict[str, Any], None, None] | None = None
        self._closed = False
        self.last_event_id = last_event_id
        self.reconnects = 0

    # -- lifetime ------------------------------------------------------------------------------

    def open(self) -> Self:
        """Connect now (once); raises ``TetherError`` when the coordinator refuses or is down."""
        if self._response is None and self._events is None:
            self._response = self._connect()
        return self

    def close(self) -> None:
        """Hang up. May be called from another thread than the reader's: the reader then ends
        at its next read instead of reconnecting."""
        self._closed = True
        response, self._response = self._response, None
        if response is not None:
            response.close()
        if self._events is not None and inspect.getgeneratorstate(self._events) != inspect.GEN_RUNNING:
            self._events.close()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._events is None:
            self.open()
            self._events = self._follow()
        return next(self._events)

    # -- reading -------------------------------------------------------------------------------

    def _connect(self) -> httpx.Response:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        request = self._http.build_request("GET", self._url, params=self._params, headers=headers,
                                           timeout=self._timeout)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise TetherError.unreachable(str(self._http.base_url), exc) from exc
        if response.status_code >= 400:
            try:
                response.read()
                raise TetherError.from_response(response)
            finally:
                response.close()
        return response

    def _follow(self) -> Generator[dict[str, Any], None, None]:
        failures = 0
        while not self._closed:
            if self._response is None:
                try:
                    self._response = self._connect()
                except TetherError as exc:
                    if exc.code != "unavailable" and (exc.status or 0) < 500:
                        raise
                    failures += 1
                    self._pause(failures)
                    continue
            response = self._response
            try:
                for block in decode(response.iter_lines()):
                    if block.id is not None:
                        self.last_event_id = block.id
                    if block.retry_ms is not None:
                        self._retry_s = block.retry_ms / 1000
                    if block.data is None:
                        continue
                    failures = 0
                    event = _event(block.data)
                    if event is not None:
                        yield event
            except httpx.TransportError:
                pass  # dropped: reconnect below
            finally:
                response.close()
                self._response = None
            if self._closed:
                return
            failures += 1
            self.reconnects += 1
            self._pause(failures)

    def _pause(self, failures: int) -> None:
        """Full jitter on a delay that doubles per failure, up to the server's ``retry:``."""
        ceiling = min(self._retry_s, _FIRST_DELAY_S * 2 ** (failures - 1))
        self._sleep(random.uniform(ceiling / 2, ceiling))


def _event(data: str) -> dict[str, Any] | None:
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
