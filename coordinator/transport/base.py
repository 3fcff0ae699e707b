"""The one way the coordinator reaches Redis, like httpx's transports: a script call (``fcall``,
acknowledged after ``WAIT`` when the deployment asks for replicas), a non-transactional pipeline
of reads, a blocking pop for the wake-up inbox, and redis-py's client for every other command.

``open_redis`` (``open.py``) chooses the implementation once, at start:

- ``PlainTransport``: redis-py as it is. The embedded Redis (fakeredis), and a single node with
  ``COORDINATOR_AUTOPIPELINE=false``.
- ``AutoPipelinedTransport``: a single node, with the script calls and reads of one turn of the
  event loop sharing one write (``autopipeline.py``).
- ``ClusterTransport`` (``redis_cluster.py``): a Redis Cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from coordinator.cancellation import cancelling
from coordinator.errors import Unavailable
from coordinator.transport.autopipeline import AutoPipeline, AutoPipelined
from coordinator.transport.resp import encode_command, send_packed


@dataclass(frozen=True)
class Durability:
    """How many replicas must confirm a script's writes before it is acknowledged (0: as soon as
    the master ran it, Redis's own default), and how long WAIT may take (ms)."""

    replicas: int = 0
    timeout_ms: int = 1000


# Acknowledge once the master ran it: Redis's own default.
NO_WAIT = Durability()


class NotReplicated(Unavailable):
    """The change ran on the master but too few replicas confirmed it in time: a failover now
    could lose it, so it is not acknowledged. The client retries (every write is idempotent by
    its ids: claim id, idempotency key, result replay)."""


def acknowledged(reply: Any, acked: Any, durability: Durability) -> Any:
    """``reply``, once WAIT's answer ``acked`` covers the replicas ``durability`` asks for."""
    if int(acked) < durability.replicas:
        raise NotReplicated(f"the change reached {acked} of {durability.replicas} Redis replicas in time; retry")
    return reply


class RedisTransport(Protocol):
    """What the coordinator asks of Redis. ``client`` is redis-py's (or fakeredis's) client,
    for every command that is neither a script call, a pipeline nor the inbox's pop."""

    client: Any

    async def fcall(self, function: str, keys: Sequence[Any], args: Sequence[Any],
                    durability: Durability = NO_WAIT) -> Any:
        """FCALL ``function``; with replicas, acknowledged once WAIT says they have its writes."""

    def pipeline(self) -> Any:
        """A non-transactional pipeline, as redis-py's (``async with``, commands, ``execute``)."""

    async def blocking_pop(self, key: str, timeout: float, count: int) -> list[bytes]:
        """Up to ``count`` values from the head of the list ``key``, waiting up to ``timeout`` s
        for one (``[]`` when none came); on a connection of its own, so that it never queues
        behind requests, nor they behind it."""

    async def aclose(self) -> None:
        """Close every connection."""


def popped_values(reply: object) -> list[bytes]:
    """BLMPOP's values: its reply is nil or ``[key, [value, ...]]`` (redis-py types it as a list
    of anything)."""
    return [] if reply is None else cast(list[bytes], cast(list[Any], reply)[1])


T = TypeVar("T")


# Set while a call that must not be sent twice (a script call, the inbox's pop) goes through
# redis-py's own command path: the pool's retry (``OnceMore``) leaves its failure to its caller.
_sent_once: ContextVar[bool] = ContextVar("sent_once", default=False)


@contextmanager
def _once() -> Iterator[None]:
    token = _sent_once.set(True)
    try:
        yield
    finally:
        _sent_once.reset(token)


class OnceMore(Retry):
    """The retry of a single node's pool (redis-py's, which sends a command again on the same
    connection object, opened afresh): a command whose connection is lost before its answer
    came is sent once more at once, unless it is a script call or a pop.

    What goes again is only ever a read, ``SET NX`` (the epoch) or ``FUNCTION LOAD REPLACE``:
    every change the service makes is a script call, and the transports send those under
    ``_once``. A script is not sent twice because nothing tells a connection the server closed
    before the write (it never delivered the call) from a Redis that ran the script and died
    before answering, and not every script is harmless run twice with the same arguments
    (createTask without an idempotency key would store and place one task id twice): its
    request answers 503, which clients retry as a whole. A connection the server closed while
    it sat in the pool is not one of these: the pool's check replaces it before it is used
    (``open.py``). A connect that fails, the pool's own timeout and Redis's error replies
    (``LOADING``: a subclass of ConnectionError) are not retried either."""

    def __init__(self) -> None:
        super().__init__(NoBackoff(), 1, (RedisConnectionError,))

    async def call_with_retry(self, do: Callable[[], Awaitable[T]],
                              fail: Callable[[Exception], Any] | Callable[[Exception, int], Any],
                              is_retryable: Callable[[Exception], bool] | None = None,
                              with_failure_count: bool = False) -> T:
        return await super().call_with_retry(do, fail, _lost_connection, with_failure_count)


def _lost_connection(exc: Exception) -> bool:
    return type(exc) is RedisConnectionError and not _sent_once.get()


class PlainTransport:
    """redis-py's client as it is: a single node or the embedded fakeredis."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._popper: Redis | None = None  # a client holding one connection, for blocking_pop

    async def fcall(self, function: str, keys: Sequence[Any], args: Sequence[Any],
                    durability: Durability = NO_WAIT) -> Any:
        if not durability.replicas:
            with _once():
                return await self.client.fcall(function, len(keys), *keys, *args)
        # WAIT covers the writes of its own connection: one pipeline, one connection.
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.execute_command("FCALL", function, len(keys), *keys, *args)
            pipe.execute_command("WAIT", durability.replicas, durability.timeout_ms)
            with _once():
                reply, acked = await pipe.execute(raise_on_error=False)
        for answer in (reply, acked):
            if isinstance(answer, Exception):
                raise answer
        return acknowledged(reply, acked, durability)

    def pipeline(self) -> Any:
        return self.client.pipeline(transaction=False)

    async def blocking_pop(self, key: str, timeout: float, count: int) -> list[bytes]:
        if cancelling():  # swallowed by a call before: do not block for nothing
            raise asyncio.CancelledError
        if self._popper is None:
            # redis-py's single-connection client: one connection of the pool, held until closed.
            self._popper = self.client.client()
        with _once():  # a pop whose answer was lost took wake-ups with it: its loop must hear of it
            return popped_values(await self._popper.blmpop(timeout, 1, key, direction="LEFT", count=count))

    async def aclose(self) -> None:
        popper, self._popper = self._popper, None
        if popper is not None:
            await popper.aclose()
        await self.client.aclose()


class AutoPipelinedTransport(PlainTransport):
    """A single node whose script calls and pipelines of one event-loop turn share a write, and
    whose blocking pop is written and read directly on a connection of the pool it holds (both
    write on redis-py's connections, which ``COORDINATOR_AUTOPIPELINE=false`` turns off)."""

    def __init__(self, client: Redis) -> None:
        super().__init__(client)
        self._auto = AutoPipeline(client)
        self._held: AbstractConnection | None = None

    async def fcall(self, function: str, keys: Sequence[Any], args: Sequence[Any],
                    durability: Durability = NO_WAIT) -> Any:
        if durability.replicas:  # FCALL and WAIT must share a connection: a pipeline of their own
            return await super().fcall(function, keys, args, durability)
        return await self._auto.execute_encoded(encode_command(("FCALL", function, len(keys), *keys, *args)))

    def pipeline(self) -> Any:
        return AutoPipelined(self.client, self._auto)

    async def blocking_pop(self, key: str, timeout: float, count: int) -> list[bytes]:
        # Not through redis-py's command path (the single-connection client's lock, retries,
        # hooks, callbacks), which ran between a wake-up's arrival and the poll it wakes. A
        # failed or cancelled read drops the connection (its reply may still come); the next
        # pop opens it again. One pop at a time: the process has one inbox reader.
        if self._held is None:
            self._held = await self.client.connection_pool.get_connection()
        # redis-py's connect swallows a cancellation that comes while it says hello: the pop
        # would then hold its loop, and the process's shutdown, for the whole timeout.
        if cancelling():
            raise asyncio.CancelledError
        await send_packed(self._held, encode_command(("BLMPOP", timeout, 1, key, "LEFT", "COUNT", count)))
        return popped_values(await self._held.read_response())  # bounded by the socket timeout

    async def aclose(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            await self.client.connection_pool.release(held)
        await super().aclose()
