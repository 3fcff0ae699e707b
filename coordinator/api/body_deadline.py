"""A request's body, bounded in time: what the app's ``receive`` becomes in the error boundary.

A client that sends a head and then its body slowly, or never, would hold its connection (a file
descriptor, a slot of the server) for as long as it liked: the head's own deadline
(``COORDINATOR_HEADER_TIMEOUT_S``, coordinator/serve/server.py) ends where the body begins. So a
body must be complete within ``COORDINATOR_BODY_TIMEOUT_S`` of its head (the moment the app is
handed the request); a read past that raises ``RequestTimeout`` (``408 request_timeout``), and
an answer sent while the body is unfinished closes the connection (``Connection: close``), so a
refusal that reads no body (a bad credential, PROTOCOL.md's order of checks) frees it at once
rather than waiting for the rest. Once the body is complete, ``receive`` is the server's own
(the long-poll and the feed wait on it for the client's hang-up, unbounded).

Every read of an unfinished body goes under the deadline, whether or not the server already holds
the rest: one path, with no speed path beside it (a timer per read costs no benchmark row its
target). Where the server is ours it says when the whole body is in its buffer (``BODY_RECEIVED``
in the request's scope extensions, set by coordinator/serve/server.py): an answer sent then, before
the app read the body, keeps the connection, since nothing of that request is left to arrive.
"""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope

from coordinator.errors import RequestTimeout

_CLOSE = (b"connection", b"close")
# Set True in a request's scope extensions by the server once the whole body is in its buffer.
BODY_RECEIVED = "tether.body_received"


def _has_body(scope: Scope) -> bool:
    """Whether the head announces a body: a non-zero Content-Length, or a chunked one."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


class BodyDeadline:
    def __init__(self, scope: Scope, receive: Receive, timeout_s: float) -> None:
        self._receive = receive
        self._timeout_s = timeout_s
        self._extensions = scope.get("extensions") or {}
        self.complete = not _has_body(scope)
        self._deadline = asyncio.get_running_loop().time() + timeout_s if not self.complete else 0.0

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            raise RequestTimeout(
                f"the body did not arrive within {self._timeout_s:g} s of the request's head") from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True  # the last chunk, or the client's hang-up
        return message

    def closing(self, start: Message) -> Message:
        """The response's start, closing the connection if the body is still unfinished."""
        if self.complete or self._extensions.get(BODY_RECEIVED, False):
            return start
        return {**start, "headers": [*start.get("headers", ()), _CLOSE]}
