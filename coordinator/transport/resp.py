"""Commands in RESP, Redis's wire format, and the raw write of them on one of redis-py's open
connections: what the auto-pipeline (``autopipeline.py``) sends."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError


def encode_args(args: Any) -> bytes:
    """The RESP bulk strings of ``args`` (no array header), encoded as redis-py encodes them:
    bytes as they are, text as UTF-8, numbers by their repr; anything else is refused as
    redis-py refuses it. The exact types are tested first: they are nearly every argument."""
    out = []
    for arg in args:
        kind = type(arg)
        if kind is str:
            data = arg.encode()
        elif kind is bytes:
            data = arg
        elif kind is int:
            data = b"%d" % arg
        elif kind is float:
            data = repr(arg).encode()
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
            data = repr(arg).encode()
        elif isinstance(arg, memoryview):
            data = arg.tobytes()
        else:
            raise DataError(f"invalid input of type {kind.__name__}: convert to bytes, str or a number first")
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


def encode_command(args: Any) -> bytes:
    """One command in RESP: the array header, then its arguments."""
    return b"*%d\r\n" % len(args) + encode_args(args)


def stream_writer(connection: AbstractConnection) -> asyncio.StreamWriter | None:
    """The open connection's writer (redis-py keeps it as a private field), or None."""
    return getattr(connection, "_writer", None)


async def send_packed(connection: AbstractConnection, packed: bytes) -> None:
    """Write ``packed`` on ``connection``, as its ``send_packed_command`` does, minus the
    ``asyncio.wait_for`` that redis-py wraps around every write when a socket timeout is set
    (on Python 3.11, a Task per write, and a turn of the loop). A connection not open yet goes
    through redis-py's own path, which opens it."""
    writer = stream_writer(connection)
    if writer is None or not connection.is_connected:
        try:
            await connection.send_packed_command(packed)
        except RuntimeError as exc:  # uvloop, on a transport the peer closed: see write()
            raise RedisConnectionError("the connection to Redis is closed") from exc
        return
    await connection.check_health()  # a PING only when the connection sat idle that long
    await write(connection, writer, packed)


async def write(connection: AbstractConnection, writer: asyncio.StreamWriter, data: bytes) -> None:
    """``data`` to the open connection's transport; waits only for a write the kernel did not
    take whole. Any failure drops the connection: part of the write may have gone out."""
    try:
        writer.write(data)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(connection.socket_timeout):
                await writer.drain()
    except TimeoutError:
        await connection.disconnect(nowait=True)
        raise RedisTimeoutError("Timeout writing to socket") from None
    except (OSError, RuntimeError) as exc:
        # A lost connection; uvloop raises a RuntimeError on a transport the peer already
        # closed (a killed or restarted Redis), where asyncio's own transports raise an OSError.
        await connection.disconnect(nowait=True)
        raise RedisConnectionError("the connection to Redis is closed") from exc
    except BaseException:
        await connection.disconnect(nowait=True)
        raise
