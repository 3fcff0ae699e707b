"""The HTTP server under the app: uvicorn, with limits on request heads and a graceful stop.

uvicorn's httptools protocol puts no bound on the size of a request head, nor on the time a client
may take to send one: a client streaming a huge header keeps the event loop busy (httptools
rebuilds the header value piece by piece), and half-open connections hold file descriptors
forever. `HeadLimitedProtocol` answers a head over 64 KiB with `431` and closes a connection that
has not sent a complete head within the header timeout.

uvicorn runs the lifespan shutdown only after connections drain, so without help waiting
long-polls would hold a stopping process for the whole graceful timeout and then be cancelled
(a 500 each). `Server` calls `on_exit` as soon as the signal arrives, so the app can answer them
at once, then lets uvicorn drain as usual.

Each connection is offered to the long-poll as its ``ClientConnection`` (the protocol is the
long-poll's, ``longpoll.CONNECTION`` in the request's scope extensions): whether the client has
hung up, asked of the socket itself, and a callback when the connection is lost. A request that
waited in the kernel's buffer while the process stalled is handled before the event loop has read
the hang-up queued behind it; ASGI's ``http.disconnect`` would come too late to keep such a poll
from claiming work for a client that is gone (the fallback on other servers).

Several worker processes (``WEB_CONCURRENCY``) are gunicorn's (`workers.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import select
import signal
import socket
import threading
from collections.abc import Callable, Generator, Sequence
from types import FrameType
from typing import Any

import orjson
import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from coordinator.api.body_deadline import BODY_RECEIVED
from coordinator.longpoll import CONNECTION
from wire import ErrorCode

log = logging.getLogger("coordinator")

MAX_HEAD_BYTES = 64 * 1024
# Linux reports a peer's FIN as POLLRDHUP without reading (and so consuming) any data.
_HANGUP = getattr(select, "POLLRDHUP", 0x2000) | select.POLLHUP | select.POLLERR
# In-flight requests get this long to finish after SIGTERM (COORDINATOR_GRACEFUL_TIMEOUT_S);
# waiting polls are answered at once, and what still runs past it gets 503 unavailable.
GRACEFUL_TIMEOUT_S = 5


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the limit."""


class HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a size limit and a deadline on every request head.

    Size: the bytes of each read that ends inside a head are counted, so a client streaming a huge
    header is cut off after one read past the limit; a head that completes within a read is
    measured from its parsed parts. Time: a timer runs from the moment the connection owes a
    head (it is accepted, a response is finished, or a new request starts arriving) until the head
    is complete; a client cannot extend it by sending slowly.
    """

    header_timeout_s: float = 10.0
    max_head_bytes: int = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True  # the next bytes to arrive belong to a request head
        self._heads = 0  # complete heads parsed on this connection
        self._head_bytes = 0
        self._head_too_large = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._lost = False
        self._on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)
        self._lost = True
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()

    def data_received(self, data: bytes) -> None:
        in_head, heads = self._awaiting_head, self._heads
        super().data_received(data)
        # Only a read that began and ended inside one head is all head bytes; any other read is
        # judged by on_headers_complete (or belongs to a head that began in it, counted next read).
        if in_head and self._awaiting_head and heads == self._heads:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._send_431()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = {CONNECTION: self}  # type: ignore[dict-item]  # this object, not ASGI's dict
        self._arm_head_timer()  # a pipelined request starts arriving while another runs

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        """See `longpoll.ClientConnection`. One callback per connection is enough: uvicorn runs one
        request of a connection at a time (pipelined ones wait for it). A waiting long-poll
        learns of its client's hang-up this way, without a task of its own reading the ASGI
        ``receive`` until ``http.disconnect``."""
        if self._lost and callback is not None:
            callback()
            return
        self._on_lost = callback

    def peer_closed(self) -> bool:
        """Whether the client has hung up, asked of the socket itself: a request that waited in
        the kernel's buffer (the process stalled) is handled before the event loop has read the
        hang-up queued behind it, so the ASGI disconnect message would come too late."""
        if self.transport.is_closing():
            return True
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), _HANGUP)
        return bool(poller.poll(0))

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._awaiting_head = False
        self._heads += 1
        self._head_bytes = 0
        # 32 covers the method, spaces, version and line ends; ": " and CRLF are 4 per header.
        size = len(self.url) + 32 + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_head_bytes:
            self._head_too_large = True
            raise _HeadTooLarge  # stops the parser; uvicorn then calls send_400_response
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._awaiting_head = True
        # Nothing of this request is left to arrive: an answer now need not close the connection.
        self.scope["extensions"][BODY_RECEIVED] = True  # type: ignore[assignment]  # a flag, where ASGI types a dict
        super().on_message_complete()

    def on_response_complete(self) -> None:
        idle = not self.pipeline  # else the next request's head is already complete
        super().on_response_complete()
        if idle and not self.transport.is_closing():
            # uvicorn's keep-alive timer is dropped by any byte, even a lone CRLF; this one is not.
            self._arm_head_timer()

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this for any request it cannot parse (one stopped by _HeadTooLarge too)
        # and answers in plain text; every error here is the contract's JSON.
        if self._head_too_large:
            self._send_431()
        else:
            self._send_error(400, ErrorCode.INVALID_REQUEST, "malformed HTTP request")

    def _send_431(self) -> None:
        limit = self.max_head_bytes
        self._send_error(431, ErrorCode.REQUEST_HEADER_TOO_LARGE, f"request head over {limit} bytes")

    def _send_error(self, status: int, code: ErrorCode, message: str) -> None:
        if self.transport.is_closing():
            return
        body = orjson.dumps({"error": {"code": code.value, "message": message}})
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content += [name, b": ", value, b"\r\n"]
        content += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
        self.transport.write(b"".join(content))
        self.transport.close()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            # abort, not close: close would wait to flush to a client that may never read.
            self.transport.abort()


def head_limited_protocol(header_timeout_s: float) -> type[HeadLimitedProtocol]:
    """The protocol class to give uvicorn (it builds one per connection from the class alone)."""
    timeout = header_timeout_s

    class Protocol(HeadLimitedProtocol):
        header_timeout_s = timeout

    return Protocol


class Server(uvicorn.Server):
    """uvicorn's server that calls `on_exit` on the event loop as soon as it is told to stop, and
    exits normally on SIGTERM (uvicorn re-raises the signal after its graceful shutdown, so the
    process would die of it instead of exiting 0)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # One process bound its own socket: say where it listens (uvicorn's own line is below
        # the level we log at). Under gunicorn (sockets handed in) the arbiter says it, once.
        if self.started and sockets is None:
            for address in listening_addresses(self.servers):
                log.info("coordinator listening on %s (dashboard %s/ui)", address, address)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # As uvicorn's, less the re-raising of the caught signals once the server has stopped.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        first = not self.should_exit
        super().handle_exit(sig, frame)
        if first and self._loop is not None:
            # A signal handler may run between any two bytecodes of the loop: schedule, not call.
            self._loop.call_soon_threadsafe(self._on_exit)


def listening_addresses(servers: Sequence[asyncio.Server]) -> list[str]:
    """``http://HOST:PORT`` of every listening socket (the port actually bound)."""
    addresses = []
    for server in servers:
        for sock in server.sockets:
            name = sock.getsockname()
            if sock.family == socket.AF_INET6:
                addresses.append(f"http://[{name[0]}]:{name[1]}")
            elif sock.family == socket.AF_INET:
                addresses.append(f"http://{name[0]}:{name[1]}")
            else:  # a unix socket
                addresses.append(f"unix:{name}")
    return addresses


def raise_nofile() -> None:
    """Soft fd limit up to the hard one: every connection, half-open ones included, is an fd."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard  # the kernel's usual nr_open
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):  # a container may forbid it: keep the limit we have
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run(app: ASGIApp, *, host: str, port: int, header_timeout_s: float,
        on_exit: Callable[[], None], graceful_timeout_s: int = GRACEFUL_TIMEOUT_S) -> int:
    """Serve until SIGTERM or SIGINT; the exit status (uvicorn's startup-failure code if the
    server never started). Several workers (``WEB_CONCURRENCY``) are gunicorn's, each serving
    with this module's ``Server`` (``workers.py``).

    Logging is left as ``logs.configure_logging`` set it (``log_config=None``): uvicorn's records
    reach our handler and formatter, at the levels configured there.
    """
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=head_limited_protocol(header_timeout_s),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=graceful_timeout_s,
        # The app never reads the client's address, so uvicorn's rewriting of it from
        # X-Forwarded-* would be one more layer around every request for nothing.
        proxy_headers=False,
    )
    server = Server(config, on_exit=on_exit)
    server.run()
    return 0 if server.started else STARTUP_FAILURE
