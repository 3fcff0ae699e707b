"""The transport for a Redis Cluster (``base.py``): redis-py's cluster client with its
calls bounded by permits, script calls sent to the node holding their keys, and a durable call's
``WAIT`` on the same connection of that node's master."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.cancellation import cancelling
from coordinator.transport.base import NO_WAIT, Durability, acknowledged, popped_values

# Set while a call holds a permit: redis-py retries a pipeline's redirected commands through the
# client itself, and that nested call must not wait for a second permit (all may be taken).
_holding_permit: ContextVar[bool] = ContextVar("holding_permit", default=False)

T = TypeVar("T")

# Connections per node kept for readers that block outside the permits: the wake-up inbox's.
# (The feed's reader takes a permit for each read, like any call.)
DEDICATED_READERS = 1


class BoundedRedisCluster(RedisCluster):
    """A cluster client whose callers wait for a permit, as they wait for a connection of the
    single-node BlockingConnectionPool. redis-py's cluster client opens up to ``max_connections``
    per node and then raises MaxConnectionsError at once; since a deployment's keys all live on
    one node, bounding the calls in flight bounds the connections per node without ever failing
    a burst. The inbox's blocking pop runs outside the permits, on a connection kept for it."""

    def __init__(self, *, max_connections: int, **kwargs: Any) -> None:  # as from_url calls it
        super().__init__(max_connections=max_connections, **kwargs)
        self.permits = asyncio.Semaphore(max(max_connections - DEDICATED_READERS, 1))

    async def permitted(self, call: Callable[[], Awaitable[T]]) -> T:
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

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # raises, as redis-py does
        return _BoundedPipeline(self, transaction)  # type: ignore[abstract]  # redis-py's types miss its _event_dispatcher


class _BoundedPipeline(ClusterPipeline):
    """A pipeline holds one permit while it runs: one connection per node it touches."""

    def __init__(self, client: BoundedRedisCluster, transaction: Any | None) -> None:
        super().__init__(client, transaction=transaction)
        self._bounded = client

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        return await self._bounded.permitted(
            lambda: super(_BoundedPipeline, self).execute(raise_on_error, allow_redirections))


async def given_up_on_cancel(call: Awaitable[T]) -> T:
    """``call`` in a task of its own, awaited without being it: redis-py's cluster client swallows
    a cancellation that comes as it sends (a process stopped as it starts), and would hold the
    stopping caller for the call's whole timeout. A call given up on ends by itself (``aclose``
    drops its connection), and its end is nobody's. The task starts in the caller's context."""
    task = asyncio.ensure_future(call)
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_ended_unheard)
        raise
    return task.result()


def _ended_unheard(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: not logged as never retrieved


class ClusterTransport:
    """A deployment on a Redis Cluster: every key shares one hash tag, so one node holds them all."""

    def __init__(self, client: BoundedRedisCluster) -> None:
        self.client = client

    async def fcall(self, function: str, keys: Sequence[Any], args: Sequence[Any],
                    durability: Durability = NO_WAIT) -> Any:
        command = ("FCALL", function, len(keys), *keys, *args)
        if durability.replicas:
            reply, acked = await self.client.permitted(
                lambda: self._on_slot_master(keys[0], command, ("WAIT", durability.replicas, durability.timeout_ms)))
            return acknowledged(reply, acked, durability)
        # Sent to the node holding the keys (redis-py would ask a node for FCALL's keys first:
        # COMMAND GETKEYS, a round trip before every call). redis-py follows MOVED and ASK for
        # a named node too, but retries nothing else: a lost node or a cluster that is down is
        # retried here as redis-py retries them (the same errors, as many times), once the map
        # is learned again.
        attempts = 1 + self.client.retry.get_retries()
        for attempt in range(attempts):
            try:
                return await self.client.execute_command(
                    *command, target_nodes=self.client.get_node_from_key(keys[0]))
            except Exception as exc:
                if type(exc) not in self.client.ERRORS_ALLOW_RETRY or attempt + 1 == attempts:
                    raise
                await self._relearn()
        raise AssertionError("unreachable")

    async def _relearn(self) -> None:
        # If the cluster cannot tell yet, the next call asks again.
        with contextlib.suppress(Exception):
            await self.client.nodes_manager.initialize()

    async def _on_slot_master(self, key: Any, command: tuple[Any, ...], wait: tuple[Any, ...]) -> tuple[Any, Any]:
        """``command`` then ``wait`` on one connection of the master holding ``key``'s slot. (A
        cluster pipeline would route the keyless WAIT to another node, or to any node when it
        retries, and so acknowledge writes WAIT never covered.)"""
        node = self.client.get_node_from_key(key)
        assert node is not None  # None answers only a lookup of a replica
        connection = node.acquire_connection()
        try:
            try:
                await connection.send_packed_command(connection.pack_commands([command, wait]))
            except RuntimeError as exc:  # uvloop, on a transport the peer already closed
                raise RedisConnectionError("the connection to Redis is closed") from exc
            try:
                reply = await connection.read_response()
            except ResponseError as exc:
                await connection.read_response()  # WAIT's answer is still due on this connection
                if isinstance(exc, MovedError):  # the slot moved: handled as a lost node below
                    raise RedisConnectionError("the deployment's slot moved") from None
                raise
            try:
                return reply, await connection.read_response()
            except ResponseError as exc:
                # The node became a replica after it ran the call (a failover, its old master
                # back): nothing vouches for the change, and the slot lives elsewhere now.
                if "replica" in str(exc):
                    raise RedisConnectionError("the deployment's slot moved") from None
                raise
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await connection.disconnect()
            await self._relearn()  # the slot may have moved (a failover)
            raise
        finally:
            node.release(connection)

    def pipeline(self) -> Any:
        return self.client.pipeline()

    async def blocking_pop(self, key: str, timeout: float, count: int) -> list[bytes]:
        if cancelling():  # swallowed by a call before: do not block for nothing
            raise asyncio.CancelledError
        token = _holding_permit.set(True)  # outside the permits, on the connection kept for it
        try:
            popped = await given_up_on_cancel(self.client.blmpop(timeout, 1, key, direction="LEFT", count=count))
        finally:
            _holding_permit.reset(token)
        return popped_values(popped)

    async def aclose(self) -> None:
        await self.client.aclose()
