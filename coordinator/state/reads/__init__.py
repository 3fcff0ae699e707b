"""Reads of the operator API, one class (`Queries`) assembled from one module per thing read:
tasks and their counters (``tasks.py``), devices and hosts (``fleet.py``), tokens (``tokens.py``),
teams and their share (``teams.py``), runs (``runs.py``),
artifacts' descriptions (``artifacts.py``); what they share is ``common.py``. Here: the Redis
connection they read through, and the reads that are scripts of lua/ (read-only functions of the
library, called as ``store.py`` calls the others): the Redis clock (``readClock``), hosts'
standing (``readHostFlags``) and the candidates of waiting work (``readWaiting``).

Nothing here changes state (``store.py`` does, through scripts). Every read is bounded: listings
page through an index with a cursor, and a filter that has no index of its own examines at most
``reads.SCAN_BOUND`` records per page, answering a cursor to go on from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import wire
from coordinator.clock import ShiftedClock
from coordinator.settings import CANDIDATES_SCANNED
from coordinator.state.reads.artifacts import ArtifactReads
from coordinator.state.reads.fleet import FleetReads
from coordinator.state.reads.runs import RunReads
from coordinator.state.reads.sessions import SessionReads
from coordinator.state.reads.tasks import TaskReads
from coordinator.state.reads.teams import TeamReads
from coordinator.state.reads.tokens import TokenReads
from coordinator.state.records import TaskRecord
from coordinator.state.scripts import Deployment, Script
from coordinator.state.wait_reasons import HostFlag, candidates_from_reply, target_json
from coordinator.transport.base import RedisTransport


class Queries(TaskReads, FleetReads, TokenReads, ArtifactReads, TeamReads, RunReads, SessionReads):
    """Every read of the operator API, through one Redis client."""

    def __init__(self, redis: RedisTransport, deployment: Deployment, *,
                 scripts: Mapping[str, Script], candidates_scanned: int = CANDIDATES_SCANNED,
                 clock: ShiftedClock | None = None) -> None:
        """``deployment``: what every script takes first (the store's, ``Store.deployment``).
        ``scripts``: every script of lua/ (``load_scripts``); the queries call the read-only
        ones. ``candidates_scanned``: the most pooled devices one target's candidates count."""
        self.transport = redis
        self.redis = redis.client
        self.deployment = deployment
        self.keys = deployment.keys
        # Moved by tests only (coordinator/clock.py); the service's stays at 0.
        self.clock = clock if clock is not None else ShiftedClock()
        self._read_waiting = scripts["readWaiting"]
        self._read_clock = scripts["readClock"]
        self._read_host_flags = scripts["readHostFlags"]
        self._read_teams = scripts["readTeams"]
        self._candidates_scanned = candidates_scanned

    def _pipeline(self) -> Any:
        """A pipeline of reads, sharing the process's writes to Redis when it auto-pipelines."""
        return self.transport.pipeline()

    async def redis_time_ms(self) -> int:
        reply = await self._read_clock(self.transport, self.deployment, [], clock_offset_ms=self.clock.offset_ms)
        return int(reply[1])

    async def host_flags(self, host_ids: list[str]) -> dict[str, HostFlag]:
        if not host_ids:
            return {}
        reply = await self._read_host_flags(self.transport, self.deployment, host_ids,
                                            clock_offset_ms=self.clock.offset_ms)
        return {h: HostFlag(int(flags)) for h, flags in zip(host_ids, reply[1:], strict=True)}

    # -- waiting work ----------------------------------------------------------------------

    async def candidates(self, tasks: Iterable[TaskRecord]) -> dict[str, dict[str, Any]]:
        """``candidates`` of each queued task, by task id: one script call per distinct target,
        all sent together."""
        queued = [t for t in tasks if t.status == wire.TaskStatus.QUEUED]
        targets = {target_json(t) for t in queued}
        counted = await asyncio.gather(*(self._candidates(t) for t in targets))
        by_target = dict(zip(targets, counted, strict=True))
        return {t.id: by_target[target_json(t)] for t in queued}

    async def _candidates(self, target: str) -> dict[str, Any]:
        reply = await self._read_waiting(self.transport, self.deployment, [target, self._candidates_scanned],
                                         clock_offset_ms=self.clock.offset_ms)
        return candidates_from_reply(reply)
