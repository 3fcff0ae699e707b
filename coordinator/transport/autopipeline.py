"""Auto-pipelining, as ioredis has it: the script calls and reads that requests issue in the same
turn of the event loop go to Redis in one write on one connection, and their replies are read back in
order. Under load, many requests are parsed in one turn, so one round trip (one write, one read,
one pool checkout) serves several of them. Redis answers a pipeline's commands in order and runs
each script atomically, so nothing about atomicity or ordering changes.

When nothing is in flight (an idle process), the first command of a turn is written at once, on a
kept connection, and the rest of that turn's commands follow it on the same connection a turn
later: a lone call does not wait a turn for company that rarely comes.

A connection lost before any reply of a batch, when it had been open before the batch (the server
may have closed it without this process having read that yet), is opened again and the batch's
reads are sent once more on it; its script calls fail (see ``_again``).

Only for a single Redis node reached through redis-py's own connections (``base.py``
chooses it, unless ``COORDINATOR_AUTOPIPELINE=false``); the cluster client and the embedded
fakeredis keep the plain path. Never for a blocking command (BLMPOP, XREAD BLOCK): every command
behind it in the write would wait with it.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.transport.resp import encode_command, send_packed, stream_writer, write

# One call: its command in RESP, the future of its reply, and whether it may be sent twice (a read).
_Call = tuple[bytes, "asyncio.Future[Any]", bool]

# The most commands one write carries: bounds the write's size and how long the last of them
# waits behind the others. Redis answers a write only after running every command it read from
# it, so a turn's commands go as several small writes: Redis's first answers leave while it runs
# the rest, and this process works on them meanwhile, instead of both idling in turn behind one
# long write of scripts (docs/benchmarks.md, row 2w create).
MAX_BATCH = 16
# Connections the auto-pipeline keeps between its batches instead of giving them back to the pool:
# a checkout from redis-py's pool and its return (a lock, a readiness check that polls the socket,
# metrics hooks) cost more than Redis spends on a script, and an idle process pays them on every
# request. They stay counted against the pool's bound; batches beyond them check
# connections out of the pool as before.
KEPT_CONNECTIONS = 2


def _writable_now(connection: AbstractConnection, now: float) -> asyncio.StreamWriter | None:
    """The writer of a kept connection that can take a write with no check first: open, not
    closed by the server, and not due a health check. Else None (the usual path checks it)."""
    writer = stream_writer(connection)
    reader: asyncio.StreamReader | None = getattr(connection, "_reader", None)
    if writer is None or reader is None or not connection.is_connected:
        return None
    if writer.transport.is_closing() or reader.at_eof():
        return None
    if connection.health_check_interval and now > connection.next_health_check:
        return None
    return writer


@dataclass(frozen=True)
class _Early:
    """A turn's first command, written at once on ``connection`` (or refused with ``error``)."""

    connection: AbstractConnection
    error: BaseException | None


class AutoPipeline:
    def __init__(self, redis: Redis) -> None:
        self._pool = redis.connection_pool
        self._pending: list[_Call] = []
        self._scheduled = False
        self._batches: set[asyncio.Task[None]] = set()
        self._kept: list[AbstractConnection] = []  # idle, checked out of the pool, in step

    def execute(self, *command: Any, replayable: bool = False) -> asyncio.Future[Any]:
        """Queue ``command`` for this turn's write; the future holds its reply (or error).
        ``replayable``: the command changes nothing (a read), so it may be sent a second time
        when its connection is lost before it was answered."""
        return self.execute_encoded(encode_command(command), replayable)

    def execute_encoded(self, command: bytes, replayable: bool = False) -> asyncio.Future[Any]:
        """``execute`` for a command already in RESP (``encode_command``)."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        self._pending.append((command, reply, replayable))
        if not self._scheduled:
            # The first command of the turn. A task, not a callback that would start one: its
            # first step runs in the next turn, after every command of this turn, and writes
            # them (those the early write below has not).
            self._scheduled = True
            early = None if self._batches else self._write_early(command, loop.time())
            self._track(loop.create_task(self._send_pending(early)))
        return reply

    def _write_early(self, command: bytes, now: float) -> _Early | None:
        """Nothing in flight: ``command`` written now on a kept connection, if one can take it."""
        if not self._kept:
            return None
        writer = _writable_now(self._kept[-1], now)
        if writer is None:
            return None
        connection = self._kept.pop()
        try:
            writer.write(command)
        except (OSError, RuntimeError) as exc:  # as in resp.write; the batch's task fails it
            return _Early(connection, exc)
        return _Early(connection, None)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _send_pending(self, early: _Early | None) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        for start in range(MAX_BATCH, len(pending), MAX_BATCH):  # beyond one batch: in parallel
            self._track(asyncio.ensure_future(self._send(pending[start:start + MAX_BATCH])))
        await self._send(pending[:MAX_BATCH], early)

    async def _connection(self) -> AbstractConnection:
        if not self._kept:
            opened: AbstractConnection = await self._pool.get_connection()
            return opened
        connection = self._kept.pop()
        # As the pool checks one: a connection the server closed while it sat here (a restart)
        # is dropped, and the next write opens it again.
        if connection.is_connected and await connection.can_read():
            await connection.disconnect()
        return connection

    async def _send(self, batch: list[_Call], early: _Early | None = None) -> None:
        """Write ``batch`` (its first command already, when ``early`` wrote it) and hand each
        caller its reply."""
        if early is None:
            try:
                connection = await self._connection()
            except BaseException as exc:  # noqa: BLE001 - every caller gets the pool's error
                _fail(batch, exc)
                return
        else:
            connection = early.connection
        # Open before this batch, so possibly closed by the server meanwhile (a kept connection
        # found closed is not: _connection dropped it, and it opens afresh for this batch).
        reused = early is not None or connection.is_connected
        in_step = False
        try:
            try:
                await _exchange(connection, batch, early)
            except RedisConnectionError as exc:
                again = _again(batch, exc) if reused else []
                if not again:
                    raise
                await connection.disconnect()
                await _exchange(connection, again, None)  # the write opens it again
            in_step = True
        except BaseException as exc:
            # Lost connection, timeout or cancellation mid-batch: the replies still due cannot
            # be matched any more, so the connection is dropped and every waiting caller fails.
            await connection.disconnect()
            _fail(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            # Every reply read: the connection is ready for the next batch as it is. Otherwise
            # the pool reconnects it when it is next checked out.
            if in_step and len(self._kept) < KEPT_CONNECTIONS:
                self._kept.append(connection)
            else:
                await self._pool.release(connection)


async def _exchange(connection: AbstractConnection, batch: list[_Call], early: _Early | None) -> None:
    """Write ``batch`` on ``connection`` (after the first command, when ``early`` wrote that) and
    set each call's reply as it is read; raises on a lost connection or a timeout."""
    if early is None:
        await send_packed(connection, b"".join(c for c, _, _ in batch))
    elif early.error is not None:
        raise RedisConnectionError("the connection to Redis is closed") from early.error
    elif len(batch) > 1:  # behind the early write, on its connection: no health check
        writer = stream_writer(connection)
        if writer is None:  # dropped meanwhile
            raise RedisConnectionError("the connection to Redis is closed")
        await write(connection, writer, b"".join(c for c, _, _ in batch[1:]))
    try:
        # One deadline for the whole batch's replies: redis-py's own read arms and cancels a
        # timer of the socket timeout for every reply.
        async with asyncio.timeout(connection.socket_timeout):
            for _, reply, _ in batch:
                try:
                    value = await connection.read_response(timeout=math.inf)
                except ResponseError as exc:  # that command's error; the connection stays in step
                    if not reply.done():
                        reply.set_exception(exc)
                    continue
                if not reply.done():
                    reply.set_result(value)
    except TimeoutError:
        raise RedisTimeoutError("Timeout reading from Redis") from None


def _again(batch: list[_Call], exc: RedisConnectionError) -> list[_Call]:
    """The calls of ``batch`` to send once more, on a new connection, after its connection was
    lost (``exc``) with nothing answered yet; the others fail with ``exc`` now.

    Only reads go again. A connection the server had already closed when the batch was written
    (a restarted Redis, an idle timeout, a NAT that forgot it) never delivered the batch, and a
    second send is safe whatever it holds; but nothing tells that case apart from a Redis that
    read the batch, ran it and died before answering, and a script run twice with the same
    arguments is not always harmless: createTask without an idempotency key would store and
    place the same task id twice. A script call fails instead, and its request is answered 503,
    which the contract tells clients to retry as a whole (an agent's by its ids, so a retry is
    answered as the first was). A connection whose close the event loop has already read never
    gets this far: it is replaced before anything is written on it (``_connection``,
    ``_writable_now``, the pool's own check), which is what a Redis restart leaves behind."""
    if type(exc) is not RedisConnectionError or batch[0][1].done():
        return []  # a reply of Redis (LOADING...), or the first call answered (or given up)
    again = [call for call in batch if call[2] and not call[1].done()]
    if again:
        _fail([call for call in batch if not call[2]], exc)
    return again


def _fail(batch: list[_Call], exc: BaseException) -> None:
    for _, reply, _ in batch:
        if reply.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            reply.cancel()
        else:
            reply.set_exception(exc)


class AutoPipelined(Pipeline):
    """A redis-py pipeline (the same calls, the same parsed replies) whose commands go out through
    the process's AutoPipeline: with whatever scripts and reads the other requests issue in the
    same turn, instead of on a connection of its own."""

    def __init__(self, redis: Redis, auto: AutoPipeline) -> None:
        super().__init__(redis.connection_pool, redis.response_callbacks, False, None)
        self._auto = auto

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = list(self.command_stack)
        await self.reset()  # type: ignore[no-untyped-call]  # redis-py's Pipeline.reset has no annotations
        # Reads only (``RedisTransport.pipeline``): each may go twice after a lost connection.
        replies = await asyncio.gather(*(self._auto.execute(*args, replayable=True) for args, _ in stack),
                                       return_exceptions=True)
        parsed: list[Any] = []
        for (args, options), reply in zip(stack, replies, strict=True):
            if isinstance(reply, BaseException):
                if not isinstance(reply, ResponseError):  # lost connection, cancellation...
                    raise reply
                if EMPTY_RESPONSE in options:
                    parsed.append(options[EMPTY_RESPONSE])
                    continue
                if raise_on_error:
                    raise reply
                parsed.append(reply)
                continue
            options = {k: v for k, v in options.items() if k not in (EMPTY_RESPONSE, NEVER_DECODE, "keys")}
            callback = self.response_callbacks.get(args[0])
            parsed.append(callback(reply, **options) if callback is not None else reply)
        return parsed
