"""The server's protocol writes each response in one write: head and body together, except a
streamed body, whose head must go out before its first chunk exists."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.server import ServerState

from coordinator.server import head_limited_protocol

pytestmark = pytest.mark.anyio


class RecordingTransport(asyncio.Transport):
    """A connection with no socket: what the server writes, write by write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _app(stream_gate: asyncio.Event) -> Starlette:
    async def json(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def empty(request: Request) -> Response:
        return Response(status_code=204)

    async def stream(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            await stream_gate.wait()
            yield b"first"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/json", json), Route("/empty", empty), Route("/stream", stream)])


async def _connect(app: Starlette) -> tuple[Any, RecordingTransport]:
    config = uvicorn.Config(app, http=head_limited_protocol(10.0), log_config=None)
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(),
                                          app_state={}, _loop=asyncio.get_running_loop())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def _until(predicate: Any) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


@pytest.mark.parametrize(("path", "status", "body"), [("/json", b"200", b'{"ok":true}'), ("/empty", b"204", b"")])
async def test_a_response_leaves_in_one_write(path: str, status: bytes, body: bytes) -> None:
    protocol, transport = await _connect(_app(asyncio.Event()))
    protocol.data_received(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    await _until(lambda: transport.writes)
    await asyncio.sleep(0)  # room for a second write, if one were coming
    assert len(transport.writes) == 1
    head, _, rest = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status)
    assert rest == body
    protocol.connection_lost(None)


async def test_two_requests_on_one_connection_each_leave_in_one_write() -> None:
    protocol, transport = await _connect(_app(asyncio.Event()))
    for expected in (1, 2):
        protocol.data_received(b"GET /json HTTP/1.1\r\nHost: t\r\n\r\n")
        await _until(lambda: len(transport.writes) == expected)
    assert all(w.startswith(b"HTTP/1.1 200") and w.endswith(b'{"ok":true}') for w in transport.writes)
    protocol.connection_lost(None)


async def test_a_streamed_response_sends_its_head_before_its_first_chunk() -> None:
    gate = asyncio.Event()
    protocol, transport = await _connect(_app(gate))
    protocol.data_received(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
    await _until(lambda: transport.writes)
    assert transport.writes[0].startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in transport.writes[0]
    assert b"first" not in b"".join(transport.writes)
    gate.set()
    await _until(lambda: b"first" in b"".join(transport.writes))
    protocol.connection_lost(None)
