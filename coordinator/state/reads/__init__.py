"""Reads of the operator API, one class (`Queries`) assembled from one module per thing read:
tasks and their counters (``task_reads``), devices and hosts (``fleet_reads``), tokens
(``token_reads``), artifacts' descriptions (``artifact_reads``); what they share is ``reads``.
Here: the Redis connection they read through, the Redis clock, and the candidates of waiting work
(a script's read).

Nothing here changes state (``store.py`` does, through scripts). Every read is bounded: listings
page through an index with a cursor, and a filter that has no index of its own examines at most
``reads.SCAN_BOUND`` records per page, answering a cursor to go on from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import wire
from coordinator.clock import ShiftedClock, offset_ms
from coordinator.settings import CANDIDATES_SCANNED
from coordinator.state.keys import Keys
from coordinator.state.reads.artifacts import ArtifactReads
from coordinator.state.reads.common import CLOCK_SCRIPT, clock_ms
from coordinator.state.reads.fleet import FleetReads
from coordinator.state.reads.tasks import TaskReads
from coordinator.state.reads.tokens import TokenReads
from coordinator.state.records import TaskRecord
from coordinator.state.scripts import Script
from coordinator.state.wait_reasons import (
    candidates_from_reply,
    target_of,
    workflow_name,
)
from coordinator.transport.base import RedisTransport


class Queries(TaskReads, FleetReads, TokenReads, ArtifactReads):
    """Every read of the operator API, through one Redis client."""

    def __init__(self, redis: RedisTransport, keys: Keys, *, host_offline_after_ms: int, read_waiting: Script,
                 candidates_scanned: int = CANDIDATES_SCANNED, clock: ShiftedClock | None = None) -> None:
        self.transport = redis
        self.redis = redis.client
        self.keys = keys
        self.clock = clock  # tests only (coordinator/clock.py)
        self._offline_after_ms = host_offline_after_ms
        self._read_waiting = read_waiting
        self._candidates_scanned = candidates_scanned

    def _pipeline(self) -> Any:
        """A pipeline of reads, sharing the process's writes to Redis when it auto-pipelines."""
        return self.transport.pipeline()

    async def redis_time_ms(self) -> int:
        return clock_ms(await self.redis.eval(CLOCK_SCRIPT, 1, self.keys.tasks)) + offset_ms(self.clock)

    # -- waiting work ----------------------------------------------------------------------

    async def candidates(self, tasks: Iterable[TaskRecord]) -> dict[str, dict[str, Any]]:
        """``candidates`` of each queued task, by task id: one script call per distinct target,
        all sent together."""
        queued = [t for t in tasks if t.status == wire.TaskStatus.QUEUED]
        targets = {target_of(t): t for t in queued}
        counted = await asyncio.gather(*(self._candidates(t) for t in targets.values()))
        by_target = dict(zip(targets, counted, strict=True))
        return {t.id: by_target[target_of(t)] for t in queued}

    async def _candidates(self, task: TaskRecord) -> dict[str, Any]:
        k = self.keys
        reply = await self._read_waiting(
            self.transport,
            [k.devices, k.reservations, k.disabled_devices, k.hosts_online, k.hosts_draining, k.hosts_stalled,
             k.devices_by_driver, k.host_capabilities],
            [self._offline_after_ms, task.target_device or "", task.driver or "", self._candidates_scanned,
             workflow_name(task) or ""],
            clock_offset_ms=offset_ms(self.clock),
        )
        return candidates_from_reply(task, reply)
