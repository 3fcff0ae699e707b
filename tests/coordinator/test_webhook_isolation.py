"""A dead endpoint never slows another (PROTOCOL.md, "Webhooks"; issue 57 item 1): however many
endpoints hang, a healthy one's delivery starts at once, and an endpoint whose attempts keep
timing out has its circuit opened: its deliveries wait, no attempt made, until one probe says
it answers again. Against real HTTP receivers in this process, on real Redis and fakeredis."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

import pytest

from tests.coordinator.test_webhooks import FAST, deliveries, delivery_where, end_task, register
from tests.support import wait_until_async
from tests.webhook_receiver import HANG, receiving

pytestmark = pytest.mark.anyio


async def test_a_healthy_endpoint_is_delivered_while_hanging_ones_hold_every_process_slot(api_factory: Any) -> None:
    # Two process slots, both taken by attempts that hang for 30 s: before item 1 the healthy
    # endpoint's delivery waited for one of them to time out.
    settings = {**FAST, "webhook_concurrency": 2, "webhook_endpoint_concurrency": 1,
                "webhook_attempt_timeout_s": 30.0, "webhook_visibility_s": 90.0}
    with receiving(default=HANG) as hanging, receiving() as healthy:
        async with api_factory(**settings) as api:
            stuck = [await register(api, hanging.url) for _ in range(2)]
            await end_task(api)
            await hanging.arrived(2)  # both slots held
            fine = await register(api, healthy.url)
            task_id = await end_task(api)
            [request] = await healthy.arrived(1, timeout=10)
            assert request.json()["data"]["task_id"] == task_id
            await delivery_where(api, fine["id"], lambda d: d["state"] == "delivered")
            # Still held: the healthy delivery did not wait for a hanging attempt to end.
            for webhook in stuck:
                assert all(d["attempts"] == 0 for d in await deliveries(api, webhook["id"]))


async def test_an_endpoint_that_keeps_timing_out_is_left_alone_while_its_circuit_is_open(
        api_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.webhooks")
    settings = {**FAST, "webhook_endpoint_concurrency": 1, "webhook_attempt_timeout_s": 0.2,
                "webhook_circuit_timeouts": 3, "webhook_circuit_open_s": 120.0,
                "webhook_retry_max_delay_s": 600.0}  # the open time is at most the longest retry delay
    with receiving(default=HANG) as hanging:
        async with api_factory(**settings) as api:
            webhook = await register(api, hanging.url)
            for _ in range(6):
                await end_task(api)

            async def all_held_back() -> bool:
                listed = await deliveries(api, webhook["id"])
                later = (time.time() + 60) * 1000  # next_attempt_at is RFC 3339: compare parsed
                return len(listed) == 6 and all(
                    d["state"] == "pending" and d["next_attempt_at"] is not None
                    and _ms(d["next_attempt_at"]) > later for d in listed)

            await wait_until_async(all_held_back, what="every delivery held back by the open circuit")
            assert len(hanging.requests()) == 3  # three timeouts in a row, then no attempt
            tried = [d for d in await deliveries(api, webhook["id"]) if d["attempts"]]
            assert all(d["last_error"] == "timeout: no answer within 0.2 s" for d in tried)
    opened = [r.getMessage() for r in caplog.records if "in a row timed out" in r.getMessage()]
    assert len(opened) == 1 and webhook["id"] in opened[0] and hanging.url not in opened[0]


async def test_once_open_one_probe_decides_and_an_answer_resumes_every_delivery(api_factory: Any) -> None:
    settings = {**FAST, "webhook_endpoint_concurrency": 1, "webhook_attempt_timeout_s": 0.2,
                "webhook_circuit_timeouts": 2, "webhook_circuit_open_s": 0.5}
    with receiving([HANG, HANG]) as flaky:
        async with api_factory(**settings) as api:
            webhook = await register(api, flaky.url)
            for _ in range(4):
                await end_task(api)

            async def all_delivered() -> bool:
                listed = await deliveries(api, webhook["id"])
                return len(listed) == 4 and all(d["state"] == "delivered" for d in listed)

            await wait_until_async(all_delivered, what="every delivery once the endpoint answers")
            # Two timeouts opened it; after it, every delivery went once (the probe among them).
            assert len(flaky.requests()) == 2 + 4


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000
