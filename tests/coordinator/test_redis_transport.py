"""The one seam to Redis (coordinator/transport/base.py): every implementation keeps the same
contract, as a caller sees it. Run on a real single node (auto-pipelined, and plain as with
``COORDINATOR_AUTOPIPELINE=false``), the embedded fakeredis and a real local Redis Cluster."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from coordinator.state.scripts import Library
from coordinator.transport.base import (
    AutoPipelinedTransport,
    Durability,
    NotReplicated,
    PlainTransport,
    RedisTransport,
)
from coordinator.transport.cluster import ClusterTransport
from coordinator.transport.open import open_redis
from tests.conftest import Unclosable, backend_of, make_settings, transport_for
from tests.coordinator.helpers import ClosedConnection, close_unseen
from tests.support import (
    REAL_REDIS_URL,
    delete_prefix_async,
    unique_prefix,
    wait_until_async,
)

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

_LIBRARY = """#!lua name={name}
redis.register_function('{name}_echo', function(keys, args)
  redis.call('RPUSH', keys[1], unpack(args))
  return {{keys[1], redis.call('LRANGE', keys[1], 0, -1)}}
end)
redis.register_function('{name}_fail', function(keys, args)
  return redis.error_reply('BOOM ' .. args[1])
end)
"""


@pytest.fixture(params=["auto-pipelined", "plain"])
async def seam(request: pytest.FixtureRequest, redis_client: aioredis.Redis,
               prefix: str) -> AsyncIterator[RedisTransport]:
    """The transport of the test's backend; on real Redis, both single-node implementations."""
    kind = backend_of(request)
    if request.param == "plain" and kind != "redis":
        pytest.skip("only a single node chooses between the two")
    client = Unclosable(redis_client)
    transport = PlainTransport(client) if request.param == "plain" else transport_for(kind, client)
    yield transport
    await transport.aclose()
    await delete_prefix_async(redis_client, prefix)


@pytest.fixture
async def functions(redis_client: aioredis.Redis) -> AsyncIterator[str]:
    """A function library of this test's, loaded: its name prefixes its functions."""
    name = "seam_" + uuid.uuid4().hex[:12]
    await Library(name, _LIBRARY.format(name=name)).load(redis_client)
    yield name
    await redis_client.function_delete(name)


async def test_fcall_runs_the_function_on_the_keys_it_is_given(seam: RedisTransport, functions: str,
                                                                 prefix: str) -> None:
    key = f"{prefix}:list"
    assert await seam.fcall(f"{functions}_echo", [key], ["a", 1, b"\x00"]) == [key.encode(), [b"a", b"1", b"\x00"]]
    # calls issued together are each answered with their own reply
    replies = await asyncio.gather(*(seam.fcall(f"{functions}_echo", [key], [str(i)]) for i in range(20)))
    assert sorted(len(reply[1]) for reply in replies) == list(range(4, 24))
    assert all(reply[1][len(reply[1]) - 1] == str(i).encode() for i, reply in enumerate(replies))


async def test_a_function_s_error_is_raised_to_its_caller_only(seam: RedisTransport, functions: str,
                                                                prefix: str) -> None:
    key = f"{prefix}:list"
    results = await asyncio.gather(seam.fcall(f"{functions}_echo", [key], ["x"]),
                                   seam.fcall(f"{functions}_fail", [key], ["now"]),
                                   seam.fcall(f"{functions}_echo", [key], ["y"]), return_exceptions=True)
    assert results[0] == [key.encode(), [b"x"]] and results[2] == [key.encode(), [b"x", b"y"]]
    assert isinstance(results[1], ResponseError) and "BOOM now" in str(results[1])
    with pytest.raises(ResponseError, match="not found"):
        await seam.fcall(functions + "_missing", [key], [])


async def test_a_durable_call_is_acknowledged_only_with_the_replicas_asked_for(
        request: pytest.FixtureRequest, seam: RedisTransport, functions: str, prefix: str,
        redis_client: aioredis.Redis) -> None:
    kind = backend_of(request)
    if kind == "fakeredis":
        pytest.skip("fakeredis has no replicas to WAIT for")
    key = f"{prefix}:list"
    replicas = 1 if kind == "cluster" else 0  # each master of the local cluster has one
    assert await seam.fcall(f"{functions}_echo", [key], ["a"], Durability(replicas, 1000)) == [key.encode(), [b"a"]]
    with pytest.raises(NotReplicated):
        await seam.fcall(f"{functions}_echo", [key], ["b"], Durability(replicas + 1, 50))
    assert await redis_client.lrange(key, 0, -1) == [b"a", b"b"]  # WAIT cannot undo the write


async def test_a_pipeline_answers_as_redis_py_s_own(seam: RedisTransport, redis_client: aioredis.Redis,
                                                    prefix: str) -> None:
    await redis_client.hset(f"{prefix}:h", mapping={"a": "1", "b": "2"})
    await redis_client.zadd(f"{prefix}:z", {"x": 1.5, "y": 2})
    await redis_client.sadd(f"{prefix}:s", "m")

    def queue(pipe: Any) -> None:
        pipe.hmget(f"{prefix}:h", ["a", "missing"])
        pipe.hgetall(f"{prefix}:h")
        pipe.zrange(f"{prefix}:z", 0, -1, withscores=True)
        pipe.zmscore(f"{prefix}:z", ["x", "nope"])
        pipe.smismember(f"{prefix}:s", ["m", "n"])
        pipe.exists(f"{prefix}:h")
        pipe.hincrby(f"{prefix}:h", "a", "not-a-number")  # an error reply, kept in place

    async with redis_client.pipeline(transaction=False) as plain:
        queue(plain)
        expected = await plain.execute(raise_on_error=False)
    async with seam.pipeline() as pipe:
        queue(pipe)
        got = await pipe.execute(raise_on_error=False)
    assert got[:-1] == expected[:-1]
    assert isinstance(got[-1], ResponseError)
    async with seam.pipeline() as pipe:
        queue(pipe)
        with pytest.raises(ResponseError):
            await pipe.execute()


async def test_a_blocking_pop_waits_for_a_push_and_takes_up_to_count(seam: RedisTransport,
                                                                      redis_client: aioredis.Redis,
                                                                      prefix: str) -> None:
    inbox = f"{prefix}:inbox"
    assert await seam.blocking_pop(inbox, 0.05, 10) == []
    await redis_client.rpush(inbox, "h1", "h2", "h3")
    assert await seam.blocking_pop(inbox, 1, 2) == [b"h1", b"h2"]
    assert await seam.blocking_pop(inbox, 1, 2) == [b"h3"]
    waiting = asyncio.create_task(seam.blocking_pop(inbox, 5, 10))
    await wait_until_async(lambda: _blocked(redis_client, inbox))
    await redis_client.rpush(inbox, "h4")
    assert await waiting == [b"h4"]


async def _blocked(redis_client: aioredis.Redis, inbox: str) -> bool:
    """Whether a client blocks on ``inbox`` (so a push now wakes it, not the next pop)."""
    if "Fake" in type(redis_client).__name__:
        return True  # no CLIENT LIST: the push may come first, and is popped all the same
    node = redis_client.get_node_from_key(inbox) if hasattr(redis_client, "get_node_from_key") else None
    clients = await (redis_client.client_list(target_nodes=node) if node else redis_client.client_list())
    return any(entry.get("cmd") == "blmpop" for entry in clients)


async def test_a_blocking_pop_never_waits_behind_calls_nor_they_behind_it(
        seam: RedisTransport, functions: str, prefix: str) -> None:
    waiting = asyncio.create_task(seam.blocking_pop(f"{prefix}:inbox", 5, 10))
    await asyncio.sleep(0)
    assert await asyncio.wait_for(seam.fcall(f"{functions}_echo", [f"{prefix}:list"], ["a"]), 2)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


@pytest.mark.parametrize("moment", ["as it is sent", "after a call meanwhile"])
async def test_a_blocking_pop_cancelled_as_it_starts_ends_at_once(seam: RedisTransport, functions: str, prefix: str,
                                                                  moment: str) -> None:
    # A process stopped as it starts, its inbox's pop just sent: the cluster client swallowed
    # that cancellation, and the pop ran on to its timeout. (fakeredis and redis-py's plain
    # client do too, as it is sent; the auto-pipelined transport, the single node's default,
    # does not: only the cluster and the auto-pipelined transport are held to it.)
    if isinstance(seam, PlainTransport) and moment == "as it is sent":
        pytest.skip("fakeredis and the plain client swallow a cancellation as the pop is sent")
    popping = asyncio.create_task(seam.blocking_pop(f"{prefix}:inbox", 5, 10))
    await asyncio.sleep(0)
    if moment == "after a call meanwhile":
        assert await seam.fcall(f"{functions}_echo", [f"{prefix}:list"], ["a"])
    popping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(popping, 2)


async def test_a_blocking_pop_in_a_task_asked_to_stop_does_not_wait(seam: RedisTransport, prefix: str) -> None:
    # redis-py's connect swallows a cancellation that comes while it says hello to a new
    # connection (seen: every in-process coordinator stopped within its first second waited
    # out the inbox's whole pop); the pop must not then hold the stopping loop for its timeout.
    async def pop_after_a_swallowed_cancellation() -> list[bytes]:
        with contextlib.suppress(asyncio.CancelledError):  # as the library did
            await asyncio.sleep(10)
        return await seam.blocking_pop(f"{prefix}:inbox", 5, 10)

    popping = asyncio.create_task(pop_after_a_swallowed_cancellation())
    await asyncio.sleep(0)
    popping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(popping, 2)


@pytest.mark.parametrize("single_node", [AutoPipelinedTransport, PlainTransport])
async def test_a_blocking_pop_whose_connection_is_killed_fails_and_the_next_one_works(
        prefix: str, single_node: type[PlainTransport]) -> None:
    """A Redis restart kills the popping connection: that pop fails (or redis-py retries it), and
    the next pop opens a connection again."""
    name = "seam-" + prefix[-16:-4]
    transport = single_node(aioredis.Redis.from_url(REAL_REDIS_URL, client_name=name))
    killer = aioredis.Redis.from_url(REAL_REDIS_URL)
    inbox = f"{prefix}:inbox"

    async def blocked_pop() -> str | None:
        for entry in await killer.client_list():
            if entry.get("name") == name and entry.get("cmd") == "blmpop":
                return entry["id"]
        return None

    try:
        pop = asyncio.create_task(transport.blocking_pop(inbox, 0.5, 10))
        await killer.client_kill_filter(_id=await wait_until_async(blocked_pop))
        with contextlib.suppress(RedisConnectionError):
            assert await pop == []
        await killer.rpush(inbox, "h3")
        assert await transport.blocking_pop(inbox, 1, 10) == [b"h3"]
    finally:
        await killer.delete(inbox)
        await killer.aclose()
        await transport.aclose()


@pytest.mark.parametrize("autopipeline", [True, False])
async def test_a_read_on_a_pooled_connection_closed_before_it_was_answered_is_sent_again_on_a_new_one(
        autopipeline: bool) -> None:
    prefix = unique_prefix()
    transport, _ = open_redis(make_settings(prefix, redis_url=REAL_REDIS_URL, autopipeline=autopipeline))
    client = transport.client
    name = "pooled-" + prefix[-16:-4]
    try:
        await client.set(f"{prefix}:k", "v")
        await client.client_setname(name)  # the pool's one connection, handed out again next
        close_unseen(name)
        assert await client.get(f"{prefix}:k") == b"v"
        assert await client.client_getname() is None  # a new connection
    finally:
        await client.delete(f"{prefix}:k")
        await transport.aclose()
        await client.connection_pool.aclose()  # the transport leaves open_redis's pool open


async def test_a_script_call_on_a_pooled_connection_closed_before_it_was_answered_is_not_sent_again() -> None:
    """Nothing tells its caller that the call never reached Redis: it fails, and the next works."""
    prefix = unique_prefix()
    transport, _ = open_redis(make_settings(prefix, redis_url=REAL_REDIS_URL, autopipeline=False))
    client = transport.client
    library = "seam_" + uuid.uuid4().hex[:12]
    name = "pooled-" + prefix[-16:-4]
    key = f"{prefix}:list"
    try:
        await Library(library, _LIBRARY.format(name=library)).load(client)
        await client.client_setname(name)
        close_unseen(name)
        with pytest.raises(RedisConnectionError):
            await transport.fcall(f"{library}_echo", [key], ["a"])
        assert await transport.fcall(f"{library}_echo", [key], ["b"]) == [key.encode(), [b"b"]]
    finally:
        await client.delete(key)
        await client.function_delete(library)
        await transport.aclose()
        await client.connection_pool.aclose()


@pytest.mark.parametrize("autopipeline", [True, False])
async def test_the_transport_is_chosen_once_by_the_url_and_the_setting(autopipeline: bool) -> None:
    embedded, described = open_redis(make_settings(unique_prefix(), redis_url=None))
    assert isinstance(embedded, PlainTransport) and "embedded" in described
    single, _ = open_redis(make_settings(unique_prefix(), redis_url=REAL_REDIS_URL, autopipeline=autopipeline))
    assert type(single) is (AutoPipelinedTransport if autopipeline else PlainTransport)
    for transport in (embedded, single):
        await transport.aclose()


class _OneNodeCluster:
    """Just what a durable call asks of a cluster client, with its master's connection closed."""

    def __init__(self) -> None:
        self.connection = ClosedConnection()
        self.released = False
        self.relearned = False
        self.nodes_manager = self

    async def permitted(self, call: Any) -> Any:
        return await call()

    def get_node_from_key(self, key: str) -> _OneNodeCluster:
        return self

    def acquire_connection(self) -> ClosedConnection:
        return self.connection

    def release(self, connection: ClosedConnection) -> None:
        self.released = True

    async def initialize(self) -> None:
        self.relearned = True


async def test_a_durable_cluster_write_refused_on_a_closed_connection_is_a_lost_node() -> None:
    """Answered 503 like any lost connection, and the slot map is learned again."""
    cluster = _OneNodeCluster()
    with pytest.raises(RedisConnectionError):
        await ClusterTransport(cluster).fcall("f", ["k"], [], Durability(1, 100))
    assert cluster.connection.disconnected and cluster.released and cluster.relearned
