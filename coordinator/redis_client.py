"""Opening Redis: a real server from REDIS_URL (a single node, or any node of a Redis Cluster,
found out by asking it), or an embedded in-memory one (fakeredis + Lua)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection

from coordinator.autopipeline import can_autopipeline, encode_command, send_packed
from coordinator.settings import Settings

# What the store, the queries and the loops talk to: both expose the same commands, and every key
# of a deployment shares one hash tag, so on a cluster each call goes to the one node holding it.
RedisClient: TypeAlias = "Redis | RedisCluster"

# Socket timeouts: above the longest blocking call we make (the inbox's BLMPOP and the feed's
# XREAD wait 1 s; WAIT at most 5 s), so a quiet blocking read never looks like a dead connection.
SOCKET_TIMEOUT_S = 10
CONNECT_TIMEOUT_S = 5


def describe_url(url: str) -> str:
    """The URL without credentials, fit for a log line: user and password are masked, and the
    query (which may carry ``password=``) is dropped."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    if parts.password is not None or parts.username is not None:
        host = "***@" + host
    return f"{parts.scheme}://{host}{parts.path}"


def tls_options(url: str, settings: Settings) -> dict[str, Any]:
    if url.startswith("rediss://") and settings.redis_tls_insecure:
        return {"ssl_cert_reqs": "none", "ssl_check_hostname": False}
    return {}


def cluster_enabled(url: str, tls: dict[str, Any]) -> bool:
    """Whether the node at ``url`` runs in cluster mode (``INFO cluster``, answered by every
    Redis; ``CLUSTER INFO`` is an error on a single node). Raises what redis-py raises when the
    node cannot be asked (down, wrong password)."""
    client = redis.Redis.from_url(url, socket_timeout=CONNECT_TIMEOUT_S,
                                  socket_connect_timeout=CONNECT_TIMEOUT_S, **tls)
    try:
        return client.info("cluster").get("cluster_enabled") == 1
    finally:
        client.close()


def is_cluster(url: str, tls: dict[str, Any]) -> bool:
    """``cluster_enabled``, asked once per process at start. A node that cannot be asked counts
    as a single node: the start-up's first command then fails with the real reason."""
    try:
        return cluster_enabled(url, tls)
    except (redis.RedisError, OSError):
        return False


# Set while a call holds a permit: redis-py retries a pipeline's redirected commands through the
# client itself, and that nested call must not wait for a second permit (all may be taken).
_holding_permit: ContextVar[bool] = ContextVar("holding_permit", default=False)


# Connections per node kept for readers that block outside the permits: the wake-up inbox's.
# (The feed's reader takes a permit for each read, like any call.)
DEDICATED_READERS = 1


class BoundedRedisCluster(RedisCluster):
    """A cluster client whose callers wait for a permit, as they wait for a connection of the
    single-node BlockingConnectionPool. redis-py's cluster client opens up to ``max_connections``
    per node and then raises MaxConnectionsError at once; since a deployment's keys all live on
    one node, bounding the calls in flight bounds the connections per node without ever failing
    a burst. The inbox's blocking reader runs outside the permits (``dedicated``), on a
    connection kept for it."""

    def __init__(self, *args: Any, max_connections: int, **kwargs: Any) -> None:
        super().__init__(*args, max_connections=max_connections, **kwargs)
        self.permits = asyncio.Semaphore(max(max_connections - DEDICATED_READERS, 1))

    async def permitted(self, call: Callable[[], Awaitable[Any]]) -> Any:
        if _holding_permit.get():
            return await call()
        async with self.permits:
            token = _holding_permit.set(True)
            try:
                return await call()
            finally:
                _holding_permit.reset(token)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return await self.permitted(lambda: super(BoundedRedisCluster, self).execute_command(*args, **kwargs))

    async def _determine_slot(self, command: str, *args: Any) -> int:
        # redis-py finds an FCALL's keys by asking the server (COMMAND GETKEYS), a round trip
        # before every call; it reads EVALSHA's itself. FCALL's are where EVALSHA's are.
        if command.upper() == "FCALL" and len(args) > 2 and int(args[1]) > 0:
            return self.keyslot(args[2])
        return await super()._determine_slot(command, *args)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # raises, as redis-py does
        return _BoundedPipeline(self, transaction)


class _BoundedPipeline(ClusterPipeline):
    """A pipeline holds one permit while it runs: one connection per node it touches."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        client = self.cluster_client
        assert isinstance(client, BoundedRedisCluster)
        return await client.permitted(lambda: super(_BoundedPipeline, self).execute(raise_on_error, allow_redirections))


class HeldConnection:
    """One connection of a single node's pool, held by the wake-up reader, with its blocking pop
    written and read on it directly. redis-py's command path (the lock of a single-connection
    client, retries, metrics hooks, response callbacks) ran between a wake-up's arrival and the
    poll it wakes: 0.05 ms of every idle dispatch (``bench.compare``). A failed or cancelled read
    drops the connection, since its reply may still come; the next pop opens it again."""

    def __init__(self, connection: AbstractConnection) -> None:
        self._connection = connection

    async def blmpop(self, timeout: float, numkeys: int, *keys: str, direction: str,
                     count: int | None = None) -> Any:
        """As redis-py's ``blmpop``: None when ``timeout`` passes with nothing to pop, else the
        key and the values popped."""
        command = ("BLMPOP", timeout, numkeys, *keys, direction, *(("COUNT", count) if count else ()))
        await send_packed(self._connection, encode_command(command))
        # The socket timeout, above any blocking timeout we use, bounds the read.
        return await self._connection.read_response()


@contextlib.asynccontextmanager
async def dedicated(redis: RedisClient) -> AsyncIterator[RedisClient | HeldConnection]:
    """A client for the process's wake-up reader, so that it never queues behind requests for a
    connection between two blocking pops (a wake-up would wait for it): on a single node, one
    connection of the pool held for the reader's life (``HeldConnection`` on redis-py's own
    sockets); on a cluster, calls outside the permits, on the connection kept for it."""
    if can_autopipeline(redis):
        pool = redis.connection_pool
        connection = await pool.get_connection()
        try:
            yield HeldConnection(connection)
        finally:
            await pool.release(connection)
    elif isinstance(redis, BoundedRedisCluster):
        token = _holding_permit.set(True)
        try:
            yield redis
        finally:
            _holding_permit.reset(token)
    elif hasattr(redis, "client"):  # redis-py's client (fakeredis's too)
        async with redis.client() as connection:
            yield connection
    else:
        yield redis


def open_redis(settings: Settings) -> tuple[RedisClient, str]:
    """A client and a description for the first log line."""
    if settings.redis_url is None:
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()), "embedded in-memory Redis (fakeredis)"
    url = settings.redis_url.get_secret_value()
    tls = tls_options(url, settings)
    if is_cluster(url, tls):
        return open_cluster(url, settings.redis_max_connections, tls), "Redis Cluster via " + describe_url(url)
    # A fixed, small pool: long-polls never hold a connection while they wait, and a burst of
    # requests queues for a connection instead of failing as the default pool would.
    pool = BlockingConnectionPool.from_url(
        url, max_connections=settings.redis_max_connections, timeout=10, socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S, health_check_interval=15, **tls,
    )
    return Redis(connection_pool=pool), describe_url(url)


def open_cluster(url: str, max_connections: int, tls: dict[str, Any] | None = None) -> BoundedRedisCluster:
    """The cluster client, from any node's URL: it learns the slot map from that node, follows
    MOVED and failovers by itself, and holds at most ``max_connections`` per node."""
    return BoundedRedisCluster.from_url(
        url, max_connections=max_connections, socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S, **(tls or {}),
    )
