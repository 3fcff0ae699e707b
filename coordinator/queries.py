"""Reads of the operator API: tasks, their history, the pool, hosts, tokens, counters.

Nothing here changes state (``store.py`` does, through scripts). Every read is bounded: listings
page through an index with a cursor, and a filter that has no index of its own examines at most
``SCAN_BOUND`` records per page, answering a cursor to go on from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

import wire
from coordinator.clock import ShiftedClock, offset_ms
from coordinator.keys import Keys
from coordinator.records import (
    DeviceRecord,
    DeviceState,
    EnrollmentToken,
    HostRecord,
    OperatorToken,
    TaskRecord,
)
from coordinator.redis_transport import RedisTransport
from coordinator.scripts import Script
from coordinator.wait_reasons import CANDIDATES_SCANNED, candidates_from_reply, target_of

SCAN_BOUND = 5000
_BATCH = 500
_TASK_STATUSES = wire.values(wire.TaskStatus)


def clock_ms(clock: tuple[int, int]) -> int:
    seconds, micros = clock
    return int(seconds) * 1000 + int(micros) // 1000


# TIME as a script given one of the deployment's keys, so it runs on the node that holds them
# (the clock the scripts read, also on a cluster, where a bare TIME goes to any node and may not
# be pipelined).
_CLOCK_SCRIPT = "return redis.call('TIME')"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None


@dataclass(frozen=True)
class HostEntry:
    host: HostRecord
    draining: bool
    static_revoked: bool  # a static host's configured credential is revoked
    now_ms: int


class Queries:
    def __init__(self, redis: RedisTransport, keys: Keys, *, host_offline_after_ms: int, read_waiting: Script,
                 clock: ShiftedClock | None = None) -> None:
        self.transport = redis
        self.redis = redis.client
        self.keys = keys
        self.clock = clock  # tests only (coordinator/clock.py)
        self._offline_after_ms = host_offline_after_ms
        self._read_waiting = read_waiting

    def _pipeline(self) -> Any:
        """A pipeline of reads, sharing the process's writes to Redis when it auto-pipelines."""
        return self.transport.pipeline()

    async def redis_time_ms(self) -> int:
        return clock_ms(await self.redis.eval(_CLOCK_SCRIPT, 1, self.keys.tasks)) + offset_ms(self.clock)

    # -- tasks ---------------------------------------------------------------------------

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
        statuses = [status] if status is not None else _TASK_STATUSES
        async with self._pipeline() as pipe:
            for each in statuses:
                high, low = k.status_scores(each, before_seq)
                pipe.zrevrangebyscore(k.tasks_by_status, high, low, start=0, num=count, withscores=True)
            ranges = await pipe.execute()
        newest = sorted((pair for r in ranges for pair in r), key=lambda pair: k.status_seq(pair[1]), reverse=True)
        return [task_id for task_id, _ in newest[:count]]

    async def list_tasks(self, *, status: str | None, host_id: str | None, device_id: str | None,
                         limit: int, cursor: int | None) -> Page:
        """Newest first; the cursor is the seq of the last task examined. Host and device filters
        have no index: a page examines at most SCAN_BOUND tasks, so it may hold fewer than
        ``limit`` with a cursor to go on."""
        filtered = host_id is not None or device_id is not None
        found: list[TaskRecord] = []
        examined = 0
        last = cursor
        while len(found) < limit and examined < SCAN_BOUND:
            count = _BATCH if filtered else limit - len(found)
            ids = await self._task_ids(status, last, count)
            for task in await self._tasks(ids):
                examined += 1
                last = task.seq
                if ((host_id is None or task.host_id == host_id)
                        and (device_id is None or (task.device_id or task.target_device) == device_id)):
                    found.append(task)
                    if len(found) == limit:
                        break
            if len(ids) < count and len(found) < limit:
                return Page(found, None)  # the index is exhausted
        return Page(found, None if last is None else str(last))

    async def task_events(self, task_id: str) -> list[dict[str, Any]] | None:
        """The task's history, oldest first (its record carries it); None when there is no such
        task."""
        raw = await self.redis.hget(self.keys.tasks, task_id)
        if raw is None:
            return None
        return [{**event, "task_id": task_id} for event in orjson.loads(raw).get("events", [])]

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
             k.devices_by_driver],
            [self._offline_after_ms, task.target_device or "", task.driver or "", CANDIDATES_SCANNED],
            clock_offset_ms=offset_ms(self.clock),
        )
        return candidates_from_reply(task, reply)

    async def _host_flags(self, hosts: list[str], now_ms: int) -> tuple[set[str], set[str], set[str]]:
        """Of these hosts: the online ones, the draining ones, the stalled ones."""
        if not hosts:
            return set(), set(), set()
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.zmscore(k.hosts_online, hosts)
            pipe.smismember(k.hosts_draining, hosts)
            pipe.smismember(k.hosts_stalled, hosts)
            seen, draining, stalled = await pipe.execute()
        threshold = now_ms - self._offline_after_ms
        return (
            {h for h, s in zip(hosts, seen, strict=True) if s is not None and s > threshold},
            {h for h, flag in zip(hosts, draining, strict=True) if flag},
            {h for h, flag in zip(hosts, stalled, strict=True) if flag},
        )

    # -- devices ---------------------------------------------------------------------------

    async def devices(self, ids: list[str]) -> list[DeviceState]:
        """The pooled ones of these devices, in the given order."""
        if not ids:
            return []
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hmget(k.devices, ids)
            pipe.hmget(k.reservations, ids)
            pipe.hmget(k.disabled_devices, ids)
            pipe.eval(_CLOCK_SCRIPT, 1, self.keys.tasks)
            raw_devices, reservations, disabled, clock = await pipe.execute()
        records = [
            (DeviceRecord.from_json(d, raw), reserved, off)
            for d, raw, reserved, off in zip(ids, raw_devices, reservations, disabled, strict=True)
            if raw is not None
        ]
        online, draining, stalled = await self._host_flags(sorted({r.host_id for r, _, _ in records}),
                                                           clock_ms(clock))
        return [
            DeviceState(
                record,
                reserved_by=None if reserved is None else _text(reserved),
                disabled=None if off is None else orjson.loads(off),
                host_online=record.host_id in online,
                host_draining=record.host_id in draining,
                host_stalled=record.host_id in stalled,
            )
            for record, reserved, off in records
        ]

    async def list_devices(self, *, host_id: str | None, driver: str | None, status: str | None,
                           limit: int, cursor: str | None) -> Page:
        """Ordered by driver, then device id; the cursor is "driver/device id" of the last device
        examined. A host's devices come from its snapshot (at most a host's device limit); the
        status filter examines at most SCAN_BOUND devices per page."""
        if host_id is not None:
            members = await self._host_device_members(host_id, driver, cursor)
            states = [s for s in await self.devices([m[1] for m in members]) if s.device.host_id == host_id]
            chosen = [s for s in states if status is None or s.device.status == status]
            more = len(chosen) > limit
            chosen = chosen[:limit]
            return Page(chosen, _device_cursor(chosen[-1]) if more else None)

        low = f"({cursor.replace('/', chr(0), 1)}" if cursor else (f"[{driver}\0" if driver else "-")
        high = f"({driver}\1" if driver else "+"
        found: list[DeviceState] = []
        examined = 0
        last: str | None = None
        while len(found) < limit and examined < SCAN_BOUND:
            count = _BATCH if status else limit - len(found)
            members = [_text(m) for m in await self.redis.zrangebylex(
                self.keys.devices_by_driver, low, high, start=0, num=count)]
            states = {s.device.device_id: s for s in await self.devices([m.split("\0", 1)[1] for m in members])}
            for member in members:
                examined += 1
                last = member
                state = states.get(member.split("\0", 1)[1])
                if state is not None and (status is None or state.device.status == status):
                    found.append(state)
                    if len(found) == limit:
                        break
            if len(members) < count and len(found) < limit:
                return Page(found, None)  # the index is exhausted
            low = f"({last}"
        return Page(found, None if last is None else last.replace("\0", "/", 1))

    async def _host_device_members(self, host_id: str, driver: str | None,
                                   cursor: str | None) -> list[tuple[str, str]]:
        raw = await self.redis.hget(self.keys.host_snapshots, host_id)
        if raw is None:
            return []
        members = sorted((d["driver"], d["device_id"]) for d in orjson.loads(raw)["devices"])
        after = tuple(cursor.split("/", 1)) if cursor else None
        return [m for m in members if (driver is None or m[0] == driver) and (after is None or m > after)]

    async def device_runs(self, device_id: str, limit: int) -> list[dict[str, Any]]:
        """The device's runs, newest first: the one in progress (its reserved task, while
        running), then the ended ones the scripts recorded."""
        async with self._pipeline() as pipe:
            pipe.hget(self.keys.reservations, device_id)
            pipe.lrange(self.keys.device_runs(device_id), 0, limit - 1)
            holder, ended = await pipe.execute()
        runs = [orjson.loads(r) for r in ended]
        current = holder and await self.get_task(_text(holder))
        if current and current.status == wire.TaskStatus.RUNNING and current.device_id == device_id:
            runs.insert(0, {"task_id": current.id, "attempt": current.attempt, "host_id": current.host_id,
                            "started_at": current.started_at})
        return runs[:limit]

    async def device_known(self, device_id: str) -> bool:
        """Pooled, enrolled, or with runs on record."""
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hexists(k.devices, device_id)
            pipe.hexists(k.enrolled_devices, device_id)
            pipe.exists(k.device_runs(device_id))
            return any(await pipe.execute())

    # -- hosts -----------------------------------------------------------------------------

    async def hosts(self, host_ids: list[str], static_digests: dict[str, str]) -> list[HostEntry]:
        """These hosts, in the given order (a host with no record is still answered: a static
        host configured but never seen). ``static_digests``: configured token digests."""
        if not host_ids:
            return []
        k = self.keys
        digests = [static_digests[h] for h in host_ids if h in static_digests]
        async with self._pipeline() as pipe:
            pipe.hmget(k.hosts, host_ids)
            pipe.zmscore(k.host_seen, host_ids)
            pipe.zmscore(k.hosts_online, host_ids)
            pipe.hmget(k.host_snapshots, host_ids)
            pipe.smismember(k.hosts_draining, host_ids)
            if digests:
                pipe.smismember(k.revoked_tokens, digests)
            pipe.eval(_CLOCK_SCRIPT, 1, self.keys.tasks)
            replies = await pipe.execute()
        records, seen, online, snapshots, draining = replies[:5]
        revoked = dict(zip(digests, replies[5], strict=True)) if digests else {}
        now = clock_ms(replies[-1])
        return [
            HostEntry(
                HostRecord.from_parts(h, records[i], snapshots[i], seen[i], online[i]),
                draining=bool(draining[i]),
                static_revoked=bool(revoked.get(static_digests.get(h, ""), False)),
                now_ms=now,
            )
            for i, h in enumerate(host_ids)
        ]

    async def host_exists(self, host_id: str) -> bool:
        return bool(await self.redis.hexists(self.keys.hosts, host_id))

    async def host_ids_page(self, static_ids: Iterable[str], limit: int, cursor: str | None) -> Page:
        """Host ids in order, after ``cursor``: every host with a record, and the configured
        static hosts never seen."""
        low = f"({cursor}" if cursor else "-"
        ids = [_text(h) for h in await self.redis.zrangebylex(self.keys.host_ids, low, "+", start=0, num=limit + 1)]
        merged = sorted(set(ids) | {h for h in static_ids if cursor is None or h > cursor})
        # A static id beyond the last Redis id of this page belongs to a later page, unless Redis
        # has no more ids.
        if len(ids) > limit:
            merged = [h for h in merged if h <= ids[limit - 1]]
        page = merged[:limit]
        more = len(merged) > limit or len(ids) > limit
        return Page(page, page[-1] if more and page else None)

    # -- enrollment tokens -----------------------------------------------------------------

    async def enrollment_tokens(self, limit: int, offset: int) -> tuple[list[EnrollmentToken], int, bool]:
        """Tokens oldest first from ``offset``, the Redis clock, and whether more follow."""
        k = self.keys
        raw, now_ms, more = await self._tokens_by_age(k.enrollment_tokens_by_age, k.enrollment_tokens, limit, offset)
        return [EnrollmentToken.from_json(v) for v in raw], now_ms, more

    async def operator_tokens(self, limit: int, offset: int) -> tuple[list[OperatorToken], int, bool]:
        """Operator tokens oldest first from ``offset``, the Redis clock, and whether more follow."""
        k = self.keys
        raw, now_ms, more = await self._tokens_by_age(k.operator_tokens_by_age, k.operator_tokens, limit, offset)
        return [OperatorToken.from_json(v) for v in raw], now_ms, more

    async def _tokens_by_age(self, by_age: str, records: str, limit: int,
                             offset: int) -> tuple[list[bytes], int, bool]:
        """A page of token records from ``offset`` of their age index (tokens are never deleted, so
        offsets are stable), the Redis clock (ms, as the scripts read it), and whether more follow."""
        ids = await self.redis.zrange(by_age, offset, offset + limit)
        more = len(ids) > limit
        ids = ids[:limit]
        async with self._pipeline() as pipe:
            if ids:
                pipe.hmget(records, ids)
            pipe.eval(_CLOCK_SCRIPT, 1, self.keys.tasks)
            replies = await pipe.execute()
        raw = [v for v in replies[0] if v is not None] if ids else []
        return raw, clock_ms(replies[-1]) + offset_ms(self.clock), more

    async def enrollment_token_usable(self, digest: str) -> bool:
        """Whether an enrollment token could enroll a new host now (a read, for ordering errors)."""
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hget(k.enrollment_token_hashes, digest)
            pipe.eval(_CLOCK_SCRIPT, 1, self.keys.tasks)
            token_id, clock = await pipe.execute()
        if token_id is None:
            return False
        raw = await self.redis.hget(k.enrollment_tokens, token_id)
        if raw is None:
            return False
        token = EnrollmentToken.from_json(raw)
        return not token.revoked and token.uses < token.max_uses and clock_ms(clock) < token.expires_at

    # -- counters for /metrics -------------------------------------------------------------

    async def task_counts(self) -> dict[str, int]:
        """Tasks by status (each count one ZCOUNT of the status index)."""
        k = self.keys
        statuses = _TASK_STATUSES
        async with self._pipeline() as pipe:
            for status in statuses:
                high, low = k.status_scores(status)
                pipe.zcount(k.tasks_by_status, low, high)
            counts = await pipe.execute()
        return dict(zip(statuses, (int(c) for c in counts), strict=True))

    async def stats(self) -> dict[str, int]:
        raw = await self.redis.hgetall(self.keys.stats)
        return {_text(name): int(value) for name, value in raw.items()}

    async def oldest_queued(self, count: int) -> list[TaskRecord]:
        k = self.keys
        high, low = k.status_scores(wire.TaskStatus.QUEUED.value)
        return await self._tasks(await self.redis.zrangebyscore(k.tasks_by_status, low, high, start=0, num=count))


def _device_cursor(state: DeviceState) -> str:
    return f"{state.device.driver}/{state.device.device_id}"
