"""Spec scenarios: long-poll claims, lease renewal with progress, idempotent results."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease
from tests.support import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


async def test_assigned_work_is_available(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1", goal="Turn on airplane mode", max_steps=12)).json()
    assert task["status"] == "assigned" and task["host_id"] == "host-a"
    response = await api.claim("host-a")
    assert response.status_code == 200
    assignment = response.json()
    assert assignment["task_id"] == task["task_id"]
    assert assignment["attempt"] == 1
    assert assignment["device_id"] == "a1"
    assert assignment["kind"] == "goal" and assignment["goal"] == "Turn on airplane mode"
    assert assignment["max_steps"] == 12
    assert assignment["lease_ttl_ms"] == 30_000
    assert assignment["lease_id"] and assignment["lease_expires_at"].endswith("Z")
    assert (await api.task(task["task_id"]))["status"] == "running"
    # at most one assignment per response, and it is not handed out twice
    assert (await api.claim("host-a")).status_code == 204


async def test_workflow_assignment_carries_name_and_params(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(kind="workflow", workflow={"name": "login-smoke", "params": {"user": "x"}},
                          device_id="a1")
    assignment = await claim_one(api, "host-a")
    assert assignment["kind"] == "workflow"
    assert assignment["workflow"] == {"name": "login-smoke", "params": {"user": "x"}}
    assert "goal" not in assignment


async def test_no_work_becomes_available(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    response = await api.claim("host-a", wait_s=0.2)
    assert response.status_code == 204 and response.content == b""
    assert loop.time() - started >= 0.2
    assert api.ctx.waiter.waiting == 0


async def test_waiting_poll_wakes_when_work_is_assigned(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    poll = asyncio.ensure_future(api.claim("host-a", wait_s=10))
    await wait_until_async(lambda: api.ctx.waiter.waiting, what="the poll registered and waiting")
    task = (await api.create_task(device_id="a1")).json()
    response = await asyncio.wait_for(poll, 5)
    assert response.status_code == 200 and response.json()["task_id"] == task["task_id"]


async def test_claim_id_retry_returns_the_same_assignment(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.create_task(device_id="a1")
    await api.create_task(device_id="a2")
    first = await claim_one(api, "host-a", claim_id="c-1")
    again = await claim_one(api, "host-a", claim_id="c-1")
    assert again["lease_id"] == first["lease_id"] and again["task_id"] == first["task_id"]
    other = await claim_one(api, "host-a", claim_id="c-2")
    assert other["task_id"] != first["task_id"]
    assert (await api.claim("host-a", claim_id="c-3")).status_code == 204


async def test_claim_takes_the_oldest_assignment_first(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2", "a3"])
    created = [(await api.create_task(device_id=d)).json()["task_id"] for d in ("a3", "a1", "a2")]
    claimed = [(await claim_one(api, "host-a"))["task_id"] for _ in created]
    assert claimed == created


async def test_lease_renewal_succeeds(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    response = await api.renew("host-a", assignment)
    assert response.status_code == 200
    body = response.json()
    assert body["lease_ttl_ms"] == 30_000 and body["cancel_requested"] is False
    assert body["progress"] == "omitted"
    assert body["lease_expires_at"] >= assignment["lease_expires_at"]
    deadline = await api.ctx.store.redis.zscore(api.ctx.store.keys.lease_deadlines, assignment["task_id"])
    assert deadline is not None
    task = await api.task(assignment["task_id"])
    assert (task["attempt"], task["device_id"], task["status"]) == (1, "a1", "running")


async def test_lease_is_stale_or_foreign(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.heartbeat("host-b", ["b1"])
    task = (await api.create_task(device_id="a1")).json()
    first = await claim_one(api, "host-a")

    # foreign: host-b presents host-a's lease on its own path
    foreign = await api.client.post(
        f"/internal/v1/hosts/host-b/leases/{first['lease_id']}/renew",
        json={"task_id": first["task_id"], "attempt": 1}, headers=Api.host_headers("host-b"))
    assert foreign.status_code == 409 and foreign.json()["error"]["code"] == "lease_not_owned"
    unknown = await api.renew("host-a", {**first, "lease_id": "l_nope"})
    assert unknown.json()["error"]["code"] == "lease_not_owned"
    wrong_attempt = await api.renew("host-a", {**first, "attempt": 2})
    assert wrong_attempt.json()["error"]["code"] == "lease_not_owned"

    # expired: the deadline passed; the renewal does not revive it
    await expire_lease(api, first)
    expired = await api.renew("host-a", first)
    assert expired.status_code == 409 and expired.json()["error"]["code"] == "lease_expired"
    assert await api.ctx.store.redis.zscore(api.ctx.store.keys.lease_deadlines, first["task_id"]) == 0

    # replaced: the reaper requeued the task as attempt 2, which host-a claims again
    await api.sweep()
    second = await claim_one(api, "host-a")
    assert second["attempt"] == 2 and second["task_id"] == task["task_id"]
    replaced = await api.renew("host-a", first)
    assert replaced.status_code == 409 and replaced.json()["error"]["code"] == "lease_replaced"
    current = await api.task(task["task_id"])
    assert (current["attempt"], current["status"]) == (2, "running")
    assert (await api.renew("host-a", second)).status_code == 200


async def test_lease_expires_on_the_redis_clock(api_factory) -> None:
    async with api_factory(lease_ttl_s=0.2) as api:
        await api.heartbeat("host-a", ["a1"])
        await api.create_task(device_id="a1")
        assignment = await claim_one(api, "host-a")
        renewed = await api.renew("host-a", assignment)
        assert renewed.status_code == 200
        deadline = await api.ctx.store.redis.zscore(api.ctx.store.keys.lease_deadlines, assignment["task_id"])

        async def redis_clock_past_deadline() -> bool:
            return await api.ctx.queries.redis_time_ms() > deadline

        await wait_until_async(redis_clock_past_deadline, what="the Redis clock past the renewed deadline")
        response = await api.renew("host-a", assignment)
        assert response.status_code == 409 and response.json()["error"]["code"] == "lease_expired"
        assert (await api.sweep())["leases"] == 1
        assert (await api.task(assignment["task_id"]))["attempt"] == 2


async def test_progress_is_available_at_renewal_time(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    first = {"step_index": 1, "status": "running", "summary": "Opened Settings"}
    second = {"step_index": 2, "status": "running", "summary": "Tapped Airplane mode"}
    assert (await api.renew("host-a", assignment, progress=first)).json()["progress"] == "stored"
    assert (await api.task(assignment["task_id"]))["progress"] == first
    assert (await api.renew("host-a", assignment, progress=second)).json()["progress"] == "stored"
    assert (await api.task(assignment["task_id"]))["progress"] == second


async def test_progress_is_not_available_at_renewal_time(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    assert (await api.renew("host-a", assignment)).json()["progress"] == "omitted"
    assert (await api.task(assignment["task_id"]))["progress"] is None
    progress = {"step_index": 0, "status": "running", "summary": "Observed home screen"}
    await api.renew("host-a", assignment, progress=progress)
    for omitted in ({}, {"progress": None}):
        response = await api.renew("host-a", assignment, **omitted)
        assert response.json()["progress"] == "omitted"
        assert (await api.task(assignment["task_id"]))["progress"] == progress


async def test_renewal_request_includes_an_oversized_or_non_text_summary(api_factory) -> None:
    async with api_factory(progress_summary_max_chars=20) as api:
        await api.heartbeat("host-a", ["a1"])
        await api.create_task(device_id="a1")
        assignment = await claim_one(api, "host-a")
        good = {"step_index": 1, "status": "running", "summary": "ok"}
        await api.renew("host-a", assignment, progress=good)

        long = {"step_index": 2, "status": "running", "summary": "x" * 500}
        response = await api.renew("host-a", assignment, progress=long)
        assert response.status_code == 200 and response.json()["progress"] == "truncated"
        assert (await api.task(assignment["task_id"]))["progress"] == {**long, "summary": "x" * 20}

        stored = (await api.task(assignment["task_id"]))["progress"]
        for bad in (
            {"step_index": 3, "status": "running", "summary": "s", "screenshot": "iVBORw0KGgo="},
            {"step_index": 3, "status": "running", "summary": "s", "scene": {"nodes": []}},
            {"step_index": 3, "status": "running", "summary": {"text": "not text"}},
            {"step_index": 3, "status": "running", "summary": 42},
            {"step_index": "3", "status": "running", "summary": "s"},
            {"step_index": True, "status": "running", "summary": "s"},
            {"step_index": -1, "status": "running", "summary": "s"},
            {"status": "running", "summary": "s"},
            {"step_index": 3, "status": "r" * 100, "summary": "s"},
            "a string",
            [1, 2],
        ):
            response = await api.renew("host-a", assignment, progress=bad)
            assert response.status_code == 200, bad
            assert response.json()["progress"] == "rejected", bad
            assert (await api.task(assignment["task_id"]))["progress"] == stored


async def test_assignment_reaches_a_terminal_state(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    await api.renew("host-a", assignment, progress={"step_index": 4, "status": "running", "summary": "s"})
    assert (await api.result("host-a", assignment)).status_code == 200
    task = await api.task(assignment["task_id"])
    assert task["status"] == "succeeded" and task["progress"] is None
    listed = (await api.client.get("/api/v1/tasks", headers=api.admin_headers)).json()["tasks"]
    assert listed[0]["progress"] is None
    # and the lease is over
    assert (await api.renew("host-a", assignment)).json()["error"]["code"] == "lease_expired"


async def test_report_a_successful_result(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    waiting = (await api.create_task(device_id="a1")).json()
    assert waiting["status"] == "queued"
    assignment = await claim_one(api, "host-a")
    response = await api.result("host-a", assignment, metadata={"steps": 7})
    assert response.status_code == 200
    body = response.json()
    assert body["task_id"] == assignment["task_id"] and body["attempt"] == 1
    assert body["status"] == "succeeded" and body["replayed"] is False and body["recorded_at"].endswith("Z")
    task = await api.task(assignment["task_id"])
    assert task["status"] == "succeeded"
    assert task["result"] == {"status": "succeeded", "failure_reason": None, "metadata": {"steps": 7},
                              "attempt": 1, "recorded_at": body["recorded_at"]}
    # the device reservation was released: the waiting task took the device
    devices = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert devices[0]["reserved_by"] == waiting["task_id"]
    assert (await api.task(waiting["task_id"]))["status"] == "assigned"


async def test_failed_result_records_the_reason(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    response = await api.result("host-a", assignment, status="failed", failure_reason="max_steps_exceeded")
    assert response.status_code == 200
    task = await api.task(assignment["task_id"])
    assert task["status"] == "failed" and task["failure_reason"] == "max_steps_exceeded"
    assert task["attempt"] == 1  # a reported failure is final, not retried


async def test_retry_a_result_after_response_loss(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    first = (await api.result("host-a", assignment)).json()
    task_before = await api.task(assignment["task_id"])
    again = await api.result("host-a", assignment)
    assert again.status_code == 200
    assert again.json() == {**first, "replayed": True}
    assert await api.task(assignment["task_id"]) == task_before
    different = await api.result("host-a", assignment, status="failed", failure_reason="oops")
    assert different.status_code == 409 and different.json()["error"]["code"] == "result_conflict"
    assert await api.task(assignment["task_id"]) == task_before


async def test_stale_attempt_reports_after_requeue(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.heartbeat("host-b", ["b1"])
    task = (await api.create_task(selector={"driver": "sim"})).json()
    host = task["host_id"]
    other = "host-b" if host == "host-a" else "host-a"
    first = await claim_one(api, host)
    await expire_lease(api, first)
    assert (await api.sweep())["leases"] == 1
    requeued = await api.task(task["task_id"])
    assert requeued["attempt"] == 2
    # attempt 2 went to the other host's free device, not behind the stale one
    assert requeued["host_id"] == other
    second = await claim_one(api, other)
    progress = {"step_index": 1, "status": "running", "summary": "attempt two"}
    await api.renew(other, second, progress=progress)

    stale = await api.result(host, first)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_attempt"
    after = await api.task(task["task_id"])
    assert (after["status"], after["attempt"], after["progress"]) == ("running", 2, progress)
    assert (await api.result(other, second)).status_code == 200


async def test_result_from_another_host_is_not_owned(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    response = await api.result("host-b", assignment)
    assert response.status_code == 409 and response.json()["error"]["code"] == "lease_not_owned"
    assert (await api.task(assignment["task_id"]))["status"] == "running"


async def test_lease_expiry_past_max_attempts_fails_the_task(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1", max_attempts=2)).json()
    for attempt in (1, 2):
        assignment = await claim_one(api, "host-a")
        assert assignment["attempt"] == attempt
        await expire_lease(api, assignment)
        await api.sweep()
        # the agent reports the device idle again (an expired lease does not mark it available)
        await api.heartbeat("host-a", [{"device_id": "a1", "driver": "sim", "status": "busy"}])
        await api.heartbeat("host-a", ["a1"])
    final = await api.task(task["task_id"])
    assert (final["status"], final["failure_reason"], final["attempt"]) == ("failed", "lease_expired", 2)
    assert final["result"]["failure_reason"] == "lease_expired"
    late = await api.result("host-a", assignment)
    assert late.status_code == 409 and late.json()["error"]["code"] == "lease_expired"
    devices = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert devices[0]["reserved_by"] is None


async def test_result_after_deadline_but_before_requeue_is_recorded(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    await expire_lease(api, assignment)
    assert (await api.result("host-a", assignment)).status_code == 200
    assert (await api.sweep())["leases"] == 0
    assert (await api.task(assignment["task_id"]))["status"] == "succeeded"
