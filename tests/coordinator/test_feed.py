"""The live feed, GET /api/v1/events: one reader per process fanned out to watchers, resumable.

Events are written the way the scripts write them (``XADD <feed> MAXLEN ~ 10000 * e <json>``).
``EventFeed`` is tested on its own for catching up, falling behind and Redis failures; the route
against a real uvicorn server in the test's event loop, since httpx's ASGI transport does not
stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
import uvicorn
from redis.exceptions import ConnectionError as RedisConnectionError
from starlette.applications import Starlette

from coordinator import feed_api
from coordinator.app import create_app
from coordinator.feed import KEEPALIVE, Entry, EventFeed, Notice, StreamId
from coordinator.keys import Keys
from coordinator.server import head_limited_protocol
from coordinator.redis_transport import PlainTransport
from tests.conftest import Unclosable, make_settings
from tests.support import (
    ADMIN,
    REAL_REDIS_URL,
    delete_prefix_async,
    free_port,
    wait_until_async,
)

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}


# -- writing and reading the stream ---------------------------------------------------------


async def xadd(redis: Any, stream: str, type_: str = "created", maxlen: str = "~ 10000", **ids: Any) -> str:
    """Append one event as the scripts do; its stream id."""
    event = {"type": type_, "at": 1_700_000_000_000, **ids}
    limit = maxlen.split()
    raw = await redis.execute_command("XADD", stream, "MAXLEN", *limit, "*", "e", orjson.dumps(event))
    return raw.decode() if isinstance(raw, bytes) else raw


async def xadd_many(redis: Any, stream: str, count: int, **ids: Any) -> list[str]:
    return [await xadd(redis, stream, task_id=f"t{i}", **ids) for i in range(count)]


async def take(items: AsyncIterator[Entry | Notice], count: int, timeout: float = 5.0) -> list[Entry | Notice]:
    """The next ``count`` items a watcher yields, keepalives aside."""
    taken: list[Entry | Notice] = []
    while len(taken) < count:
        item = await asyncio.wait_for(anext(items), timeout)
        if item != KEEPALIVE:
            taken.append(item)
    return taken


def ids_of(items: list[Entry | Notice]) -> list[str]:
    return [item.id for item in items if isinstance(item, Entry)]


@pytest.fixture
async def stream(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[str]:
    yield Keys(prefix).feed
    await delete_prefix_async(redis_client, prefix)


class Probe:
    """A client that counts the feed's reads (XREADs running now, at most at once, XRANGEs), and
    whose next ``fail`` XREADs (``fail_ranges`` XRANGEs) raise a connection error, as a Redis
    restart would."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.fail = 0
        self.fail_ranges = 0
        self.failed = asyncio.Event()
        self.reading = 0
        self.most_reading = 0
        self.ranges = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def xread(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            self.fail -= 1
            self.failed.set()
            raise RedisConnectionError("injected")
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            return await self._client.xread(*args, **kwargs)
        finally:
            self.reading -= 1

    async def xrange(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_ranges:
            self.fail_ranges -= 1
            raise RedisConnectionError("injected")
        self.ranges += 1
        return await self._client.xrange(*args, **kwargs)


@contextlib.asynccontextmanager
async def running(redis: aioredis.Redis, stream: str, **options: Any) -> AsyncIterator[tuple[EventFeed, Probe]]:
    """A feed with its reader running, as the app's lifespan runs it, and the probe it reads
    through. Its reads block for 0.5 s: on Python 3.11 redis-py may swallow a cancellation, and
    the reader then ends only when its read does."""
    probe = Probe(redis)
    feed = EventFeed(probe, stream, **{"block_s": 0.5, **options})  # type: ignore[arg-type]
    reader = asyncio.create_task(feed.run())
    try:
        yield feed, probe
    finally:
        feed.close()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


def start(watcher: AsyncIterator[Entry | Notice]) -> asyncio.Future[Entry | Notice]:
    """Start a watcher (it registers, and places itself at now): its first item, when it comes."""
    return asyncio.ensure_future(anext(watcher))


async def reading(feed: EventFeed, probe: Probe, watchers: int) -> None:
    """Until ``watchers`` follow the feed and its reader blocks on the stream for them."""
    await wait_until_async(lambda: feed.watchers == watchers and probe.reading == 1, what="the reader reading")


# -- EventFeed ------------------------------------------------------------------------------


def test_stream_ids_parse_and_order() -> None:
    assert StreamId.parse("1700000000000-3") == StreamId(1700000000000, 3)
    assert StreamId.parse("17") == StreamId(17, 0)
    assert str(StreamId.parse("5-0")) == "5-0"
    assert StreamId.parse("2-0") > StreamId.parse("1-99")
    for bad in ("", "x", "1-", "-1", "1-2-3", "1.5", " 1-2", "1-2 ", "99999999999999999999-0"):
        with pytest.raises(ValueError):
            StreamId.parse(bad)


async def test_resume_catches_up_then_follows_live_with_no_gap_and_no_duplicate(
    redis_client: aioredis.Redis, stream: str,
) -> None:
    # A backlog of several catch-up batches, then live events written while the watcher is
    # still catching up: a small buffer makes it cross between Redis and memory many times.
    backlog = await xadd_many(redis_client, stream, 250)
    async with running(redis_client, stream, buffer_size=16) as (feed, probe):
        watcher = feed.follow(backlog[0])
        live: list[str] = []

        async def write_live() -> None:
            for i in range(100):
                live.append(await xadd(redis_client, stream, task_id=f"live{i}"))

        writer = asyncio.create_task(write_live())
        got = await take(watcher, 349)
        await writer
        assert ids_of(got) == backlog[1:] + live
        assert probe.ranges >= 3  # 249 events behind: catch-up batches of 100
        await watcher.aclose()
        assert feed.watchers == 0


async def test_a_watcher_behind_the_buffer_catches_up_from_redis(
    redis_client: aioredis.Redis, stream: str,
) -> None:
    async with running(redis_client, stream, buffer_size=4) as (feed, probe):
        slow, fast = feed.follow(None), feed.follow(None)
        slow_first, fast_first = start(slow), start(fast)
        await reading(feed, probe, 2)
        first = await xadd(redis_client, stream)
        assert ids_of([await slow_first]) == [first]  # the slow client reads one, then stalls
        ids = await xadd_many(redis_client, stream, 20)
        # the fast one has everything, so the reader too: its buffer holds the last 4 only
        assert ids_of([await fast_first, *await take(fast, 20)]) == [first, *ids]
        ranges = probe.ranges
        got = await take(slow, 20)
        assert all(isinstance(item, Entry) for item in got) and ids_of(got) == ids
        assert probe.ranges > ranges
        await slow.aclose()
        await fast.aclose()


async def test_a_watcher_behind_what_the_stream_keeps_is_told_and_continues_from_the_oldest(
    redis_client: aioredis.Redis, stream: str,
) -> None:
    async with running(redis_client, stream, buffer_size=4) as (feed, probe):
        slow, fast = feed.follow(None), feed.follow(None)
        slow_first, fast_first = start(slow), start(fast)
        await reading(feed, probe, 2)
        first = await xadd(redis_client, stream)
        assert ids_of([await slow_first]) == [first]  # the slow client reads one, then stalls
        ids = await xadd_many(redis_client, stream, 20)
        assert ids_of([await fast_first, *await take(fast, 20)]) == [first, *ids]
        await redis_client.xtrim(stream, maxlen=5, approximate=False)
        told, *rest = await take(slow, 6)
        assert isinstance(told, Notice) and f"after {first}" in told.text and ids[15] in told.text
        assert ids_of(rest) == ids[15:]
        await slow.aclose()
        await fast.aclose()


async def test_the_reader_resumes_after_a_redis_failure_without_losing_events(
    redis_client: aioredis.Redis, stream: str,
) -> None:
    async with running(redis_client, stream) as (feed, probe):
        watcher = feed.follow(None)
        first = start(watcher)
        await reading(feed, probe, 1)
        probe.fail = 2  # the reader's next two reads fail, once this event ends its current one
        trigger = await xadd(redis_client, stream)
        assert ids_of([await first]) == [trigger]
        await asyncio.wait_for(probe.failed.wait(), 5)
        during = await xadd_many(redis_client, stream, 3)  # written while the reader backs off
        assert ids_of(await take(watcher, 3)) == during
        assert probe.ranges == 0  # from the reader, not caught up by the watcher
        await watcher.aclose()


async def test_the_reader_idles_without_watchers_and_starts_again_for_the_next(
    redis_client: aioredis.Redis, stream: str,
) -> None:
    async with running(redis_client, stream, block_s=0.1) as (feed, probe):
        watcher = feed.follow(None)
        first = start(watcher)
        await reading(feed, probe, 1)
        first.cancel()  # its client hangs up
        await asyncio.gather(first, return_exceptions=True)
        # Between two reads the reader never yields to the loop: it idles, or it reads.
        await wait_until_async(lambda: probe.reading == 0, what="the reader idle")
        await xadd(redis_client, stream)  # while nobody watches
        again = feed.follow(None)
        second = start(again)
        await reading(feed, probe, 1)
        event_id = await xadd(redis_client, stream)
        assert ids_of([await second]) == [event_id]
        await again.aclose()


async def test_filters_and_malformed_entries(redis_client: aioredis.Redis, stream: str) -> None:
    async with running(redis_client, stream) as (feed, _):
        now = await feed.latest_id()
        t1 = feed.follow(now, match={"task_id": "t1"})
        h2 = feed.follow(now, match={"host_id": "h2"})
        await redis_client.xadd(stream, {"e": b"not json"})
        await redis_client.xadd(stream, {"other": b"{}"})
        a = await xadd(redis_client, stream, task_id="t1", host_id="h1")
        b = await xadd(redis_client, stream, task_id="t2", host_id="h2")
        c = await xadd(redis_client, stream, "result", task_id="t1", host_id="h2")
        assert ids_of(await take(t1, 2)) == [a, c]
        assert ids_of(await take(h2, 2)) == [b, c]
        await t1.aclose()
        await h2.aclose()


async def test_keepalive_after_silence_even_while_filtered_out_events_pass(
    redis_client: aioredis.Redis, stream: str,
) -> None:
    async with running(redis_client, stream) as (feed, _):
        watcher = feed.follow(None, match={"task_id": "nobody"}, keepalive_s=0.2)
        first = start(watcher)
        while not first.done():  # events for others, faster than the keepalive period
            await xadd(redis_client, stream, task_id="someone")
            await asyncio.wait({first}, timeout=0.05)
        assert first.result() == KEEPALIVE
        await watcher.aclose()


async def test_a_closed_feed_ends_its_watchers_at_once() -> None:
    feed = EventFeed(None, "unused")  # type: ignore[arg-type] - never reaches Redis
    feed.close()
    assert [item async for item in feed.follow("0-0")] == []
    assert feed.watchers == 0


# -- GET /api/v1/events ---------------------------------------------------------------------


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


@pytest.fixture
async def served(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[Served]:
    app = create_app(make_settings(prefix), redis=PlainTransport(Unclosable(redis_client)))  # type: ignore[arg-type]
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield Served(app, client, redis_client, Keys(prefix).feed)
    await delete_prefix_async(redis_client, prefix)


class EventSource:
    """A test's view of one open event stream, read frame by frame."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.opening: dict[str, str] = {}

    async def frame(self, timeout: float = 5.0) -> dict[str, str] | None:
        """The next frame as {field: value} (a comment's field is ""); None at the end."""
        return await asyncio.wait_for(self._frame(), timeout)

    async def _frame(self) -> dict[str, str] | None:
        fields: dict[str, str] = {}
        async for line in self._lines:
            if not line:
                if fields:
                    return fields
                continue
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        return fields or None

    async def event(self) -> tuple[str, dict[str, Any]]:
        """The next event (comments skipped): its id and its JSON."""
        while True:
            frame = await self.frame()
            assert frame is not None, "the stream ended"
            if "id" in frame:
                return frame["id"], orjson.loads(frame["data"])

    async def events(self, count: int) -> list[str]:
        return [(await self.event())[0] for _ in range(count)]


async def open_events(client: httpx.AsyncClient, query: str = "", **headers: str) -> EventSource:
    """An open stream of GET /api/v1/events, its first frame (``retry`` and the starting ``id``,
    no data) read and kept as ``opening``; the caller closes its response."""
    request = client.build_request("GET", f"/api/v1/events{query}", headers={**ADMIN_HEADERS, **headers})
    response = await client.send(request, stream=True)
    source = EventSource(response)
    try:
        assert response.status_code == 200, await response.aread()
        opening = await source.frame()
        assert opening is not None and opening.keys() == {"retry", "id"} and opening["retry"] == "2000"
        source.opening = opening
    except BaseException:
        await response.aclose()
        raise
    return source


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
        assert got[0][1] == {"type": "created", "at": 1_700_000_000_000, "task_id": "t0", "host_id": "h",
                             "attempt": 1}


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


async def test_keepalive_comment_after_silence(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feed_api, "KEEPALIVE_S", 0.1)
    async with watching(served.client) as source:
        assert await source.frame() == {"": "keepalive"}


async def test_a_stream_that_loses_redis_ends_with_a_comment(redis_client: aioredis.Redis, prefix: str) -> None:
    probe = Probe(Unclosable(redis_client))
    app = create_app(make_settings(prefix), redis=PlainTransport(probe))  # type: ignore[arg-type]
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
    app = create_app(make_settings(prefix), redis=PlainTransport(counted))  # type: ignore[arg-type]
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
