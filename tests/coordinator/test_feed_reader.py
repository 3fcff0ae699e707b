"""The live feed's reader, ``EventFeed``: one reader per process fanned out to watchers, resumable.

Events are written the way the scripts write them (``XADD <feed> MAXLEN ~ 10000 * e <json>``).
``EventFeed`` is tested on its own for catching up, falling behind and Redis failures; its route,
GET /api/v1/events, in test_feed_route.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from coordinator.feed import KEEPALIVE, Entry, EventFeed, Notice, StreamId
from coordinator.state.keys import Keys
from tests.coordinator.feed_support import Probe, xadd, xadd_many
from tests.support import delete_prefix_async, wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


# -- reading the stream ---------------------------------------------------------------------


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


@contextlib.asynccontextmanager
async def running(redis: aioredis.Redis, stream: str, **options: Any) -> AsyncIterator[tuple[EventFeed, Probe]]:
    """A feed with its reader running, as the app's lifespan runs it, and the probe it reads
    through. Its reads block for 0.5 s: on Python 3.11 redis-py may swallow a cancellation, and
    the reader then ends only when its read does."""
    probe = Probe(redis)
    feed = EventFeed(probe, stream, **{"block_s": 0.5, **options})
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
                live.append(await xadd(redis_client, stream, task_id=f"live{i}"))  # noqa: PERF401 - read while it grows

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
