"""Task history, the feed's copy of it, device runs, and retryable failures (real Redis and
fakeredis)."""

from __future__ import annotations

import orjson
import pytest

import wire
from coordinator.reaper import upgrade_before_serving
from coordinator.state.scripts import DEVICE_RUNS_SLACK
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


def _types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


async def test_every_transition_is_in_the_history_in_order(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    first = await claim_one(api, "host-a")
    await expire_lease(api, first)
    await api.sweep()  # lease expired: attempt 2, back on a1 (still free after the requeue)
    second = await claim_one(api, "host-a")
    await api.admin("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
    assert (await api.result("host-a", second, "cancelled")).status_code == 200

    events = await api.events(task["task_id"])
    assert _types(events) == ["created", "assigned", "claimed", "requeued", "assigned", "claimed",
                              "cancel_requested", "result"]
    assert [e["attempt"] for e in events] == [1, 1, 1, 2, 2, 2, 2, 2]
    assert [e["status"] for e in events] == ["queued", "assigned", "running", "queued", "assigned", "running",
                                             "running", "cancelled"]
    assert events[3]["reason"] == "lease_expired" and events[3]["host_id"] == "host-a"
    assert all(e["task_id"] == task["task_id"] and e["at"].endswith("Z") for e in events)
    assert {e["device_id"] for e in events} == {"a1"}


async def test_the_feed_carries_the_same_events_as_the_history(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    await api.result("host-a", await claim_one(api, "host-a"))
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    fed = [orjson.loads(fields[b"e"]) for _, fields in await redis.xrange(keys.feed)]
    record = orjson.loads(await redis.hget(keys.tasks, task["task_id"]))
    # The feed's copy names the task and its team too (a watcher filters by either).
    history = [{**event, "task_id": task["task_id"], "team": "default"} for event in record["events"]]
    assert [e["type"] for e in history] == ["created", "assigned", "claimed", "result"]
    assert [e for e in fed if e.get("task_id") == task["task_id"]] == history
    assert fed[0]["type"] == "host_online" and fed[0]["host_id"] == "host-a"


async def test_history_keeps_the_last_200_events(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    redis, tasks_key = api.ctx.store.redis, api.ctx.store.keys.tasks
    record = orjson.loads(await redis.hget(tasks_key, task["task_id"]))
    # a full history of earlier events, each marked by its time
    record["events"] = [{"type": "progress", "task_id": task["task_id"], "attempt": 1, "at": n}
                        for n in range(wire.TASK_EVENTS_KEPT)]
    await redis.hset(tasks_key, task["task_id"], orjson.dumps(record))
    await claim_one(api, "host-a")
    events = await api.events(task["task_id"])
    assert len(events) == wire.TASK_EVENTS_KEPT
    assert events[-1]["type"] == "claimed" and events[0]["type"] == "progress"
    stored = orjson.loads(await redis.hget(tasks_key, task["task_id"]))["events"]
    assert len(stored) == wire.TASK_EVENTS_KEPT and stored[0]["at"] == 1  # the oldest dropped


async def test_events_of_an_unknown_task_are_404(api: Api) -> None:
    assert (await api.admin("GET", "/api/v1/tasks/t_nope/events")).status_code == 404
    assert (await api.admin("GET", "/api/v1/tasks/bad%20id/events")).status_code == 400


# -- device runs ---------------------------------------------------------------------------


async def test_device_history_records_each_run_newest_first(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    done = (await api.create_task(device_id="a1")).json()
    await api.result("host-a", await claim_one(api, "host-a"), "failed", failure_reason="boom")
    running = (await api.create_task(device_id="a1")).json()
    await claim_one(api, "host-a")

    response = await api.admin("GET", "/api/v1/devices/a1/history")
    runs = response.json()["runs"]
    assert [(r["task_id"], r["outcome"]) for r in runs] == [(running["task_id"], None), (done["task_id"], "failed")]
    assert runs[0]["ended_at"] is None and runs[1]["ended_at"] >= runs[1]["started_at"]
    assert all(r["host_id"] == "host-a" and r["attempt"] == 1 for r in runs)
    assert len((await api.admin("GET", "/api/v1/devices/a1/history?limit=1")).json()["runs"]) == 1


async def test_an_expired_run_is_closed_as_lease_expired(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1", max_attempts=1)
    assignment = await claim_one(api, "host-a")
    await expire_lease(api, assignment)
    await api.sweep()
    [run] = (await api.admin("GET", "/api/v1/devices/a1/history")).json()["runs"]
    assert run["outcome"] == "lease_expired"


async def test_device_history_keeps_the_last_1000_runs(api: Api) -> None:
    # Trimmed back to the 1,000 kept once it holds a batch more; reads never return more.
    await api.heartbeat("host-a", ["a1"])
    key = api.ctx.store.keys.device_runs("a1")
    old = orjson.dumps({"task_id": "t_old", "attempt": 1, "host_id": "host-a", "started_at": 1,
                        "ended_at": 2, "outcome": "succeeded"})
    await api.ctx.store.redis.rpush(key, *[old] * (wire.DEVICE_RUNS_KEPT + DEVICE_RUNS_SLACK - 1))
    tasks = []
    for held in (wire.DEVICE_RUNS_KEPT + DEVICE_RUNS_SLACK, wire.DEVICE_RUNS_KEPT):
        tasks.append((await api.create_task(device_id="a1")).json())
        await api.result("host-a", await claim_one(api, "host-a"))
        assert await api.ctx.store.redis.llen(key) == held
    runs = (await api.admin("GET", f"/api/v1/devices/a1/history?limit={wire.DEVICE_RUNS_KEPT}")).json()["runs"]
    assert len(runs) == wire.DEVICE_RUNS_KEPT and [r["task_id"] for r in runs[:2]] == [t["task_id"] for t in tasks[::-1]]
    assert runs[0]["outcome"] == "succeeded" and runs[2]["task_id"] == "t_old"
    assert (await api.admin("GET", "/api/v1/devices/a1/history?limit=1001")).status_code == 400


async def _one_run(api: Api, host: str = "host-a", device: str = "a1") -> None:
    await api.create_task(device_id=device)
    assert (await api.result(host, await claim_one(api, host))).status_code == 200


async def test_a_pooled_devices_runs_never_expire_and_an_unpooled_ones_do(api: Api) -> None:
    redis, key = api.ctx.store.redis, api.ctx.store.keys.device_runs("a1")
    retention_ms = api.ctx.settings.task_retention_ms
    await api.heartbeat("host-a", ["a1", "a2"])
    await _one_run(api)
    assert await redis.pttl(key) == -1
    await api.heartbeat("host-a", ["a2"])  # a1 left the pool: its runs are kept a retention
    assert 0 < await redis.pttl(key) <= retention_ms
    await api.heartbeat("host-a", ["a1", "a2"])  # back: kept for as long as it stays
    assert await redis.pttl(key) == -1


async def test_a_run_ending_after_its_device_left_the_pool_starts_a_list_that_expires(api: Api) -> None:
    redis, key = api.ctx.store.redis, api.ctx.store.keys.device_runs("a1")
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    await api.heartbeat("host-a", ["a2"])
    assert (await api.result("host-a", assignment)).status_code == 200
    assert await redis.llen(key) == 1
    assert 0 < await redis.pttl(key) <= api.ctx.settings.task_retention_ms


async def test_a_start_takes_off_the_expiry_earlier_versions_gave_pooled_devices_runs(api: Api) -> None:
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    assert await redis.hget(keys.upgrades, "device_runs") == b"done"  # this process's start did
    devices = ["a1", "a2", "a3"]
    await api.heartbeat("host-a", devices)
    for device in devices:
        await _one_run(api, device=device)
    # As an earlier version left them: each list with a retention's expiry, and no upgrade run.
    for device in devices:
        await redis.pexpire(keys.device_runs(device), api.ctx.settings.task_retention_ms)
    await redis.hdel(keys.upgrades, "device_runs")  # (the other upgrades' walks stay done)
    assert await upgrade_before_serving(api.ctx.store) == len(devices)
    assert [await redis.pttl(keys.device_runs(device)) for device in devices] == [-1] * len(devices)
    assert await upgrade_before_serving(api.ctx.store) == 0  # done: a later start walks nothing


async def test_history_of_a_device_nobody_knows_is_404(api: Api) -> None:
    assert (await api.admin("GET", "/api/v1/devices/ghost/history")).status_code == 404


# -- retryable failures --------------------------------------------------------------------


async def test_a_retryable_failure_requeues_as_the_next_attempt(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    task = (await api.create_task(selector={"driver": "sim"})).json()
    first = await claim_one(api, "host-a")
    answer = await api.result("host-a", first, "failed", failure_reason="device_gone", retryable=True)
    assert answer.status_code == 200, answer.text
    assert answer.json()["task_status"] == "queued" and answer.json()["replayed"] is False

    # The device that failed still counts as busy until its host says otherwise, so the retry
    # went to the other device.
    retried = await api.task(task["task_id"])
    assert retried["attempt"] == 2 and retried["status"] == "assigned"
    assert retried["device_id"] != first["device_id"] and retried["result"] is None
    events = await api.events(task["task_id"])
    assert _types(events)[-3:] == ["result", "requeued", "assigned"]
    assert events[-3]["status"] == "failed" and events[-3]["reason"] == "device_gone"
    assert events[-2]["reason"] == "retryable_failure" and events[-2]["attempt"] == 2

    # A lost response: the identical report is answered as before and changes nothing.
    again = await api.result("host-a", first, "failed", failure_reason="device_gone", retryable=True)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["task_status"] == "queued"
    assert (await api.task(task["task_id"]))["attempt"] == 2
    different = await api.result("host-a", first, "failed", failure_reason="other", retryable=True)
    assert different.status_code == 409 and different.json()["error"]["code"] == "result_conflict"

    second = await claim_one(api, "host-a")
    assert second["attempt"] == 2
    done = await api.result("host-a", second)
    assert done.json()["task_status"] == "succeeded"
    final = await api.task(task["task_id"])
    assert final["status"] == "succeeded" and final["result"]["attempt"] == 2


async def test_a_retryable_failure_on_the_last_attempt_fails_the_task(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1", max_attempts=1)).json()
    answer = await api.result("host-a", await claim_one(api, "host-a"), "failed",
                              failure_reason="shutdown", retryable=True)
    assert answer.json()["task_status"] == "failed"
    done = await api.task(task["task_id"])
    assert done["status"] == "failed" and done["result"]["failure_reason"] == "shutdown"


async def test_failures_not_marked_retryable_are_final(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    assert (await api.result("host-a", await claim_one(api, "host-a"), "failed",
                             failure_reason="driver_error")).json()["task_status"] == "failed"
    assert (await api.task(task["task_id"]))["status"] == "failed"
    # retryable on a success means nothing
    other = (await api.create_task(device_id="a1")).json()
    answer = await api.result("host-a", await claim_one(api, "host-a"), "succeeded", retryable=True)
    assert answer.json()["task_status"] == "succeeded"
    assert (await api.task(other["task_id"]))["status"] == "succeeded"


async def test_a_cancelled_task_is_never_retried(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    assignment = await claim_one(api, "host-a")
    await api.admin("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
    answer = await api.result("host-a", assignment, "failed", failure_reason="shutdown", retryable=True)
    assert answer.json()["task_status"] == "failed"
    assert (await api.task(task["task_id"]))["attempt"] == 1


async def test_retryable_must_be_a_boolean(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    bad = await api.result("host-a", assignment, "failed", retryable="yes")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert (await api.result("host-a", assignment, "failed", retryable=None)).json()["task_status"] == "failed"


async def test_new_progress_reaches_the_feed_once(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    assignment = await claim_one(api, "host-a")
    step = {"step_index": 2, "status": "running", "summary": "Opened Settings"}
    for _ in range(2):  # the same progress again is not news
        assert (await api.renew("host-a", assignment, progress=step)).status_code == 200
    await api.renew("host-a", assignment)  # none sent: the step stays what it was
    assert (await api.renew("host-a", assignment, progress=step)).status_code == 200
    await api.renew("host-a", assignment, progress={**step, "step_index": 3})
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    fed = [orjson.loads(f[b"e"]) for _, f in await redis.xrange(keys.feed)]
    progress = [e for e in fed if e["type"] == "progress"]
    assert [e["step_index"] for e in progress] == [2, 3]
    assert progress[0] == {**progress[0], "task_id": assignment["task_id"], "attempt": 1, "host_id": "host-a",
                           "device_id": "a1", "status": "running", "summary": "Opened Settings"}
    # the history keeps transitions only
    assert "progress" not in _types(await api.events(assignment["task_id"]))


@pytest.mark.parametrize("ending", ["retried", "succeeded"])
async def test_each_attempt_reports_its_progress_afresh(api: Api, ending: str) -> None:
    # A retried attempt's progress is gone with it: the next attempt's first step is news, even the
    # same one. An ended task shows none (it keeps its last one, unseen, until retention).
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1", max_attempts=2)
    step = {"step_index": 1, "status": "running", "summary": "Opened Settings"}
    first = await claim_one(api, "host-a")
    await api.renew("host-a", first, progress=step)
    extra = {"retryable": True} if ending == "retried" else {}
    await api.result("host-a", first, "failed" if ending == "retried" else "succeeded", **extra)
    task = await api.task(first["task_id"])
    assert task["progress"] is None
    if ending == "retried":
        second = await claim_one(api, "host-a")
        assert (await api.task(second["task_id"]))["progress"] is None
        await api.renew("host-a", second, progress=step)
        redis, keys = api.ctx.store.redis, api.ctx.store.keys
        fed = [orjson.loads(f[b"e"]) for _, f in await redis.xrange(keys.feed)]
        assert [e["attempt"] for e in fed if e["type"] == "progress"] == [1, 2]
