"""Webhook delivery across real coordinator processes on one Redis (PROTOCOL.md, "Webhooks"): each
event is delivered by one process, not by each; a delivery held by a process killed mid-attempt
is delivered by another, with the same delivery id."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from tests.support import CoordinatorProcess, coordinator_env, coordinator_process, fresh_prefix, wait_until
from tests.webhook_receiver import ALLOW_RECEIVERS_ENV, HANG, receiving
from tether import verify_signature

pytestmark = pytest.mark.e2e

FAST = {**ALLOW_RECEIVERS_ENV, "COORDINATOR_WEBHOOK_POLL_INTERVAL_S": "0.05", "COORDINATOR_WEBHOOK_RETRY_BASE_S": "0.05"}


def _register(coordinator: CoordinatorProcess, url: str) -> dict[str, Any]:
    webhook: dict[str, Any] = coordinator.call("POST", "/api/v1/webhooks", json={"url": url, "events": ["task.ended"]})
    return webhook


def _end_task(coordinator: CoordinatorProcess) -> str:
    task_id: str = coordinator.create_task(device_id="nowhere")["task_id"]
    coordinator.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    return task_id


def test_two_processes_deliver_each_of_100_ended_tasks_exactly_once() -> None:
    with receiving() as receiver, fresh_prefix() as prefix:
        env = coordinator_env(prefix, **FAST)
        with coordinator_process(env) as first, coordinator_process(env) as second:
            webhook = _register(first, receiver.url)
            ended = [_end_task((first, second)[i % 2]) for i in range(100)]
            receiver.wait_for(100)

            def all_recorded() -> list[dict[str, Any]] | None:
                listed: list[dict[str, Any]] = second.call(
                    "GET", f"/api/v1/webhooks/{webhook['id']}/deliveries")["deliveries"]
                return listed if len(listed) == 100 and all(d["state"] == "delivered" for d in listed) else None

            # Every delivery recorded delivered: nothing is left that either process could send again.
            recorded = wait_until(all_recorded, what="every delivery recorded as delivered")
            assert all(d["attempts"] == 1 for d in recorded)
            requests = receiver.requests()
            assert len(requests) == 100 and len({r.delivery for r in requests}) == 100
            assert sorted(r.json()["data"]["task_id"] for r in requests) == sorted(ended)
            assert {r.delivery for r in requests} == {d["id"] for d in recorded}
            assert all(verify_signature(webhook["secret"], r.headers["tether-signature"], r.body) for r in requests)


def test_a_delivery_held_by_a_process_killed_mid_attempt_is_delivered_by_another_with_its_id() -> None:
    with receiving([HANG]) as receiver, fresh_prefix() as prefix:
        # A short visibility timeout, so the other process takes the held delivery over soon.
        env = coordinator_env(prefix, **FAST, COORDINATOR_WEBHOOK_VISIBILITY_S="1")
        with coordinator_process(env) as first:
            webhook = _register(first, receiver.url)
            task_id = _end_task(first)
            [held] = receiver.wait_for(1)  # the first process is mid-attempt: the receiver holds it
            assert first.process is not None
            first.process.signal(signal.SIGKILL)
            assert first.process.wait() == -signal.SIGKILL
        with coordinator_process(env) as second:
            _, again = receiver.wait_for(2)
            assert again.delivery == held.delivery and again.json()["id"] == held.json()["id"]
            assert again.json()["data"]["task_id"] == task_id
            assert verify_signature(webhook["secret"], again.headers["tether-signature"], again.body)
            delivered = wait_until(lambda: (d := second.call(
                "GET", f"/api/v1/webhooks/{webhook['id']}/deliveries")["deliveries"]) and d[0]["state"] == "delivered"
                and d[0], what="the delivery recorded delivered")
            assert delivered["id"] == held.delivery and delivered["attempts"] == 1
