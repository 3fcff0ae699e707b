"""Reads of runs (PROTOCOL.md, "Runs"): one by id with its counts, pages of them newest first,
its tasks in place order, and the artifact names a report lists. Nothing here changes state
(``store.py`` does, through lua/createRun, cancelRun, rerunFailed; the counts move in the scripts
that change a task's status, lua/includes/runs.lua)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import wire
from coordinator.state.reads.common import BATCH, SCAN_BOUND, Page, Reader
from coordinator.state.records import RunCounts, RunRecord, TaskRecord

_STATUSES = wire.values(wire.TaskStatus)
# A run's tasks are read this many at a time (a run holds at most wire.MAX_RUN_TASKS places).
_TASK_PAGE = 250


@dataclass(frozen=True)
class Run:
    """A run and its counts, as read together."""

    record: RunRecord
    counts: RunCounts


class RunReads(Reader):
    """The run reads of `Queries`."""

    async def get_run(self, run_id: str) -> Run | None:
        async with self._pipeline() as pipe:
            pipe.hget(self.keys.runs, run_id)
            pipe.hgetall(self.keys.run_counts(run_id))
            raw, counts = await pipe.execute()
        return None if raw is None else Run(RunRecord.from_json(raw), RunCounts.from_hash(counts))

    async def _runs(self, ids: list[bytes]) -> list[Run]:
        """The runs with their counts by task status only: a listing shows no breakdown, whose
        fields (one per device and per work item) need not be read."""
        if not ids:
            return []
        async with self._pipeline() as pipe:
            pipe.hmget(self.keys.runs, ids)
            for run_id in ids:
                pipe.hmget(self.keys.run_counts(run_id.decode()), _STATUSES)
            raws, *counts = await pipe.execute()
        return [Run(RunRecord.from_json(raw), RunCounts.from_hash(
                    {status: value for status, value in zip(_STATUSES, c, strict=True) if value is not None}))
                for raw, c in zip(raws, counts, strict=True) if raw is not None]

    async def list_runs(self, *, status: str | None, team: str | None, limit: int, cursor: int | None) -> Page:
        """Newest first; the cursor is the seq of the last run examined. The status and team
        filters have no index: a page examines at most SCAN_BOUND runs, so it may hold fewer
        than ``limit`` with a cursor to go on."""
        filtered = status is not None or team is not None
        found: list[Run] = []
        examined = 0
        last = cursor
        while len(found) < limit and examined < SCAN_BOUND:
            count = BATCH if filtered else limit - len(found)
            high = "+inf" if last is None else f"({last}"
            ids = cast("list[bytes]", await self.redis.zrevrangebyscore(self.keys.runs_by_age, high, "-inf",
                                                                        start=0, num=count))
            for run in await self._runs(ids):
                examined += 1
                last = run.record.seq
                if (status is None or run.record.status == status) and (team is None or run.record.team == team):
                    found.append(run)
                    if len(found) == limit:
                        break
            if len(ids) < count and len(found) < limit:
                return Page(found, None)
        return Page(found, None if last is None else str(last))

    async def run_tasks(self, run_id: str) -> list[TaskRecord]:
        """The run's current tasks (the latest rerun in each place), in place order."""
        key = self.keys.run_tasks(run_id)
        tasks: list[TaskRecord] = []
        start = 0
        while True:
            ids = cast("list[bytes]", await self.redis.zrange(key, start, start + _TASK_PAGE - 1))
            if ids:
                raws = await self.redis.hmget(self.keys.tasks, ids)
                tasks += [TaskRecord.from_json(raw) for raw in raws if raw is not None]
            if len(ids) < _TASK_PAGE:
                return tasks
            start += _TASK_PAGE

    async def artifact_names(self, task_ids: list[str]) -> dict[str, list[str]]:
        """Each task's artifact names (every attempt's, each once, in name order)."""
        async with self._pipeline() as pipe:
            for task_id in task_ids:
                prefix = task_id.encode() + b"\0"
                pipe.zrangebylex(self.keys.artifact_index, b"[" + prefix, b"(" + task_id.encode() + b"\1")
            members: list[Any] = await pipe.execute() if task_ids else []
        return {task_id: sorted({m.split(b"\0")[2].decode() for m in found})
                for task_id, found in zip(task_ids, members, strict=True)}
