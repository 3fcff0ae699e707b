"""How a script call is written to Redis: the kept encoding of its keys and fixed arguments."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio.connection import Connection

from coordinator.scripts import Library, Script

pytestmark = pytest.mark.anyio


class _RecordingPipeline:
    """An auto-pipeline that keeps each command's bytes and answers it at once."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def execute_encoded(self, command: bytes) -> asyncio.Future[Any]:
        self.written.append(command)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        reply.set_result([0])
        return reply


async def test_a_script_call_is_written_as_redis_py_packs_it_whatever_it_kept_before() -> None:
    library = Library("tether_test", "")
    library.loaded = True
    script = Script("renewLease", 2, "renewLease_test", library)
    pipeline = _RecordingPipeline()
    calls: list[tuple[list[str], list[Any], int]] = [
        (["k:{t}:a", "k:{t}:b"], [60_000, "base", "lease-1", 7], 2),
        (["k:{t}:a", "k:{t}:b"], [60_000, "base", "lease-2", b"\x00raw", 2.5], 2),
        # Other fixed arguments, other keys, none fixed: never a head kept for another call.
        (["k:{t}:a", "k:{t}:b"], [30_000, "base", "lease-3"], 2),
        (["k:{t}:c", "k:{t}:b"], [60_000, "base", "lease-4"], 2),
        (["k:{t}:a", "k:{t}:b"], [60_000, "base", "lease-5"], 0),
        (["k:{t}:a", "k:{t}:b"], [60_000, "base"], 2),
    ]
    for keys, args, fixed in calls:
        assert await script(None, keys, args, pipeline=pipeline, fixed=fixed) == [0]  # type: ignore[arg-type]
    # Every call ends with the clock's offset, 0 without a test clock (coordinator/clock.py).
    expected = [b"".join(Connection().pack_command("FCALL", "renewLease_test", 2, *keys, *args, 0))
                for keys, args, _ in calls]
    assert pipeline.written == expected
