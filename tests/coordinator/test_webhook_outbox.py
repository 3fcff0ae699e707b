"""The outbox's promise, as a property over any interleaving of two processes taking deliveries
and settling them (lua/takeDeliveries, lua/settleDelivery): a delivery is held by one process at a
time, one that was delivered is never handed out again, and every ended task's delivery is
delivered exactly once once the outbox is drained. On real Redis and fakeredis."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.from_thread
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.state.keys import Keys
from coordinator.state.scripts import load_scripts
from coordinator.state.store import Store
from coordinator.state.webhooks import Taken, WebhookStore
from coordinator.transport.base import RedisTransport
from tests.support import delete_prefix_async, unique_prefix, wait_until_async

pytestmark = pytest.mark.anyio

EXAMPLES = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DAY_MS = 86_400_000
CONSUMERS = ("process-a", "process-b")

# One step of the two processes: a task ends; a process takes up to n deliveries; a process
# settles the i-th delivery it holds as delivered, as a failed attempt due again at once, or as
# deferred due again at once.
STEPS = st.lists(st.one_of(
    st.just(("end",)),
    st.tuples(st.just("take"), st.sampled_from(CONSUMERS), st.integers(1, 2)),
    st.tuples(st.just("settle"), st.sampled_from(CONSUMERS), st.integers(0, 1),
              st.sampled_from(["delivered", "retry", "defer"])),
), max_size=20)


class Outbox:
    """A deployment with one webhook for task.ended, and what the test saw of its deliveries."""

    def __init__(self, transport: RedisTransport) -> None:
        self.prefix = unique_prefix()
        keys = Keys(self.prefix)
        scripts = load_scripts()
        self.store = Store(transport, keys, host_offline_after_ms=30_000, scripts=scripts)
        self.hooks = WebhookStore(transport, self.store.deployment, scripts)
        self.ended = 0
        self.held: dict[str, list[Taken]] = {c: [] for c in CONSUMERS}
        self.delivered: list[str] = []

    async def start(self) -> None:
        await self.store.load_scripts()
        await self.hooks.create("wh_1", "http://127.0.0.1:9/hook", ["task.ended"], None, "whsec_test")

    async def end_task(self) -> None:
        self.ended += 1
        task_id = f"t_{self.ended}"
        await self.store.create_task({"id": task_id, "kind": "goal", "goal": "g", "max_steps": 3,
                                      "target_device": "nowhere", "max_attempts": 1, "priority": 0,
                                      "team": "default"})
        await self.store.cancel_task(task_id)

    async def take(self, consumer: str, limit: int) -> None:
        taken = await self.hooks.take(consumer, limit, visibility_ms=DAY_MS)
        for t in taken:
            holders = [c for c, held in self.held.items() if t.delivery.id in {h.delivery.id for h in held}]
            assert not holders, f"{t.delivery.id} handed to {consumer} while {holders} hold it"
            assert t.delivery.id not in self.delivered, f"{t.delivery.id} handed out after it was delivered"
            assert t.secret == "whsec_test" and t.webhook.id == "wh_1"
        self.held.setdefault(consumer, []).extend(taken)

    async def settle(self, consumer: str, index: int, outcome: str) -> None:
        held = self.held[consumer]
        if index >= len(held):
            return
        taken = held.pop(index)
        state = await self.hooks.settle(taken, outcome, status=200 if outcome == "delivered" else 500,
                                        delay_ms=0, retry_for_ms=DAY_MS)
        assert state == ("delivered" if outcome == "delivered" else "pending")
        if outcome == "delivered":
            self.delivered.append(taken.delivery.id)

    async def drain(self) -> None:
        for consumer in CONSUMERS:
            while self.held[consumer]:
                await self.settle(consumer, 0, "delivered")
        while taken := await self.hooks.take("process-c", 10, visibility_ms=DAY_MS):
            for t in taken:
                assert t.delivery.id not in self.delivered
                self.delivered.append(t.delivery.id)
                await self.hooks.settle(t, "delivered", status=200, retry_for_ms=DAY_MS)


async def test_each_delivery_is_held_by_one_process_and_delivered_exactly_once(
        redis_client: aioredis.Redis, transport: RedisTransport) -> None:
    async def run(steps: list[tuple[Any, ...]]) -> None:
        outbox = Outbox(transport)
        try:
            await outbox.start()
            for step in steps:
                if step[0] == "end":
                    await outbox.end_task()
                elif step[0] == "take":
                    await outbox.take(step[1], step[2])
                else:
                    await outbox.settle(step[1], step[2], step[3])
            await outbox.drain()
            assert len(outbox.delivered) == len(set(outbox.delivered)) == outbox.ended
            listed = await outbox.hooks.deliveries("wh_1", 100)
            assert {d.id for d in listed} == set(outbox.delivered)
            assert all(d.state == "delivered" for d in listed)
            assert await outbox.hooks.backlog() == (0, 0)
        finally:
            await delete_prefix_async(redis_client, outbox.prefix)

    @EXAMPLES
    @given(STEPS)
    def examples(steps: list[tuple[Any, ...]]) -> None:
        anyio.from_thread.run(run, steps)

    await anyio.to_thread.run_sync(examples)


async def test_the_consumers_of_stopped_processes_are_forgotten_unless_they_hold_something(
        redis_client: aioredis.Redis, transport: RedisTransport) -> None:
    outbox = Outbox(transport)
    keys = Keys(outbox.prefix)
    try:
        await outbox.start()
        await outbox.end_task()
        await outbox.end_task()
        await outbox.take("stopped", 1)
        await outbox.settle("stopped", 0, "delivered")  # it holds nothing now
        await outbox.take("holder", 1)  # and this one holds the second delivery, never settled

        async def consumers() -> set[str]:
            listed = await redis_client.xinfo_consumers(keys.webhook_outbox, "delivery")
            return {c["name"].decode() if isinstance(c["name"], bytes) else c["name"] for c in listed}

        assert {"stopped", "holder"} <= await consumers()

        async def forgotten() -> bool:
            await outbox.hooks.take("alive", 1, visibility_ms=DAY_MS, forget_idle_ms=1)
            return "stopped" not in await consumers()

        await wait_until_async(forgotten, what="the idle consumer forgotten")
        assert "holder" in await consumers()  # it holds a delivery: never forgotten
        pending = await redis_client.xpending(keys.webhook_outbox, "delivery")
        assert pending["pending"] == 1
    finally:
        await delete_prefix_async(redis_client, outbox.prefix)
