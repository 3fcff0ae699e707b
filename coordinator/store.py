"""The Redis store: one method per atomic operation (each one Lua script) plus plain reads.

Python never reads protocol state, changes it and writes it back; every change is a script.
"""

from __future__ import annotations

from typing import Any

import orjson
from redis.asyncio import Redis

from coordinator.auth import HostPrincipal
from coordinator.errors import error_for
from coordinator.keys import Keys
from coordinator.records import (
    DeviceRecord,
    EnrollmentToken,
    HostRecord,
    HostState,
    PoolState,
    TaskRecord,
)
from coordinator.scripts import Script, load_scripts


def _clock_ms(clock: tuple[int, int]) -> int:
    seconds, micros = clock
    return int(seconds) * 1000 + int(micros) // 1000


def _decode(raw: bytes | str | None) -> dict[str, Any] | None:
    return None if raw is None else orjson.loads(raw)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Store:
    def __init__(self, redis: Redis, keys: Keys, *, host_offline_after_ms: int) -> None:
        self.redis = redis
        self.keys = keys
        self._scripts: dict[str, Script] = load_scripts()
        self._sched_args = [host_offline_after_ms, keys.wake_channel]

    # -- scripts -------------------------------------------------------------------------

    async def load_scripts(self) -> None:
        for script in self._scripts.values():
            await script.load(self.redis)

    async def scripts_loaded(self) -> bool:
        shas = [s.sha for s in self._scripts.values()]
        if None in shas:
            return False
        return all(await self.redis.script_exists(*shas))

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> list[Any]:
        reply = await self._scripts[name](self.redis, keys, args)
        if reply[0] != 0:
            detail = reply[1] if len(reply) > 1 else None
            if isinstance(detail, bytes):
                detail = detail.decode()
            raise error_for(reply[0], detail)
        return reply

    def _sched(self, *extra_keys: str) -> list[str]:
        return [*self.keys.scheduling, *extra_keys]

    async def heartbeat(self, host: HostPrincipal, snapshot_json: str) -> None:
        k = self.keys
        await self._run(
            "heartbeat",
            self._sched(k.hosts, k.host_seen, k.host_snapshots, k.enrolled_devices, k.revoked_tokens),
            [*self._sched_args, host.host_id, host.kind, snapshot_json, host.digest],
        )

    async def create_task(self, task: dict[str, Any]) -> tuple[TaskRecord, bool]:
        k = self.keys
        reply = await self._run(
            "createTask",
            self._sched(k.task_seq, k.tasks_by_seq, k.idempotency),
            [*self._sched_args, orjson.dumps(task)],
        )
        return TaskRecord.from_json(reply[1]), reply[2] == 1

    async def claim(self, host: HostPrincipal, claim_id: str, lease_id: str,
                    ttl_ms: int) -> dict[str, Any] | None:
        k = self.keys
        reply = await self._run(
            "claimAssignment",
            self._sched(k.leases, k.lease_deadlines, k.claims, k.revoked_tokens),
            [*self._sched_args, host.host_id, claim_id, lease_id, ttl_ms, host.digest],
        )
        return _decode(reply[1]) if reply[1] else None

    async def renew(self, host: HostPrincipal, lease_id: str, task_id: str, attempt: int, ttl_ms: int,
                    progress_json: str) -> tuple[int, bool]:
        k = self.keys
        reply = await self._run(
            "renewLease",
            [k.tasks, k.leases, k.lease_deadlines, k.progress, k.revoked_tokens],
            [host.host_id, lease_id, task_id, attempt, ttl_ms, progress_json, host.digest],
        )
        return int(reply[1]), reply[2] == 1

    async def record_result(self, host: HostPrincipal, task_id: str, attempt: int, lease_id: str,
                            result_json: str) -> tuple[TaskRecord, bool]:
        k = self.keys
        reply = await self._run(
            "recordResult",
            self._sched(k.leases, k.lease_deadlines, k.progress, k.revoked_tokens),
            [*self._sched_args, host.host_id, task_id, attempt, lease_id, result_json, host.digest],
        )
        return TaskRecord.from_json(reply[1]), reply[2] == 1

    async def cancel_task(self, task_id: str) -> TaskRecord:
        reply = await self._run("cancelTask", self._sched(), [*self._sched_args, task_id])
        return TaskRecord.from_json(reply[1])

    async def expire_leases(self, limit: int = 100) -> int:
        k = self.keys
        reply = await self._run(
            "expireLeases",
            self._sched(k.leases, k.lease_deadlines, k.progress),
            [*self._sched_args, limit],
        )
        return int(reply[1])

    async def expire_hosts(self, limit: int = 100) -> int:
        reply = await self._run(
            "expireHosts", self._sched(self.keys.host_snapshots), [*self._sched_args, limit]
        )
        return int(reply[1])

    # -- managed hosts ---------------------------------------------------------------------

    async def create_enrollment_token(self, token_id: str, digest: str, ttl_ms: int, max_uses: int,
                                      labels_json: str) -> EnrollmentToken:
        k = self.keys
        reply = await self._run(
            "createEnrollmentToken",
            [k.enrollment_tokens, k.enrollment_token_hashes],
            [token_id, digest, ttl_ms, max_uses, labels_json],
        )
        return EnrollmentToken.from_json(reply[1])

    async def revoke_enrollment_token(self, token_id: str) -> EnrollmentToken:
        reply = await self._run("revokeEnrollmentToken", [self.keys.enrollment_tokens], [token_id])
        return EnrollmentToken.from_json(reply[1])

    async def enrollment_tokens(self) -> tuple[list[EnrollmentToken], int]:
        """Every token, oldest first, and the Redis clock (ms) they were read at."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.enrollment_tokens)
            pipe.time()
            raw, clock = await pipe.execute()
        tokens = sorted((EnrollmentToken.from_json(v) for v in raw.values()), key=lambda t: t.created_at)
        return tokens, _clock_ms(clock)

    async def enrollment_token_usable(self, digest: str) -> bool:
        """Whether an enrollment token could enroll a new host now (a read, for ordering errors)."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(k.enrollment_token_hashes, digest)
            pipe.time()
            token_id, clock = await pipe.execute()
        if token_id is None:
            return False
        raw = await self.redis.hget(k.enrollment_tokens, token_id)
        if raw is None:
            return False
        token = EnrollmentToken.from_json(raw)
        return not token.revoked and token.uses < token.max_uses and _clock_ms(clock) < token.expires_at

    async def enroll_host(self, token_digest: str, enrollment_id: str, host_token_digest: str,
                          new_host_id: str, hostname: str, labels_json: str) -> tuple[str, bool]:
        k = self.keys
        reply = await self._run(
            "enrollHost",
            [k.enrollment_token_hashes, k.enrollment_tokens, k.enrollments, k.hosts, k.host_tokens,
             k.revoked_tokens],
            [token_digest, enrollment_id, host_token_digest, new_host_id, hostname, labels_json],
        )
        return reply[1].decode(), reply[2] == 1

    async def enroll_devices(self, host: HostPrincipal, devices: list[dict[str, str]],
                             max_devices: int) -> list[dict[str, str]]:
        k = self.keys
        reply = await self._run(
            "enrollDevices",
            [k.hosts, k.local_devices, k.enrolled_devices, k.revoked_tokens],
            [host.host_id, orjson.dumps(devices), host.digest, max_devices],
        )
        return orjson.loads(reply[1])

    async def revoke_host(self, host_id: str, static_digest: str | None) -> None:
        """Revoke an enrolled host's credential, or the configured one (``static_digest``)."""
        k = self.keys
        await self._run(
            "revokeHost",
            self._sched(k.hosts, k.host_snapshots, k.revoked_tokens, k.host_tokens),
            [*self._sched_args, host_id, static_digest or ""],
        )

    # -- reads (no state changes) ----------------------------------------------------------

    async def get_task(self, task_id: str) -> TaskRecord | None:
        """The task, with its stored progress (which views show only while it runs)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.tasks, task_id)
            pipe.hget(self.keys.progress, task_id)
            raw_task, raw_progress = await pipe.execute()
        return None if raw_task is None else TaskRecord.from_json(raw_task, raw_progress)

    async def list_tasks(self, status: str | None, limit: int, cursor: int | None) -> list[TaskRecord]:
        """Newest first; ``cursor`` is the seq of the last task of the previous page."""
        k = self.keys
        if status is None:
            high = f"({cursor}" if cursor is not None else "+inf"
            ids = await self.redis.zrevrangebyscore(k.tasks_by_seq, high, "-inf", start=0, num=limit)
        else:
            high, low = k.status_range(status, cursor)
            members = await self.redis.zrevrangebylex(k.tasks_by_status, high, low, start=0, num=limit)
            ids = [k.member_task_id(m) for m in members]
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(k.tasks, ids)
            pipe.hmget(k.progress, ids)
            raw_tasks, raw_progress = await pipe.execute()
        return [
            TaskRecord.from_json(raw, progress)
            for raw, progress in zip(raw_tasks, raw_progress, strict=True)
            if raw is not None
        ]

    async def pool(self) -> PoolState:
        """Devices, reservations and online hosts, with the Redis clock, in one round trip."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.devices)
            pipe.hgetall(k.reservations)
            pipe.zrange(k.hosts_online, 0, -1, withscores=True)
            pipe.time()
            devices, reservations, online, clock = await pipe.execute()
        return PoolState(
            devices={_text(d): DeviceRecord.from_json(_text(d), v) for d, v in devices.items()},
            reservations={_text(d): _text(t) for d, t in reservations.items()},
            last_seen={_text(h): int(s) for h, s in online},
            now_ms=_clock_ms(clock),
        )

    async def hosts(self, host_id: str | None = None) -> HostState:
        """Every host that has a record or has heartbeated, or just ``host_id``."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            if host_id is None:
                pipe.hgetall(k.hosts)
                pipe.zrange(k.host_seen, 0, -1, withscores=True)
                pipe.zrange(k.hosts_online, 0, -1, withscores=True)
                pipe.hgetall(k.host_snapshots)
            else:
                pipe.hget(k.hosts, host_id)
                pipe.zscore(k.host_seen, host_id)
                pipe.zscore(k.hosts_online, host_id)
                pipe.hget(k.host_snapshots, host_id)
            pipe.smembers(k.revoked_tokens)
            pipe.time()
            records, seen, online, snapshots, revoked, clock = await pipe.execute()
        if host_id is None:
            records = {_text(h): v for h, v in records.items()}
            snapshots = {_text(h): v for h, v in snapshots.items()}
            seen = {_text(h): s for h, s in seen}
            online = {_text(h): s for h, s in online}
        else:
            records = {host_id: records} if records is not None else {}
            snapshots = {host_id: snapshots} if snapshots is not None else {}
            seen = {host_id: seen} if seen is not None else {}
            online = {host_id: online} if online is not None else {}
        ids = set(records) | set(seen) | set(snapshots)
        return HostState(
            hosts={
                h: HostRecord.from_parts(h, records.get(h), snapshots.get(h), seen.get(h), online.get(h))
                for h in ids
            },
            revoked_tokens=frozenset(_text(d) for d in revoked),
            now_ms=_clock_ms(clock),
        )

    async def redis_time_ms(self) -> int:
        return _clock_ms(await self.redis.time())
