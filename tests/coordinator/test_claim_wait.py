"""A waiting long-poll: its wake-up, and its release when the client hangs up, told by the
server's connection (``longpoll.CONNECTION``) or, on any other server, read from ASGI messages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from coordinator.longpoll import CONNECTION
from tests.conftest import Api
from tests.support import HOSTS, wait_until_async

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("query", "status"), [
    # As Starlette's QueryParams reads a query (and the contract's clients send one): names and
    # values percent-decoded, "+" a space, the last of a repeated name, only "&" between pairs.
    (b"", 204), (b"wait_s=0", 204), (b"wait_s=x&wait_s=0", 204), (b"wait_s=0&wait_s=x", 400),
    (b"a=1&wait_s=", 400), (b"wait_s", 400), (b"&&wait_s=0&", 204), (b"wait_s=0=2", 400),
    (b"x=wait_s", 204), (b"wait_s=%30", 204), (b"wait%5Fs=x", 400), (b"wait_s=+0", 204),
    (b"wait_s=%FF", 400), (b";wait_s=x", 204), (b"wait_s=0;x=1", 400), (b"wait_s=-1", 400),
])
async def test_wait_s_is_read_from_the_query_as_starlette_reads_it(api: Api, query: bytes, status: int) -> None:
    """A claim with no work waiting: 204 at once when wait_s reads as zero (or is absent: the
    default here is zero), 400 when it reads as no number of seconds."""
    # httpx would re-encode a query given to it as text: the bytes go on the request as they are.
    url = httpx.URL("/internal/v1/hosts/host-a/claim").copy_with(query=query)
    response = await asyncio.wait_for(api.client.post(url, headers=api.host_headers("host-a")), 5)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["code"] == "invalid_request"


class _Connection:
    """A stand-in for the server's connection: the hang-up is ours to make."""

    def __init__(self) -> None:
        self.closed = False
        self.callback: Callable[[], None] | None = None

    def peer_closed(self) -> bool:
        return self.closed

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback

    def hang_up(self) -> None:
        self.closed = True
        if self.callback is not None:
            self.callback()


async def _poll(api: Api, extensions: dict[str, Any], hung_up: asyncio.Event) -> list[dict[str, Any]]:
    """A claim with wait_s=10 sent straight to the ASGI app; its receive says ``http.disconnect``
    once ``hung_up`` is set. The messages the app sent."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/internal/v1/hosts/host-a/claim", "raw_path": b"/internal/v1/hosts/host-a/claim",
        "query_string": b"wait_s=10", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        "headers": [(b"authorization", f"Bearer {HOSTS['host-a']}".encode())], "extensions": extensions,
    }
    sent: list[dict[str, Any]] = []
    body_read = False

    async def receive() -> dict[str, Any]:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await api.app(scope, receive, send)
    return sent


async def _until_waiting(api: Api) -> None:
    """Until the poll is past its first claim attempt, into the wait: that attempt is what
    registers the poll with this process in Redis."""
    await wait_until_async(lambda: api.ctx.waiter.waiting, what="the poll registered")
    polls = api.ctx.store.keys.polls("host-a")
    await wait_until_async(lambda: api.ctx.store.redis.zscore(polls, api.ctx.waiter.process_id),
                           what="the poll's first attempt")


def _disconnected(api: Api) -> float:
    return api.ctx.metrics.registry.get_sample_value("tether_claims_total", {"outcome": "disconnected"}) or 0


async def test_a_poll_read_after_its_client_hung_up_claims_nothing(api: Api) -> None:
    """A request that waited in the kernel behind its client's hang-up is read before the event
    loop has seen the hang-up: its first attempt asks the socket, and claims nothing."""
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    connection = _Connection()
    connection.closed = True  # the socket says so; the loop has not told the connection yet
    sent = await asyncio.wait_for(_poll(api, {CONNECTION: connection}, asyncio.Event()), 5)
    assert sent[0]["status"] == 204
    assert _disconnected(api) == 1
    assignment = (await api.claim("host-a")).json()  # the work waited for the next poll
    assert assignment["task_id"] == task["task_id"]


@pytest.mark.parametrize("told_by", ["connection", "asgi messages"])
async def test_a_waiting_poll_is_released_as_soon_as_its_client_hangs_up(api: Api, told_by: str) -> None:
    await api.heartbeat("host-a", ["a1"])
    connection, hung_up = _Connection(), asyncio.Event()
    extensions = {CONNECTION: connection} if told_by == "connection" else {}
    poll = asyncio.ensure_future(_poll(api, extensions, hung_up))
    await _until_waiting(api)
    if told_by == "connection":
        connection.hang_up()
    else:
        hung_up.set()
    sent = await asyncio.wait_for(poll, 5)  # well before its 10 s
    assert sent[0]["status"] == 204
    assert _disconnected(api) == 1
    assert api.ctx.waiter.waiting == 0
    assert connection.callback is None  # the poll's callback is removed with it
    # the poll claimed nothing: work created now waits for the next poll
    task = (await api.create_task(device_id="a1")).json()
    assignment = (await api.claim("host-a")).json()
    assert assignment["task_id"] == task["task_id"]
