"""The Redis layout an operator reads with redis-cli, and the long-poll's wake-ups through each
process's inbox list: on real Redis and on the embedded fakeredis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from coordinator.longpoll import ClaimWaiter
from coordinator.state.keys import STATUS_CODES, STATUS_SPAN, team_queue
from coordinator.transport.base import RedisTransport
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease
from tests.support import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

async def _text_list(redis: aioredis.Redis, key: str) -> list[str]:
    return [v.decode() for v in await redis.lrange(key, 0, -1)]


async def test_a_wake_up_goes_only_to_the_process_holding_the_poll(api_factory: Callable[..., Any]) -> None:
    async with api_factory() as a, api_factory(prefix=a.ctx.settings.key_prefix) as b:
        redis, keys = a.ctx.store.redis, a.ctx.store.keys
        process_a, process_b = a.ctx.waiter.process_id, b.ctx.waiter.process_id
        assert process_a != process_b
        await a.heartbeat("host-a", ["a1"])
        poll = asyncio.ensure_future(a.claim("host-a", wait_s=10))
        # the claim script found nothing and registered the poll on process a
        await wait_until_async(lambda: redis.zscore(keys.polls("host-a"), process_a))
        assert 0 < await redis.pttl(keys.polls("host-a")) <= 10_000

        task = (await b.create_task(device_id="a1")).json()  # assigned through the other process
        response = await asyncio.wait_for(poll, 5)
        assert response.status_code == 200 and response.json()["task_id"] == task["task_id"]
        assert not await redis.exists(keys.polls("host-a"))  # the registration was used up
        assert not await redis.exists(keys.inbox(process_b))  # b holds no poll: nothing for it
        assert await redis.llen(keys.inbox(process_a)) == 0  # a popped its wake-up


async def test_a_poll_registration_expires_with_its_wait(api: Api) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1"])
    assert (await api.claim("host-a", wait_s=0.3)).status_code == 204
    # the poll has ended: its registration lasts no longer than the wait it asked for
    await wait_until_async(lambda: _gone(redis, keys.polls("host-a")), timeout=3)
    # a poll that does not wait never registers
    assert (await api.claim("host-a", wait_s=0)).status_code == 204
    assert not await redis.exists(keys.polls("host-a"))


async def _gone(redis: aioredis.Redis, key: str) -> bool:
    return not await redis.exists(key)


async def test_a_crashed_process_inbox_expires(api: Api) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1"])
    # a registration left by a process that died while its poll waited
    now = await api.ctx.queries.redis_time_ms()
    await redis.zadd(keys.polls("host-a"), {"p_dead": now + 60_000})
    await api.create_task(device_id="a1")
    assert await _text_list(redis, keys.inbox("p_dead")) == ["host-a"]
    assert 0 < await redis.pttl(keys.inbox("p_dead")) <= 60_000
    assert not await redis.exists(keys.polls("host-a"))


async def test_an_expired_registration_is_not_woken(api: Api) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1"])
    await redis.zadd(keys.polls("host-a"), {"p_gone": 1})  # its wait ended long ago
    await api.create_task(device_id="a1")
    assert not await redis.exists(keys.inbox("p_gone"))


async def test_queues_devices_and_leases_read_plainly(api: Api) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1", "a2", "a3"])
    assert {d.decode() for d in await redis.smembers(keys.host_devices("host-a"))} == {"a1", "a2", "a3"}

    # a host's assignments, in the order they were made
    made = [(await api.create_task(device_id=d)).json()["task_id"] for d in ("a2", "a3", "a1")]
    assert await _text_list(redis, keys.assigned("host-a")) == made
    first = await claim_one(api, "host-a")
    assert first["task_id"] == made[0]
    assert await _text_list(redis, keys.assigned("host-a")) == made[1:]

    # the status index holds each task once, its score its status and age: a claim moved one
    scored = {t.decode(): int(score) for t, score in await redis.zrange(keys.tasks_by_status, 0, -1, withscores=True)}
    seqs = [orjson.loads(await redis.hget(keys.tasks, t))["seq"] for t in made]
    assert scored == {made[0]: STATUS_CODES["running"] * STATUS_SPAN + seqs[0],
                      made[1]: STATUS_CODES["assigned"] * STATUS_SPAN + seqs[1],
                      made[2]: STATUS_CODES["assigned"] * STATUS_SPAN + seqs[2]}

    # the waiting tasks of a target, oldest first: a selector's and one device's; what each asks
    waiting = [(await api.create_task(selector={"driver": "sim"})).json()["task_id"] for _ in range(2)]
    aimed = (await api.create_task(device_id="a3")).json()["task_id"]
    targets = {t.decode(): score for t, score in await redis.zrange(keys.team_targets("default"), 0, -1,
                                                                    withscores=True)}
    asked = {t: orjson.loads(await redis.hget(keys.targets, t)) for t in targets}
    by_sim = next(t for t, target in asked.items() if target.get("driver") == "sim")
    by_a3 = next(t for t, target in asked.items() if target.get("target_device") == "a3")
    assert [t.decode() for t in await redis.zrange(keys.waiting(team_queue(by_sim, "default")), 0, -1)] == waiting
    assert [t.decode() for t in await redis.zrange(keys.waiting(team_queue(by_a3, "default")), 0, -1)] == [aimed]
    assert {t.decode() for t in await redis.smembers(keys.driver_targets("sim"))} == {by_sim}
    assert {t.decode() for t in await redis.smembers(keys.device_targets("a3"))} == {by_a3}

    # a lease lives in its task's record: the current one, and every earlier one with its host and
    # attempt; its deadline is the reaper's index
    record = orjson.loads(await redis.hget(keys.tasks, first["task_id"]))
    assert (record["lease_id"], record["host_id"], record["attempt"]) == (first["lease_id"], "host-a", 1)
    assert record["leases"] == [{"id": first["lease_id"], "host_id": "host-a", "attempt": 1}]
    await redis.zadd(keys.lease_deadlines, {first["task_id"]: await api.ctx.queries.redis_time_ms() + 1000})
    assert (await api.renew("host-a", first)).status_code == 200  # a renewal moves the deadline
    assert await redis.zscore(keys.lease_deadlines, first["task_id"]) > await api.ctx.queries.redis_time_ms() + 5000
    # ended, it stays in the record until retention, so a replayed report gets its exact answer
    assert (await api.result("host-a", first)).status_code == 200
    assert await redis.zscore(keys.lease_deadlines, first["task_id"]) is None
    assert (await api.result("host-a", first)).json()["replayed"] is True

    # a device the host stops reporting leaves its set; the freed a2... took the oldest waiting task
    await api.heartbeat("host-a", ["a2", "a3"])
    assert {d.decode() for d in await redis.smembers(keys.host_devices("host-a"))} == {"a2", "a3"}
    assert [t.decode() for t in await redis.zrange(keys.waiting(team_queue(by_sim, "default")), 0, -1)] == waiting[1:]


async def test_a_reaped_lease_answers_exactly_however_late_it_comes(api: Api) -> None:
    """The record keeps every lease, so a call with an ended one, however late, is told why."""
    await api.heartbeat("host-a", ["a1"])
    task_id = (await api.create_task(device_id="a1", max_attempts=2)).json()["task_id"]
    first = await claim_one(api, "host-a")
    await expire_lease(api, first)
    assert (await api.sweep())["leases"] == 1
    assert (await api.sweep())["leases"] == 0
    task = await api.task(task_id)
    assert (task["status"], task["attempt"]) in {("queued", 2), ("assigned", 2)}
    late = await api.renew("host-a", first)
    assert late.status_code == 409 and late.json()["error"]["code"] == "lease_replaced"
    stale = await api.result("host-a", first)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_attempt"
    # another host presenting it, or presenting it for another attempt, does not own it
    assert (await api.renew("host-b", first)).json()["error"]["code"] == "lease_not_owned"
    assert (await api.renew("host-a", {**first, "attempt": 2})).json()["error"]["code"] == "lease_not_owned"


class _FailingOnce:
    """A transport whose first blocking pop fails as a dropped connection would."""

    def __init__(self, transport: RedisTransport) -> None:
        self._transport = transport
        self.failed = asyncio.Event()

    async def blocking_pop(self, key: str, timeout: float, count: int) -> list[bytes]:
        if not self.failed.is_set():
            self.failed.set()
            raise RedisConnectionError("connection reset")
        return await self._transport.blocking_pop(key, timeout, count)


async def test_the_inbox_loop_wakes_every_poll_after_a_failure_and_reads_on(
        redis_client: aioredis.Redis, transport: RedisTransport, prefix: str) -> None:
    inbox = f"{prefix}:inbox:p_test"
    client = _FailingOnce(transport)
    waiter = ClaimWaiter(client, inbox, "p_test")
    lost = waiter.register("h1")  # a wake-up pushed while the connection was down may be lost
    loop = asyncio.create_task(waiter.run())
    try:
        assert await asyncio.wait_for(lost.wait(), 5)
        assert client.failed.is_set()
        # the first pop that works wakes every poll again: pushes may have been lost meanwhile
        waiting_through = waiter.register("h3")
        await redis_client.rpush(inbox, "h2")
        assert await asyncio.wait_for(waiting_through.wait(), 5)
        # from then on, only the host pushed is woken
        later = waiter.register("h2")
        bystander = waiter.register("h3")
        await redis_client.rpush(inbox, "h2")
        assert await asyncio.wait_for(later.wait(), 5)
        assert not bystander.is_set()
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await redis_client.delete(inbox)


async def test_the_inbox_loop_takes_every_waiting_wake_up_in_one_pop(
        redis_client: aioredis.Redis, transport: RedisTransport, prefix: str) -> None:
    """A pop returns a batch: every host in it is woken, not only the first."""
    inbox = f"{prefix}:inbox:p_batch"
    await redis_client.rpush(inbox, "h1", "h2", "h3")
    waiter = ClaimWaiter(transport, inbox, "p_batch")
    wakeups = [waiter.register(host) for host in ("h1", "h2", "h3")]
    bystander = waiter.register("h4")
    loop = asyncio.create_task(waiter.run())
    try:
        for wakeup in wakeups:
            assert await asyncio.wait_for(wakeup.wait(), 5)
        assert await redis_client.llen(inbox) == 0
        assert not bystander.is_set()
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await redis_client.delete(inbox)


