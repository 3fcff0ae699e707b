"""Auto-pipelining, as ioredis has it: the script calls that requests issue in the same turn of
the event loop go to Redis in one write on one connection, and their replies are read back in
order. Under load, many requests are parsed in one turn, so one round trip (one write, one read,
one pool checkout) serves several of them; alone, a call costs one loop turn more than a direct
one. Redis answers a pipeline's commands in order and runs each script atomically, so nothing
about atomicity or ordering changes.

Only for a single Redis node reached through redis-py's own connections; the cluster client and
the embedded fakeredis keep the plain path.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import (
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ResponseError

# The most commands one write carries: bounds the write's size and how long the last of them
# waits behind the others.
MAX_BATCH = 64


def can_autopipeline(redis: Any) -> bool:
    """Whether ``redis`` is a single-node redis-py client on real sockets."""
    pool = getattr(redis, "connection_pool", None)
    return (type(redis) is Redis and pool is not None
            and pool.connection_class in (Connection, SSLConnection, UnixDomainSocketConnection))


class AutoPipeline:
    def __init__(self, redis: Redis) -> None:
        self._pool = redis.connection_pool
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._scheduled = False
        self._batches: set[asyncio.Task[None]] = set()

    def execute(self, *command: Any) -> asyncio.Future[Any]:
        """Queue ``command`` for this turn's write; the future holds its reply (or error)."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        self._pending.append((command, reply))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return reply

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MAX_BATCH):
            task = asyncio.ensure_future(self._send(pending[start:start + MAX_BATCH]))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            connection = await self._pool.get_connection()
        except BaseException as exc:  # noqa: BLE001 - every caller gets the pool's error
            _fail(batch, exc)
            return
        try:
            await connection.send_packed_command(connection.pack_commands([c for c, _ in batch]))
            for _, reply in batch:
                try:
                    value = await connection.read_response()
                except ResponseError as exc:  # that command's error; the connection stays in step
                    if not reply.done():
                        reply.set_exception(exc)
                    continue
                if not reply.done():
                    reply.set_result(value)
        except BaseException as exc:
            # Lost connection, timeout or cancellation mid-batch: the replies still due cannot
            # be matched any more, so the connection is dropped and every waiting caller fails.
            await connection.disconnect()
            _fail(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            await self._pool.release(connection)


def _fail(batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]], exc: BaseException) -> None:
    for _, reply in batch:
        if reply.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            reply.cancel()
        else:
            reply.set_exception(exc)
