"""Reads of tasks: one by id, pages of them newest first, a task's history, and the counts
/metrics shows. Nothing here changes state (``store.py`` does, through scripts)."""

from __future__ import annotations

import heapq
from typing import Any, cast

import orjson

import wire
from coordinator.state.reads.common import BATCH, SCAN_BOUND, Page, Reader, text
from coordinator.state.records import TaskRecord

TASK_STATUSES = wire.values(wire.TaskStatus)


class TaskReads(Reader):
    """The task reads of `Queries`."""

    async def get_task(self, task_id: str) -> TaskRecord | None:
        """The task, with its stored progress (which views show only while it runs)."""
        async with self._pipeline() as pipe:
            pipe.hget(self.keys.tasks, task_id)
            pipe.hget(self.keys.progress, task_id)
            raw_task, raw_progress = await pipe.execute()
        return None if raw_task is None else TaskRecord.from_json(raw_task, raw_progress)

    async def _tasks(self, ids: list[bytes]) -> list[TaskRecord]:
        if not ids:
            return []
        async with self._pipeline() as pipe:
            pipe.hmget(self.keys.tasks, ids)
            pipe.hmget(self.keys.progress, ids)
            raw_tasks, raw_progress = await pipe.execute()
        return [
            TaskRecord.from_json(raw, progress)
            for raw, progress in zip(raw_tasks, raw_progress, strict=True)
            if raw is not None
        ]

    async def _task_ids(self, status: str | None, before_seq: int | None, count: int) -> list[bytes]:
        """Ids newest first, below ``before_seq``. Every status is a score range of one index, so
        all tasks are the newest ``count`` of each status's range, merged by seq."""
        k = self.keys
        statuses = [status] if status is not None else TASK_STATUSES
        async with self._pipeline() as pipe:
            for each in statuses:
                high, low = k.status_scores(each, before_seq)
                pipe.zrevrangebyscore(k.tasks_by_status, high, low, start=0, num=count, withscores=True)
            ranges = await pipe.execute()
        newest = sorted((pair for r in ranges for pair in r), key=lambda pair: k.status_seq(pair[1]), reverse=True)
        return [task_id for task_id, _ in newest[:count]]

    async def list_tasks(self, *, status: str | None, host_id: str | None, device_id: str | None,
                         limit: int, cursor: int | None, team: str | None = None,
                         run_id: str | None = None) -> Page:
        """Newest first; the cursor is the seq of the last task examined. Host, device, team and
        run filters have no index: a page examines at most SCAN_BOUND tasks, so it may hold fewer than
        ``limit`` with a cursor to go on."""
        filtered = host_id is not None or device_id is not None or team is not None or run_id is not None
        found: list[TaskRecord] = []
        examined = 0
        last = cursor
        while len(found) < limit and examined < SCAN_BOUND:
            count = BATCH if filtered else limit - len(found)
            ids = await self._task_ids(status, last, count)
            for task in await self._tasks(ids):
                examined += 1
                last = task.seq
                if ((host_id is None or task.host_id == host_id)
                        and (device_id is None or (task.device_id or task.target_device) == device_id)
                        and (team is None or task.team == team)
                        and (run_id is None or task.run_id == run_id)):
                    found.append(task)
                    if len(found) == limit:
                        break
            if len(ids) < count and len(found) < limit:
                return Page(found, None)  # the index is exhausted
        return Page(found, None if last is None else str(last))

    async def task_events(self, task_id: str) -> list[dict[str, Any]] | None:
        """The task's history, oldest first, the last ``wire.TASK_EVENTS_KEPT``: its record carries
        it, but for a live session's command events, kept in a list of their own
        (lua/includes/sessions.lua, ``commandEvent``) and merged in by time, the record's first on
        a tie. None when there is no such task."""
        async with self._pipeline() as pipe:
            pipe.hget(self.keys.tasks, task_id)
            pipe.lrange(self.keys.command_events(task_id), 0, -1)
            raw, raw_commands = await pipe.execute()
        if raw is None:
            return None
        recorded = orjson.loads(raw).get("events", [])
        commands = [orjson.loads(event) for event in raw_commands]
        if commands:
            recorded = list(heapq.merge(recorded, commands, key=lambda event: event["at"]))[-wire.TASK_EVENTS_KEPT:]
        return [{**event, "task_id": task_id} for event in recorded]

    # -- counters for /metrics -------------------------------------------------------------

    async def task_counts(self) -> dict[str, int]:
        """Tasks by status (each count one ZCOUNT of the status index)."""
        k = self.keys
        statuses = TASK_STATUSES
        async with self._pipeline() as pipe:
            for status in statuses:
                high, low = k.status_scores(status)
                pipe.zcount(k.tasks_by_status, low, high)
            counts = await pipe.execute()
        return dict(zip(statuses, (int(c) for c in counts), strict=True))

    async def stats(self) -> dict[str, int]:
        raw = await self.redis.hgetall(self.keys.stats)
        return {text(name): int(value) for name, value in raw.items()}

    async def oldest_queued(self, count: int) -> list[TaskRecord]:
        k = self.keys
        high, low = k.status_scores(wire.TaskStatus.QUEUED.value)
        ids = cast("list[bytes]", await self.redis.zrangebyscore(k.tasks_by_status, low, high, start=0, num=count))
        return await self._tasks(ids)
