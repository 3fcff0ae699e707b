"""Eager dispatch (PROTOCOL.md, results): a result with ``"next": true`` carries the freed
device's next assignment, dispatched in the same step exactly as a claim would have, or null; a
replay answers the same one while its lease lives; no next assignment where the device may not
take work."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease, redis_state, running_task

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

ASSIGNMENT_FIELDS = {"task_id", "attempt", "lease_id", "lease_ttl_ms", "lease_expires_at", "device_id", "kind",
                     "goal", "max_steps"}


async def _eager(api: Api, assignment: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = await api.result("host-a", assignment, next=True, **extra)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_result_with_next_carries_the_waiting_task_under_a_fresh_lease(api: Api) -> None:
    first = await running_task(api)
    waiting = (await api.create_task(device_id="a1", goal="Open Settings")).json()
    answer = await _eager(api, first)
    after = answer["next_assignment"]
    assert set(after) == ASSIGNMENT_FIELDS
    assert after["task_id"] == waiting["task_id"] and after["device_id"] == "a1" and after["attempt"] == 1
    assert after["goal"] == "Open Settings" and after["lease_ttl_ms"] == api.ctx.settings.lease_ttl_ms
    assert after["lease_id"] != first["lease_id"]
    assert (await api.task(waiting["task_id"]))["status"] == "running"
    assert [e["type"] for e in await api.events(waiting["task_id"])] == ["created", "assigned", "claimed"]
    assert (await api.claim("host-a")).status_code == 204  # nothing was queued for a claim
    assert (await api.renew("host-a", after)).status_code == 200
    # the next one's result, with next, frees the device again: nothing waits
    assert (await _eager(api, after))["next_assignment"] is None
    created = (await api.create_task(device_id="a1")).json()
    assert (await api.task(created["task_id"]))["status"] == "assigned"  # the device was free


async def test_a_replayed_result_returns_the_same_next_assignment_and_never_a_second_lease(api: Api) -> None:
    first = await running_task(api)
    await api.create_task(device_id="a1")
    after = (await _eager(api, first))["next_assignment"]
    await api.create_task(device_id="a1")  # more work waits: a replay must not hand it out
    store = api.ctx.store
    now = await api.ctx.queries.redis_time_ms()
    await store.redis.zadd(store.keys.lease_deadlines, {after["task_id"]: now + 100})
    replay = await _eager(api, first)
    assert replay["replayed"] is True
    again = replay["next_assignment"]
    assert {k: v for k, v in again.items() if k != "lease_expires_at"} == \
        {k: v for k, v in after.items() if k != "lease_expires_at"}
    assert await store.redis.zscore(store.keys.lease_deadlines, after["task_id"]) >= now + after["lease_ttl_ms"]
    # without next the replay answers as it always did
    assert "next_assignment" not in (await api.result("host-a", first)).json()
    # once that lease has ended: null, and nothing changes
    await expire_lease(api, after)
    await api.sweep()
    before = await redis_state(api)
    assert (await _eager(api, first))["next_assignment"] is None
    assert await redis_state(api) == before


async def test_without_next_nothing_changes(api: Api) -> None:
    first = await running_task(api)
    waiting = (await api.create_task(device_id="a1")).json()
    answer = (await api.result("host-a", first)).json()
    assert "next_assignment" not in answer
    assert (await api.task(waiting["task_id"]))["status"] == "assigned"
    assert (await claim_one(api, "host-a"))["task_id"] == waiting["task_id"]


async def _drain(api: Api) -> None:
    assert (await api.admin("POST", "/api/v1/hosts/host-a/drain")).status_code == 200


async def _disable(api: Api) -> None:
    assert (await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "cracked"})).status_code == 200


async def _unavailable(api: Api) -> None:
    device = {"device_id": "a1", "driver": "sim", "status": "unavailable"}
    assert (await api.heartbeat("host-a", [device])).status_code == 200


@pytest.mark.parametrize("change", [_drain, _disable, _unavailable], ids=["draining", "disabled", "unavailable"])
async def test_no_next_assignment_for_a_device_that_may_not_take_work(api: Api, change: Any) -> None:
    first = await running_task(api)
    waiting = (await api.create_task(device_id="a1")).json()
    await change(api)
    answer = await _eager(api, first)
    assert answer["next_assignment"] is None and answer["task_status"] == "succeeded"
    assert (await api.task(waiting["task_id"]))["status"] == "queued"


async def test_no_next_assignment_for_a_retryable_failure(api: Api) -> None:
    """The device or its agent going away (the agent stopping reports `shutdown`, retryable)."""
    first = await running_task(api)
    other = (await api.create_task(device_id="a1")).json()
    answer = await _eager(api, first, status="failed", failure_reason="shutdown", retryable=True)
    assert answer["next_assignment"] is None and answer["task_status"] == "queued"
    for task_id in (first["task_id"], other["task_id"]):
        assert (await api.task(task_id))["status"] in ("queued", "assigned")
    assert (await claim_one(api, "host-a"))["lease_id"] != first["lease_id"]


async def test_next_must_be_a_boolean(api: Api) -> None:
    first = await running_task(api)
    before = await redis_state(api)
    response = await api.result("host-a", first, next="yes")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    assert await redis_state(api) == before
