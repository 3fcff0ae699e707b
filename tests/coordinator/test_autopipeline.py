"""Auto-pipelining (coordinator/transport/autopipeline.py) against real Redis, as its callers see it: each
call answered with its own reply in the order issued, one command's error kept to itself, and a
lost connection failing every caller still waiting while the next call works. (Its pipelines'
replies: test_redis_transport.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.transport.autopipeline import MAX_BATCH, AutoPipeline
from coordinator.transport.base import AutoPipelinedTransport
from tests.coordinator.helpers import ClosedConnection, close_unseen
from tests.support import REAL_REDIS_URL, free_port, unique_prefix, wait_until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
async def real_redis() -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(REAL_REDIS_URL)
    yield redis
    await redis.aclose()


async def test_calls_of_one_turn_are_answered_each_its_own_reply_in_the_order_issued(
        real_redis: aioredis.Redis) -> None:
    key = unique_prefix() + ":n"
    pipeline = AutoPipeline(real_redis)
    try:
        replies = await asyncio.gather(*(pipeline.execute("INCRBY", key, i) for i in range(1, 11)))
        # applied in the order issued: the running totals 1, 3, 6, ...
        assert replies == [sum(range(1, i + 1)) for i in range(1, 11)]
        # more than a batch's worth in one turn, several times over: still every reply in order
        total = 55
        for _ in range(3):
            replies = await asyncio.gather(*(pipeline.execute("INCR", key) for _ in range(MAX_BATCH + 5)))
            assert replies == list(range(total + 1, total + 1 + MAX_BATCH + 5))
            total += MAX_BATCH + 5
    finally:
        await real_redis.delete(key)


async def test_calls_issued_while_one_is_in_flight_are_answered_after_it_in_order(
        real_redis: aioredis.Redis) -> None:
    key = unique_prefix() + ":n"
    pipeline = AutoPipeline(real_redis)
    try:
        assert await pipeline.execute("PING") in (b"PONG", True)  # an idle pipeline, as between requests
        first = pipeline.execute("INCR", key)  # a lone call
        same_turn = [pipeline.execute("INCR", key) for _ in range(3)]
        await asyncio.sleep(0)  # the next event-loop turn: the first calls are on their way
        next_turn = [pipeline.execute("INCR", key) for _ in range(3)]
        assert await asyncio.gather(first, *same_turn, *next_turn) == list(range(1, 8))
    finally:
        await real_redis.delete(key)


async def test_a_kept_connection_the_server_closed_is_opened_again(real_redis: aioredis.Redis) -> None:
    pipeline = AutoPipeline(real_redis)
    killer = aioredis.Redis.from_url(REAL_REDIS_URL)
    name = "kept-" + unique_prefix()[:20]
    try:
        await pipeline.execute("CLIENT", "SETNAME", name)

        async def its_id() -> str | None:
            return next((e["id"] for e in await killer.client_list() if e.get("name") == name), None)

        killed = await wait_until_async(its_id)
        await killer.client_kill_filter(_id=killed)  # as a Redis restart would
        # Redis closed it before it answered the kill; one more round trip on this event loop,
        # and the loop has read the hang-up too.
        assert await its_id() is None
        assert await pipeline.execute("PING") in (b"PONG", True)  # not a lost connection
        assert await pipeline.execute("CLIENT", "GETNAME") is None  # a new connection: no name
    finally:
        await killer.aclose()


async def test_reads_on_a_connection_closed_before_they_were_answered_are_sent_again_on_a_new_one(
        real_redis: aioredis.Redis) -> None:
    key = unique_prefix() + ":k"
    transport = AutoPipelinedTransport(real_redis)
    name = "reused-" + unique_prefix()[:20]
    try:
        await real_redis.set(key, "v")
        async with transport.pipeline() as pipe:
            pipe.execute_command("CLIENT", "SETNAME", name)  # on the connection kept for the next turn
            await pipe.execute()
        close_unseen(name)
        async with transport.pipeline() as pipe:
            pipe.get(key)
            pipe.strlen(key)
            pipe.execute_command("CLIENT", "GETNAME")
            assert await pipe.execute() == [b"v", 1, None]  # answered, on a new connection
    finally:
        await real_redis.delete(key)


async def test_a_write_on_a_connection_closed_before_it_was_answered_is_not_sent_again(
        real_redis: aioredis.Redis) -> None:
    """Its caller cannot tell a connection closed before the write from a Redis that ran it and
    died before answering: it fails, and the next call works."""
    key = unique_prefix() + ":n"
    pipeline = AutoPipeline(real_redis)
    name = "reused-" + unique_prefix()[:20]
    try:
        await pipeline.execute("CLIENT", "SETNAME", name)
        close_unseen(name)
        read = pipeline.execute("GET", key, replayable=True)
        write = pipeline.execute("INCR", key)
        with pytest.raises(RedisConnectionError):
            await write
        assert await read is None  # the read of the same write went again
        assert await pipeline.execute("INCR", key) == 1  # the first INCR never reached Redis
    finally:
        await real_redis.delete(key)


async def test_one_command_s_error_is_its_own(real_redis: aioredis.Redis) -> None:
    key = unique_prefix() + ":n"
    pipeline = AutoPipeline(real_redis)
    try:
        results = await asyncio.gather(
            pipeline.execute("INCR", key),
            pipeline.execute("EVALSHA", "0" * 40, 0),
            pipeline.execute("INCR", key),
            return_exceptions=True,
        )
        assert results[0] == 1 and results[2] == 2
        assert isinstance(results[1], NoScriptError)
        assert await pipeline.execute("GET", key) == b"2"  # the connection is still in step
    finally:
        await real_redis.delete(key)


async def test_a_cancelled_caller_leaves_the_others_their_replies(real_redis: aioredis.Redis) -> None:
    key = unique_prefix() + ":n"
    pipeline = AutoPipeline(real_redis)
    try:
        first = pipeline.execute("INCR", key)
        gone = pipeline.execute("INCR", key)
        last = pipeline.execute("INCR", key)
        gone.cancel()
        assert await first == 1 and await last == 3  # the cancelled call still ran: Redis has it
        assert gone.cancelled()
    finally:
        await real_redis.delete(key)


async def test_an_unreachable_redis_fails_every_waiting_caller_then_recovers() -> None:
    down = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    pipeline = AutoPipeline(down)
    results = await asyncio.gather(*(pipeline.execute("PING") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, RedisConnectionError) for r in results)
    await down.aclose()


async def test_a_connection_lost_mid_batch_fails_the_waiting_callers_and_the_next_turn_works(
        real_redis: aioredis.Redis) -> None:
    pipeline = AutoPipeline(real_redis)
    killer = aioredis.Redis.from_url(REAL_REDIS_URL)
    name = "autopipeline-" + unique_prefix()[:20]
    try:
        await pipeline.execute("CLIENT", "SETNAME", name)
        # the first command blocks on the server; killing the connection loses every reply due
        blocked = pipeline.execute("BLPOP", unique_prefix() + ":nothing", 5)
        behind = pipeline.execute("PING")

        async def blocking_connection() -> str | None:
            for entry in await killer.client_list():
                if entry.get("name") == name and entry.get("cmd") == "blpop":
                    return entry["id"]
            return None

        await killer.client_kill_filter(_id=await wait_until_async(blocking_connection))
        results = await asyncio.gather(blocked, behind, return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results
        assert await pipeline.execute("PING") in (b"PONG", True)
    finally:
        await killer.aclose()


async def test_a_batch_that_outlasts_the_socket_timeout_fails_its_callers_and_the_next_turn_works() -> None:
    slow = aioredis.Redis.from_url(REAL_REDIS_URL, socket_timeout=0.3)
    pipeline = AutoPipeline(slow)
    try:
        # the server holds the first reply for 5 s: the whole batch is past its deadline at 0.3 s
        blocked = pipeline.execute("BLPOP", unique_prefix() + ":nothing", 5)
        behind = pipeline.execute("PING")
        results = await asyncio.wait_for(asyncio.gather(blocked, behind, return_exceptions=True), 3)
        assert all(isinstance(r, RedisTimeoutError) for r in results), results
        assert await pipeline.execute("PING") in (b"PONG", True)
    finally:
        await slow.aclose()


class _PoolOfClosed:
    """A client whose pool hands out a connection its server already closed."""

    def __init__(self) -> None:
        self.connection_pool = self
        self.connection = ClosedConnection()

    async def get_connection(self) -> ClosedConnection:
        return self.connection

    async def release(self, connection: ClosedConnection) -> None:
        pass


async def test_a_write_refused_on_a_closed_connection_fails_the_callers_as_a_lost_connection() -> None:
    client = _PoolOfClosed()
    auto = AutoPipeline(client)
    replies = [auto.execute("PING"), auto.execute("PING")]
    for reply in replies:
        with pytest.raises(RedisConnectionError):
            await reply
    assert client.connection.disconnected
