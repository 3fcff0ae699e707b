"""Races at the Redis level: every outcome of an interleaving is one of the allowed ones."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from coordinator.api.auth import HostPrincipal, token_digest
from coordinator.errors import Conflict
from coordinator.state.keys import Keys
from coordinator.state.store import Store
from tests.coordinator.helpers import expire_task_lease

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

SNAPSHOT = '{"agent":{},"devices":[%s]}'


def _snapshot(*device_ids: str) -> str:
    devices = ",".join(
        f'{{"attributes":"{{}}","device_id":"{d}","driver":"sim","labels":"{{}}","status":"available"}}'
        for d in device_ids
    )
    return SNAPSHOT % devices


def _host(host_id: str) -> HostPrincipal:
    return HostPrincipal(host_id, "static", token_digest(host_id + "-secret"))


def _task(device_id: str, max_attempts: int = 3) -> dict[str, Any]:
    return {"id": "t_" + secrets.token_hex(8), "kind": "goal", "goal": "g", "max_steps": 5,
            "max_attempts": max_attempts, "target_device": device_id, "request_hash": "h"}


async def _claim(store: Store, host: str) -> dict[str, Any]:
    claimed = await store.claim(_host(host), "", "l_" + secrets.token_hex(8), 30_000)
    assert claimed is not None
    return claimed.assignment


async def _expire(store: Store, assignment: dict[str, Any]) -> None:
    await expire_task_lease(store, assignment["task_id"])


async def _task_record(store: Store, task_id: str) -> dict[str, Any]:
    return orjson.loads(await store.redis.hget(store.keys.tasks, task_id))


async def test_renew_racing_expiry_never_revives(store: Store) -> None:
    await store.heartbeat(_host("h1"), _snapshot("d1"))
    for _ in range(20):
        task = (await store.create_task(_task("d1", max_attempts=100))).task
        assignment = await _claim(store, "h1")
        await _expire(store, assignment)
        renewal, sweep = await asyncio.gather(
            store.renew(_host("h1"), assignment["lease_id"], task.id, 1, 30_000, ""),
            store.expire_leases(),
            return_exceptions=True,
        )
        assert isinstance(renewal, Conflict) and renewal.code in ("lease_expired", "lease_replaced")
        assert sweep == 1
        record = await _task_record(store, task.id)
        assert record["attempt"] == 2 and record["status"] in ("queued", "assigned")
        # clean the device for the next round: cancel attempt 2 and report it idle
        await store.cancel_task(task.id)
        await store.heartbeat(_host("h1"), _snapshot())
        await store.heartbeat(_host("h1"), _snapshot("d1"))


async def test_result_racing_expiry_has_one_winner(store: Store) -> None:
    await store.heartbeat(_host("h1"), _snapshot("d1"))
    outcomes = set()
    for _ in range(20):
        task = (await store.create_task(_task("d1"))).task
        assignment = await _claim(store, "h1")
        await _expire(store, assignment)
        report = '{"failure_reason":null,"metadata":{},"status":"succeeded"}'
        result, swept = await asyncio.gather(
            store.record_result(_host("h1"), task.id, 1, assignment["lease_id"], report),
            store.expire_leases(),
            return_exceptions=True,
        )
        record = await _task_record(store, task.id)
        if isinstance(result, Conflict):
            # the reaper won: attempt 2 exists and the stale report changed nothing
            assert result.code == "stale_attempt" and swept == 1
            assert record["attempt"] == 2 and "result" not in record
            await store.cancel_task(task.id)
            outcomes.add("expired")
        else:
            assert swept == 0 and record["status"] == "succeeded" and record["attempt"] == 1
            outcomes.add("recorded")
        await store.heartbeat(_host("h1"), _snapshot())
        await store.heartbeat(_host("h1"), _snapshot("d1"))
    assert outcomes <= {"expired", "recorded"}


async def test_two_reapers_sweeping_at_once(redis_client: aioredis.Redis, store: Store) -> None:
    devices = [f"d{i}" for i in range(30)]
    await store.heartbeat(_host("h1"), _snapshot(*devices))
    tasks = [(await store.create_task(_task(d))).task.id for d in devices]
    leases = [await _claim(store, "h1") for _ in devices]
    for assignment in leases:
        await _expire(store, assignment)
    other = Store(store.transport, Keys(store.keys.prefix), host_offline_after_ms=30_000)
    ended = await asyncio.gather(*(s.expire_leases(limit=7) for s in [store, other] * 6))
    ended_more = await asyncio.gather(store.expire_leases(), other.expire_leases())
    assert sum(ended) + sum(ended_more) == len(leases)
    for task_id in tasks:
        assert (await _task_record(store, task_id))["attempt"] == 2


async def test_concurrent_claims_hand_out_each_assignment_once(store: Store) -> None:
    devices = [f"d{i}" for i in range(40)]
    await store.heartbeat(_host("h1"), _snapshot(*devices))
    created = {(await store.create_task(_task(d))).task.id for d in devices}
    claims = await asyncio.gather(*(store.claim(_host("h1"), "", f"l_{i}", 30_000) for i in range(100)))
    claimed = [c.assignment["task_id"] for c in claims if c is not None]
    assert len(claimed) == len(created) and set(claimed) == created


async def test_concurrent_task_creation_reserves_each_device_once(store: Store) -> None:
    devices = [f"d{i}" for i in range(10)]
    await store.heartbeat(_host("h1"), _snapshot(*devices))
    selector = {"driver": "sim", "labels": "{}"}
    results = await asyncio.gather(*(
        store.create_task({"id": f"t_{i}", "kind": "goal", "goal": "g", "max_attempts": 1,
                           "request_hash": "h", **selector})
        for i in range(25)
    ))
    assigned = [r.task for r in results if r.task.status == "assigned"]
    assert len(assigned) == len(devices)
    assert sorted(t.device_id for t in assigned) == sorted(devices)
    reservations = await store.redis.hgetall(store.keys.reservations)
    assert len(reservations) == len(devices)
