"""What every read of the operator API shares (`coordinator.state.reads` assembles them): the page
shape, and the bound on what one page examines.

`Reader` declares what the readers of ``tasks.py``, ``fleet.py`` and ``tokens.py`` use of
the `Queries` they are part of.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from coordinator.clock import ShiftedClock
from coordinator.state.keys import Keys
from coordinator.state.records import TaskRecord
from coordinator.state.scripts import Deployment, Script
from coordinator.state.wait_reasons import HostFlag
from coordinator.transport.base import RedisTransport

# A filter that has no index of its own examines at most this many records per page.
SCAN_BOUND = 5000
# Records read at a time while such a filter looks through an index.
BATCH = 500

def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None


class Reader:
    """What the readers use of the `Queries` they are mixed into."""

    redis: Redis
    transport: RedisTransport
    keys: Keys
    deployment: Deployment  # what every script takes first
    _read_teams: Script  # lua/readTeams (see `Queries`)
    clock: ShiftedClock  # moved by tests only (coordinator/clock.py)

    def _pipeline(self) -> Any:
        """A pipeline of reads (see `Queries`)."""
        raise NotImplementedError

    async def get_task(self, task_id: str) -> TaskRecord | None:
        """The task (see `TaskReads`)."""
        raise NotImplementedError

    async def redis_time_ms(self) -> int:
        """The Redis clock, as the scripts read it (lua/readClock, see `Queries`)."""
        raise NotImplementedError

    async def host_flags(self, host_ids: list[str]) -> dict[str, HostFlag]:
        """Each host's standing as the scripts read it (lua/readHostFlags, see `Queries`)."""
        raise NotImplementedError

    async def _with_clock(self, pipe: Any) -> tuple[list[Any], int]:
        """A pipeline's replies and the Redis clock, asked together (one write when the transport
        auto-pipelines)."""
        replies, now = await asyncio.gather(pipe.execute(), self.redis_time_ms())
        return replies, now
