"""Deadlines the reaper acts on: queue timeout, claim timeout, retention (real Redis and
fakeredis; the memory baseline on real Redis only)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

import wire
from tests.conftest import Api
from tests.coordinator.helpers import claim_one
from tests.support import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


async def _past(api: Api, deadline_ms: float) -> None:
    """Poll until the Redis clock has passed a deadline (the reaper reads that clock)."""
    await wait_until_async(lambda: _later(api, deadline_ms), timeout=5)


async def _later(api: Api, deadline_ms: float) -> bool:
    return await api.ctx.queries.redis_time_ms() > deadline_ms


async def _score(api: Api, key: str, member: str) -> float:
    score = await api.ctx.store.redis.zscore(key, member)
    assert score is not None
    return score


# -- queue timeout -------------------------------------------------------------------------


async def test_a_task_not_assigned_before_its_queue_timeout_fails(api: Api) -> None:
    task = (await api.create_task(device_id="nowhere", queue_timeout_s=1)).json()
    assert task["queue_timeout_s"] == 1 and task["queue_deadline"] is not None
    assert (await api.sweep())["queued"] == 0
    await _past(api, await _score(api, api.ctx.store.keys.queue_deadlines, task["task_id"]))
    assert (await api.sweep())["queued"] == 1
    failed = await api.task(task["task_id"])
    assert failed["status"] == "failed" and failed["result"]["failure_reason"] == "queue_timeout"
    assert (await api.events(task["task_id"]))[-1]["type"] == "queue_timeout"
    # a device appearing now finds nothing to run
    await api.heartbeat("host-a", [{"device_id": "nowhere", "driver": "sim", "status": "available"}])
    assert (await api.claim("host-a")).status_code == 204


async def test_the_queue_timeout_defaults_to_the_setting(api_factory: Any) -> None:
    async with api_factory(queue_timeout_s=7200) as api:
        task = (await api.create_task(device_id="nowhere")).json()
        assert task["queue_timeout_s"] == 7200
        for bad in (0, -1, "1", 10**10):
            response = await api.create_task(device_id="nowhere", queue_timeout_s=bad)
            assert response.status_code == 400, bad


async def test_an_assigned_task_is_not_failed_by_its_queue_deadline(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1", queue_timeout_s=1)).json()
    assert task["status"] == "assigned"
    assert await api.ctx.store.redis.zscore(api.ctx.store.keys.queue_deadlines, task["task_id"]) is None
    await claim_one(api, "host-a")
    assert (await api.task(task["task_id"]))["status"] == "running"


# -- claim timeout -------------------------------------------------------------------------


async def test_an_unclaimed_assignment_goes_back_and_its_host_gets_no_work_until_it_polls(
    api_factory: Any,
) -> None:
    async with api_factory(claim_timeout_s=0.2) as api:
        await api.heartbeat("host-a", ["a1"])
        await api.heartbeat("host-b", ["b1"])
        task = (await api.create_task(selector={"driver": "sim"})).json()
        first_host = task["host_id"]
        other_host = "host-b" if first_host == "host-a" else "host-a"
        await _past(api, await _score(api, api.ctx.store.keys.claim_deadlines, task["task_id"]))
        assert (await api.sweep())["claims"] == 1

        moved = await api.task(task["task_id"])
        assert moved["status"] == "assigned" and moved["host_id"] == other_host and moved["attempt"] == 1
        unassigned = [e for e in await api.events(task["task_id"]) if e["type"] == "unassigned"]
        assert unassigned[0]["reason"] == "claim_timeout" and unassigned[0]["host_id"] == first_host

        # The stalled host's device takes no new work, even after a heartbeat...
        await api.heartbeat(first_host, ["a1" if first_host == "host-a" else "b1"])
        waiting = (await api.create_task(selector={"driver": "sim"})).json()
        assert waiting["status"] == "queued"
        assert waiting["candidates"]["host_stalled"] == 1
        assert waiting["waiting_reason"] == "matching_devices_busy"  # the other host's device is busy
        # ...until it polls: that very poll gets the waiting task.
        claimed = await claim_one(api, first_host)
        assert claimed["task_id"] == waiting["task_id"]


async def test_a_claim_that_wins_the_race_keeps_its_task(api_factory: Any) -> None:
    async with api_factory(claim_timeout_s=0.05) as api:
        await api.heartbeat("host-a", ["a1"])
        for _ in range(10):
            task = (await api.create_task(device_id="a1")).json()
            await _past(api, await _score(api, api.ctx.store.keys.claim_deadlines, task["task_id"]))
            claim, swept = await asyncio.gather(api.claim("host-a"), api.sweep())
            state = await api.task(task["task_id"])
            if claim.status_code == 200:
                assert state["status"] == "running" and swept["claims"] == 0
                await api.result("host-a", claim.json())
            else:
                # the sweep won: back in the queue, then the poll ended the stall and took it
                assert swept["claims"] == 1
                assert state["status"] in ("queued", "assigned")
                await api.admin("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
                await api.claim("host-a")  # end any stall for the next round


# -- retention -----------------------------------------------------------------------------


async def _finished_task(api: Api, **create: Any) -> dict[str, Any]:
    task = (await api.create_task(device_id="a1", **create)).json()
    assignment = await claim_one(api, "host-a", claim_id=f"c-{task['task_id']}")
    assert (await api.result("host-a", assignment)).status_code == 200
    return assignment


async def test_a_terminal_task_and_everything_of_it_are_deleted_after_retention(api_factory: Any) -> None:
    async with api_factory(task_retention_s=0.1) as api:
        await api.heartbeat("host-a", ["a1"])
        assignment = await _finished_task(api, idempotency_key="once")
        task_id = assignment["task_id"]
        keys, redis = api.ctx.store.keys, api.ctx.store.redis
        await _past(api, await _score(api, keys.retention, task_id))
        assert (await api.sweep())["purged"] == 1

        assert (await api.admin("GET", f"/api/v1/tasks/{task_id}")).status_code == 404
        assert (await api.admin("GET", f"/api/v1/tasks/{task_id}/events")).status_code == 404
        left = [key async for key in redis.scan_iter(match=keys.base.replace("[", "\\[") + "*", count=500)
                if task_id.encode() in key or assignment["lease_id"].encode() in key]
        assert left == []
        assert await redis.hlen(keys.claims) == 0
        assert await redis.zcard(keys.tasks_by_status) == 0
        assert await redis.hlen(keys.idempotency) == 0
        # the key is free again: the same request makes a new task
        again = await api.create_task(device_id="a1", idempotency_key="once")
        assert again.status_code == 201 and again.json()["task_id"] != task_id
        # a late result and a late replay of the claim find nothing
        late = await api.result("host-a", assignment)
        assert late.status_code == 409 and late.json()["error"]["code"] == "lease_not_owned"


async def test_tasks_not_yet_due_or_not_terminal_are_kept(api_factory: Any) -> None:
    async with api_factory(task_retention_s=3600) as api:
        await api.heartbeat("host-a", ["a1"])
        finished = await _finished_task(api)
        running = (await api.create_task(device_id="a1")).json()
        await claim_one(api, "host-a")
        assert (await api.sweep())["purged"] == 0
        assert (await api.task(finished["task_id"]))["status"] == "succeeded"
        assert (await api.task(running["task_id"]))["status"] == "running"


async def test_retention_racing_a_late_result_replay(api_factory: Any) -> None:
    """Both orders give one consistent answer: the replay is answered (200, replayed) and then
    the task is deleted, or the task is deleted and the replay finds no lease (409); either way
    nothing of the task is left, and nothing is recreated."""
    async with api_factory(task_retention_s=0.05) as api:
        await api.heartbeat("host-a", ["a1"])
        keys, redis = api.ctx.store.keys, api.ctx.store.redis
        outcomes = set()
        for _ in range(12):
            assignment = await _finished_task(api)
            await _past(api, await _score(api, keys.retention, assignment["task_id"]))
            replay, swept = await asyncio.gather(api.result("host-a", assignment), api.sweep())
            assert swept["purged"] == 1
            if replay.status_code == 200:
                assert replay.json()["replayed"] is True
                outcomes.add("replayed")
            else:
                assert replay.json()["error"]["code"] == "lease_not_owned"
                outcomes.add("purged first")
            assert not await redis.hexists(keys.tasks, assignment["task_id"])
        assert outcomes <= {"replayed", "purged first"}


async def _memory(redis: aioredis.Redis, prefix: str) -> dict[bytes, int]:
    """Bytes of each key stored under the prefix, as Redis counts them."""
    return {key: await redis.memory_usage(key, samples=0) or 0
            async for key in redis.scan_iter(match=f"{prefix}:*", count=500)}


async def test_redis_memory_returns_to_its_baseline_after_retention(api_factory: Any,
                                                                    redis_client: aioredis.Redis) -> None:
    if "Fake" in type(redis_client).__name__:
        pytest.skip("MEMORY USAGE is real Redis's")
    async with api_factory(task_retention_s=0.05) as api:
        await api.heartbeat("host-a", ["a1"])
        store = api.ctx.store
        prefix = store.keys.prefix

        async def batch(n: int) -> None:
            for i in range(n):
                await _finished_task(api, idempotency_key=f"k{i}")
            await _past(api, await api.ctx.queries.redis_time_ms() + 60)
            while (await api.sweep())["purged"]:
                pass

        # The feed (capped) starts at its cap, filled with entries like the ones a batch writes,
        # and a first batch settles every structure's encoding; then another batch must leave
        # nothing behind. (Not the device's runs: they do not expire while it is pooled, and their
        # bound is test_history's.)
        await batch(20)
        events = [fields for _, fields in await redis_client.xrange(store.keys.feed)]
        async with redis_client.pipeline(transaction=False) as pipe:
            for n in range(wire.FEED_EVENTS_KEPT):
                pipe.xadd(store.keys.feed, events[n % len(events)])
            await pipe.execute()
        await batch(300)
        runs = store.keys.device_runs("a1").encode()
        baseline = await _memory(redis_client, prefix)
        await batch(300)
        after = await _memory(redis_client, prefix)
        del baseline[runs], after[runs]
        assert after.keys() == baseline.keys()
        grown = {k: (baseline[k], v) for k, v in after.items() if v > baseline[k] * 1.02 + 1024}
        assert not grown, grown
        # what stays is bounded: the capped feed and run history, counters and the pool
        assert await redis_client.hlen(store.keys.tasks) == 0
