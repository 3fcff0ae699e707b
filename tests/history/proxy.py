"""The recording proxy of the fault tests. ``RecordingProxy`` sits on a loopback port between the
agent processes and the coordinator (or several coordinator processes, taken in turn like a load
balancer would). It records every request and the coordinator's answer, and can lose answers on
purpose: the request is forwarded and served, then the connection is closed without the answer
("lost response"). A client that hangs up while its request is upstream makes the proxy hang up
upstream too, so the coordinator sees the hang-up as it would without the proxy. (The test's own
operator client is recorded by ``records.RecordingTransport``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from tests.history.records import History, Op, parse_json

_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "content-encoding",
})


LossPolicy = Callable[[Op, int, Any], bool]  # (operation, status, parsed body) -> lose the answer?


def lose_nothing(op: Op, status: int, body: Any) -> bool:
    return False


class _Upstream:
    """One connection to one coordinator process, owned by one client connection."""

    def __init__(self, base: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.base, self.reader, self.writer = base, reader, writer

    @classmethod
    async def open(cls, base: str) -> _Upstream:
        parts = urlsplit(base)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(base, reader, writer)

    @property
    def usable(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()

    async def exchange(self, method: str, target: str, headers: list[tuple[str, str]],
                       body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        lines = [f"{method} {target} HTTP/1.1", f"host: {urlsplit(self.base).netloc}"]
        lines += [f"{k}: {v}" for k, v in headers] + [f"content-length: {len(body)}"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await self.writer.drain()
        status, reason, answer = _read_head(await self.reader.readuntil(b"\r\n\r\n"))
        lowered = {k.lower(): v for k, v in answer}
        if "chunked" in lowered.get("transfer-encoding", "").lower():
            content = b""
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                content += await self.reader.readexactly(size + 2)
                content = content[:-2]
            await self.reader.readuntil(b"\r\n")  # the empty trailer
        elif "content-length" in lowered:
            content = await self.reader.readexactly(int(lowered["content-length"]))
        elif status in (204, 304) or status < 200:
            content = b""
        else:
            content = await self.reader.read()  # until the server closes
        if lowered.get("connection", "").lower() == "close":
            self.writer.close()
        return status, reason, answer, content


def _read_head(head: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    """A response head: status, reason and headers."""
    first, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    _version, status, *reason = first.split(" ", 2)
    headers = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in lines if ":" in line)]
    return int(status), reason[0] if reason else "", headers


class RecordingProxy:
    """An HTTP/1.1 proxy on a loopback port, in a thread of its own, recording into ``history``.

    Each client connection gets its own connection upstream, to the next of ``upstreams`` in
    turn (replace the list at any time), like a TCP load balancer: a client that hangs up, ends
    its upstream connection too, so the coordinator sees the hang-up. When an upstream does not
    answer (refused, reset, died mid-request) the client's connection is closed without an
    answer, as if it had talked to that process itself. ``lose(op, status, body)`` is asked once
    the answer is in: True closes the client's connection instead of passing the answer on."""

    def __init__(self, history: History, upstreams: Sequence[str], *, lose: LossPolicy = lose_nothing) -> None:
        self.history = history
        self.upstreams = list(upstreams)
        self.lose = lose
        self.lost = 0
        self._turn = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="recording-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self.url = ""

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        open_connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in open_connections:  # connections still open (a long poll): end them
            task.cancel()
        await asyncio.gather(*open_connections, return_exceptions=True)
        await self._server.wait_closed()

    def _next_upstream(self) -> str:
        upstreams = list(self.upstreams)
        self._turn += 1
        return upstreams[self._turn % len(upstreams)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: list[_Upstream] = []  # at most one, replaced when it can no longer be used
        try:
            while await self._exchange(reader, writer, upstream):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # the proxy is stopping; ending quietly keeps asyncio from logging the cancellation
        finally:
            for connection in upstream:
                await connection.close()
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        upstream: list[_Upstream]) -> bool:
        """Serve one request; False when the client connection is to be closed."""
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *header_lines = head.rstrip("\r\n").split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in header_lines if ":" in line)]
        lowered = {k.lower(): v for k, v in headers}
        if "chunked" in lowered.get("transfer-encoding", "").lower():
            return False  # not needed by any client here
        body = await reader.readexactly(int(lowered.get("content-length", "0")))
        keep_alive = lowered.get("connection", "").lower() != "close"
        op = self.history.invoke(method, target, body)
        if upstream and not upstream[0].usable:
            await upstream.pop().close()
        forwarded = [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP]
        call = asyncio.ensure_future(self._forward(upstream, method, target, forwarded, body))
        hangup = asyncio.ensure_future(reader.read(1))
        await asyncio.wait({call, hangup}, return_when=asyncio.FIRST_COMPLETED)
        if hangup.done() and not call.done():
            # The client left while its request was upstream: leave too, so the coordinator sees it.
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            self.history.fail(op, "client hung up")
            return False
        hangup.cancel()
        await asyncio.gather(hangup, return_exceptions=True)
        try:
            status, reason, answer, content = call.result()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self.history.fail(op, f"upstream: {type(exc).__name__}")
            return False
        answered_at = time.monotonic()
        if self.lose(op, status, parse_json(content)):
            self.lost += 1
            self.history.respond(op, status, content, delivered=False, at=answered_at)
            return False
        lines = [f"HTTP/1.1 {status} {reason}"]
        lines += [f"{k}: {v}" for k, v in answer if k.lower() not in _HOP_BY_HOP]
        lines += [f"content-length: {len(content)}", f"connection: {'keep-alive' if keep_alive else 'close'}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + content)
        await writer.drain()
        self.history.respond(op, status, content, at=answered_at)
        # A byte read early (a pipelining client) cannot be put back: close, the client retries.
        return keep_alive and not (hangup.done() and not hangup.cancelled())

    async def _forward(self, upstream: list[_Upstream], method: str, target: str, headers: list[tuple[str, str]],
                       body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        if not upstream:
            upstream.append(await _Upstream.open(self._next_upstream()))
        try:
            return await upstream[0].exchange(method, target, headers, body)
        except BaseException:
            await upstream.pop().close()  # in an unknown state: never used again
            raise
