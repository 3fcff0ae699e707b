"""The live feed's route, GET /api/v1/events: server-sent events, resumable, filtered, admin only.

Tested against a real uvicorn server in the test's event loop, since httpx's ASGI transport does
not stream; the reader behind it, ``EventFeed``, in test_feed_reader.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn
from starlette.applications import Starlette

from coordinator.app import create_app
from coordinator.feed import EventFeed
from coordinator.serve.server import head_limited_protocol
from coordinator.state.keys import Keys
from coordinator.transport.base import PlainTransport
from tests.conftest import Unclosable, make_settings
from tests.coordinator.feed_support import (
    ADMIN_HEADERS,
    EventSource,
    Probe,
    open_events,
    xadd,
)
from tests.support import (
    ADMIN,
    HOSTS,
    REAL_REDIS_URL,
    delete_prefix_async,
    free_port,
    wait_until_async,
)

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]
HOST_A = {"authorization": f"Bearer {HOSTS['host-a']}"}


# -- a served app and its event streams -----------------------------------------------------


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """``app`` on a real uvicorn server (the coordinator's own protocol) on a free loopback
    port, in this event loop; stopped as SIGTERM stops it: the app is told first."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=head_limited_protocol(10.0),
                            log_config=None, access_log=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await wait_until_async(lambda: server.started or task.done(), what="uvicorn started")
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.state.stopping()
        server.should_exit = True
        await task


@dataclass
class Served:
    app: Starlette
    client: httpx.AsyncClient
    redis: aioredis.Redis
    stream: str

    @property
    def feed(self) -> EventFeed:
        return self.app.state.ctx.feed

    async def xadd(self, type_: str = "created", **ids: Any) -> str:
        return await xadd(self.redis, self.stream, type_, **ids)


@contextlib.asynccontextmanager
async def served_app(redis_client: aioredis.Redis, prefix: str, **settings: Any) -> AsyncIterator[Served]:
    """The app with these settings, served; its keys deleted afterwards."""
    transport = PlainTransport(Unclosable(redis_client))
    app = create_app(make_settings(prefix, **settings), redis=transport)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield Served(app, client, redis_client, Keys(prefix).feed)
    await delete_prefix_async(redis_client, prefix)


@pytest.fixture
async def served(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[Served]:
    async with served_app(redis_client, prefix) as served:
        yield served


@contextlib.asynccontextmanager
async def watching(client: httpx.AsyncClient, query: str = "", **headers: str) -> AsyncIterator[EventSource]:
    source = await open_events(client, query, **headers)
    try:
        yield source
    finally:
        await source.response.aclose()


async def test_events_arrive_live_in_order(served: Served) -> None:
    await served.xadd()  # before the watcher: not sent
    async with watching(served.client) as source:
        headers = source.response.headers
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
        ids = [await served.xadd("created", task_id=f"t{i}", host_id="h", attempt=1) for i in range(5)]
        got = [await source.event() for _ in ids]
        assert [event_id for event_id, _ in got] == ids
        assert [event["task_id"] for _, event in got] == [f"t{i}" for i in range(5)]
        # `at`, epoch ms in the stream, is sent as the contract's RFC 3339 UTC with milliseconds.
        # host_name beside host_id: null for a host nobody knows.
        assert got[0][1] == {"type": "created", "at": "2023-11-14T22:13:20.000Z", "task_id": "t0",
                             "host_id": "h", "host_name": None, "attempt": 1}


async def test_events_name_their_host_and_device(served: Served) -> None:
    # Issue 42, seen 2: live events showed only ids, though the host's name was known.
    beat = await served.client.put("/internal/v1/hosts/host-a/heartbeat", headers=HOST_A, json={
        "devices": [{"device_id": "phone-1", "driver": "sim", "status": "available"}],
        "agent": {"hostname": "lab-1.example"}})
    assert beat.status_code == 200, beat.text
    async with watching(served.client, "?host_id=host-a") as source:
        created = await served.client.post("/api/v1/tasks", headers=ADMIN_HEADERS,
                                           json={"kind": "goal", "goal": "g", "device_id": "phone-1"})
        assert created.status_code == 201, created.text
        _, assigned = await source.event()
    assert assigned["type"] == "assigned" and assigned["task_id"] == created.json()["task_id"]
    assert (assigned["host_id"], assigned["host_name"]) == ("host-a", "lab-1.example")
    assert (assigned["device_id"], assigned["device_name"]) == ("phone-1", "phone-1")


async def test_resume_with_last_event_id_gets_exactly_the_missed_then_live_ones(served: Served) -> None:
    missed = [await served.xadd(task_id=f"t{i}") for i in range(5)]
    async with watching(served.client, **{"last-event-id": missed[1]}) as source:
        assert source.opening["id"] == missed[1]  # where a reconnect before any event resumes
        assert await source.events(3) == missed[2:]
        live = [await served.xadd(task_id=f"live{i}") for i in range(2)]
        assert await source.events(2) == live
    # the query parameter, for clients that cannot set headers; the header wins over it
    async with watching(served.client, f"?last_event_id={missed[3]}") as source:
        assert await source.events(3) == [missed[4], *live]
    # without one, it starts from the newest event when the request came
    async with watching(served.client) as source:
        assert source.opening["id"] == live[-1]
    async with watching(served.client, f"?last_event_id={missed[0]}", **{"last-event-id": live[0]}) as source:
        last = await served.xadd()
        assert await source.events(2) == [live[1], last]


async def test_tail_starts_with_the_last_few_events_and_a_resume_id_wins(served: Served) -> None:
    # Issue 58: the dashboard's log opens with what just happened, not "No events yet".
    ids = [await served.xadd(task_id=f"t{i}") for i in range(5)]
    async with watching(served.client, "?tail=2") as source:
        assert source.opening["id"] == ids[2]
        assert await source.events(2) == ids[3:]
    async with watching(served.client, "?tail=9") as source:  # more than are kept: all of them
        assert await source.events(5) == ids
    async with watching(served.client, "?tail=2", **{"last-event-id": ids[0]}) as source:
        assert await source.events(4) == ids[1:]
    for bad in ("-1", "101", "x"):
        response = await served.client.get(f"/api/v1/events?tail={bad}", headers=ADMIN_HEADERS)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request", bad


async def test_resume_from_an_id_older_than_the_oldest_kept_starts_at_the_oldest(served: Served) -> None:
    ids = [await xadd(served.redis, served.stream, maxlen="5", task_id=f"t{i}") for i in range(10)]
    async with watching(served.client, **{"last-event-id": ids[0]}) as source:
        told = await source.frame()
        assert told is not None and "dropped" in told[""] and ids[5] in told[""]
        assert await source.events(5) == ids[5:]


async def test_task_and_host_filters(served: Served) -> None:
    async with watching(served.client, "?task_id=t1") as t1, watching(served.client, "?host_id=h2") as h2:
        a = await served.xadd(task_id="t1", host_id="h1")
        b = await served.xadd("host_offline", host_id="h2")
        await served.xadd(task_id="t3", host_id="h3")
        c = await served.xadd("result", task_id="t1", host_id="h2")
        assert await t1.events(2) == [a, c]
        assert await h2.events(2) == [b, c]


async def test_refused_without_the_admin_token_or_with_malformed_ids(served: Served) -> None:
    for headers in ({}, {"authorization": "Bearer wrong-token"}, {"authorization": f"Basic {ADMIN}"}):
        response = await served.client.get("/api/v1/events", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
    for query, headers in [
        ("", {"last-event-id": "yesterday"}),
        ("", {"last-event-id": "1-2-3"}),
        ("?last_event_id=1-x", {}),
        ("?task_id=not%20an%20id", {}),
        ("?host_id=" + "h" * 129, {}),
    ]:
        response = await served.client.get(f"/api/v1/events{query}", headers={**ADMIN_HEADERS, **headers})
        assert response.status_code == 400, (query, headers)
        assert response.json()["error"]["code"] == "invalid_request"
    assert served.feed.watchers == 0


async def test_close_ends_every_stream_promptly(served: Served) -> None:
    async with contextlib.AsyncExitStack() as stack:
        sources = [await stack.enter_async_context(watching(served.client)) for _ in range(3)]
        await wait_until_async(lambda: served.feed.watchers == 3)
        served.app.state.stopping()  # what SIGTERM calls
        for source in sources:
            assert await source.frame(timeout=2) is None
        await wait_until_async(lambda: served.feed.watchers == 0)
        async with watching(served.client) as late:  # a watcher arriving while stopping
            assert await late.frame(timeout=2) is None


async def test_a_watcher_that_disconnects_is_no_longer_counted(served: Served) -> None:
    async with watching(served.client) as staying:
        async with watching(served.client):
            await wait_until_async(lambda: served.feed.watchers == 2)
        await wait_until_async(lambda: served.feed.watchers == 1, what="the hung-up watcher gone")
        metrics = await served.client.get("/metrics")
        assert b"tether_feed_watchers 1.0" in metrics.content
        event_id = await served.xadd()
        assert await staying.events(1) == [event_id]
    await wait_until_async(lambda: served.feed.watchers == 0)


async def test_keepalive_comment_after_silence(redis_client: aioredis.Redis, prefix: str) -> None:
    async with (served_app(redis_client, prefix, feed_keepalive_s=0.1) as served,
                watching(served.client) as source):
        assert await source.frame() == {"": "keepalive"}


async def test_a_stream_that_loses_redis_ends_with_a_comment(redis_client: aioredis.Redis, prefix: str) -> None:
    probe = Probe(Unclosable(redis_client))
    app = create_app(make_settings(prefix), redis=PlainTransport(probe))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        first, _ = [await xadd(redis_client, Keys(prefix).feed) for _ in range(2)]
        probe.fail_ranges = 1  # the catch-up of a resuming watcher fails
        async with watching(client, **{"last-event-id": first}) as source:
            assert await source.frame() == {"": "the feed lost Redis; reconnect to resume"}
            assert await source.frame() is None
    await delete_prefix_async(redis_client, prefix)


async def test_200_watchers_share_one_reader_and_a_few_pooled_connections(prefix: str) -> None:
    # Real Redis only: the pool is the production one (8 connections, blocking when all are
    # taken), and its connections carry a name so CLIENT LIST counts this app's only.
    name = f"tether-feed-test-{uuid.uuid4().hex[:8]}"
    pool = aioredis.BlockingConnectionPool.from_url(REAL_REDIS_URL, max_connections=8, timeout=10,
                                                    client_name=name)
    counted = Probe(aioredis.Redis(connection_pool=pool))
    observer = aioredis.Redis.from_url(REAL_REDIS_URL)
    app = create_app(make_settings(prefix), redis=PlainTransport(counted))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    try:
        async with (serving(app) as url,
                    httpx.AsyncClient(base_url=url, timeout=10, limits=limits) as client,
                    contextlib.AsyncExitStack() as stack):
            sources = await asyncio.gather(*(open_events(client) for _ in range(200)))
            for source in sources:
                stack.push_async_callback(source.response.aclose)
            feed: EventFeed = app.state.ctx.feed
            await wait_until_async(lambda: feed.watchers == 200)
            event_id = await xadd(observer, Keys(prefix).feed)
            assert await asyncio.gather(*(source.events(1) for source in sources)) == [[event_id]] * 200
            assert (await client.get("/readyz")).status_code == 200  # the pool still serves requests
            # not a connection per watcher: the pool's, of which the feed's one reader blocks on
            # one (and the wake-up inbox's pop on another)
            mine = [c for c in await observer.client_list() if c.get("name") == name]
            assert 1 <= len(mine) <= 8
            assert sum("b" in c["flags"] for c in mine) <= 2
            assert counted.most_reading == 1
    finally:
        await delete_prefix_async(observer, prefix)
        await observer.aclose()
        await pool.disconnect()


async def test_a_head_answers_the_streams_head_and_the_connection_serves_the_next_request(served: Served) -> None:
    url = httpx.URL(str(served.client.base_url))
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:  # a HEAD, and a GET pipelined behind it on the same connection
        writer.write(b"HEAD /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ADMIN.encode()
                     + b"\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 ") and b"content-type: text/event-stream" in head.lower()
        second = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert second.startswith(b"HTTP/1.1 200 ")
    finally:
        writer.close()
    assert served.feed.watchers == 0
    metrics = await served.client.get("/metrics")
    assert b"tether_feed_watchers 0.0" in metrics.content
