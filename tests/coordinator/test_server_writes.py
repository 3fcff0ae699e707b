"""The server under the app (coordinator/server.py), as a client on a real socket sees it: the
answers to requests sent together on one kept-alive connection arrive whole and in the order
asked, HEAD's among them, and a streamed response's head arrives before its first chunk exists."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from coordinator.server import head_limited_protocol
from tests.support import free_port, wait_until_async

pytestmark = pytest.mark.anyio


def _app(stream_gate: asyncio.Event) -> Starlette:
    async def json(request: Request) -> Response:
        return JSONResponse({"path": request.url.path, "n": request.query_params.get("n")})

    async def empty(request: Request) -> Response:
        return Response(status_code=204)

    async def stream(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            await stream_gate.wait()
            yield b"first"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/json", json, methods=["GET", "HEAD"]), Route("/empty", empty),
                             Route("/stream", stream)])


@pytest.fixture(params=[True, False], ids=["one write", "uvicorn's writes"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[int, asyncio.Event]]:
    """The app behind the coordinator's protocol on a loopback port, with each response in one
    write and without (COORDINATOR_ONE_WRITE_RESPONSES); the stream's gate."""
    gate = asyncio.Event()
    port = free_port()
    config = uvicorn.Config(_app(gate), host="127.0.0.1", port=port, http=head_limited_protocol(10.0, request.param),
                            log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    await wait_until_async(lambda: server.started or serving.done(), timeout=10)
    assert server.started
    yield port, gate
    gate.set()
    server.should_exit = True
    await serving


async def _read_response(reader: asyncio.StreamReader, *, head_only: bool = False) -> tuple[bytes, dict[str, str], bytes]:
    """One response off the stream: its status line, headers and (Content-Length) body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status, *lines = head[:-4].split(b"\r\n")
    headers = {k.decode().lower(): v.decode().strip() for k, _, v in (line.partition(b":") for line in lines)}
    length = 0 if head_only else int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), 5)
    return status, headers, body


async def test_requests_sent_together_on_one_connection_are_answered_whole_and_in_order(
        served: tuple[int, asyncio.Event]) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join([
            b"GET /json?n=1 HTTP/1.1\r\nHost: t\r\n\r\n",
            b"GET /empty HTTP/1.1\r\nHost: t\r\n\r\n",
            b"HEAD /json?n=2 HTTP/1.1\r\nHost: t\r\n\r\n",
            b"GET /json?n=3 HTTP/1.1\r\nHost: t\r\n\r\n",
        ]))
        await writer.drain()
        status, _, body = await _read_response(reader)
        assert status == b"HTTP/1.1 200 OK" and body == b'{"path":"/json","n":"1"}'
        status, _, body = await _read_response(reader)
        assert status == b"HTTP/1.1 204 No Content" and body == b""
        status, headers, _ = await _read_response(reader, head_only=True)  # HEAD: a head, no body
        assert status == b"HTTP/1.1 200 OK" and headers["content-length"] == str(len(b'{"path":"/json","n":"2"}'))
        status, _, body = await _read_response(reader)
        assert status == b"HTTP/1.1 200 OK" and body == b'{"path":"/json","n":"3"}'
        # and the connection is still open for the next request
        writer.write(b"GET /json?n=4 HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, body = await _read_response(reader)
        assert body == b'{"path":"/json","n":"4"}'
    finally:
        writer.close()


async def test_a_streamed_response_s_head_arrives_before_its_first_chunk(served: tuple[int, asyncio.Event]) -> None:
    port, gate = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, _ = await _read_response(reader, head_only=True)  # the gate is still shut
        assert status == b"HTTP/1.1 200 OK" and headers["transfer-encoding"] == "chunked"
        gate.set()
        assert await asyncio.wait_for(reader.readuntil(b"first"), 5)
    finally:
        writer.close()
