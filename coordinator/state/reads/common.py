"""What every read of the operator API shares (`coordinator.state.reads` assembles them): the page
shape, the bound on what one page examines, and the Redis clock as the scripts read it.

`Reader` declares what the readers of ``task_reads``, ``fleet_reads`` and ``token_reads`` use of
the `Queries` they are part of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from coordinator.clock import ShiftedClock
from coordinator.state.keys import Keys
from coordinator.state.records import TaskRecord

# A filter that has no index of its own examines at most this many records per page.
SCAN_BOUND = 5000
# Records read at a time while such a filter looks through an index.
BATCH = 500

# TIME as a script given one of the deployment's keys, so it runs on the node that holds them
# (the clock the scripts read, also on a cluster, where a bare TIME goes to any node and may not
# be pipelined).
CLOCK_SCRIPT = "return redis.call('TIME')"


def clock_ms(clock: tuple[int, int]) -> int:
    """A TIME reply in milliseconds."""
    seconds, micros = clock
    return int(seconds) * 1000 + int(micros) // 1000


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None


class Reader:
    """What the readers use of the `Queries` they are mixed into."""

    redis: Redis
    keys: Keys
    clock: ShiftedClock | None  # tests only (coordinator/clock.py)
    _offline_after_ms: int

    def _pipeline(self) -> Any:
        """A pipeline of reads (see `Queries`)."""
        raise NotImplementedError

    async def get_task(self, task_id: str) -> TaskRecord | None:
        """The task (see `TaskReads`)."""
        raise NotImplementedError

    async def redis_time_ms(self) -> int:
        """The Redis clock, as the scripts read it (see `Queries`)."""
        raise NotImplementedError
