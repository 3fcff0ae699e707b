"""Paginated listings with filters, waiting reasons, and the deployment-wide metrics (real Redis
and fakeredis)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from coordinator.state.keys import STATUS_CODES, STATUS_SPAN
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, silence_host
from tests.support import unique_prefix

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


async def _walk(api: Api, path: str, field: str, **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every item of a listing, following next_cursor; and how many pages it took."""
    items: list[dict[str, Any]] = []
    pages = 0
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await api.admin("GET", path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        items += body[field]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return items, pages


async def test_tasks_page_newest_first_with_filters(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.heartbeat("host-b", ["b1"])
    created = [(await api.create_task(device_id=d)).json()["task_id"] for d in ["a1", "a2", "b1", "a1", "zz"] * 3]

    everything, pages = await _walk(api, "/api/v1/tasks", "tasks", limit=4)
    assert [t["task_id"] for t in everything] == created[::-1] and pages == 4
    on_a, _ = await _walk(api, "/api/v1/tasks", "tasks", host_id="host-a", limit=2)
    assert {t["host_id"] for t in on_a} == {"host-a"} and len(on_a) == 2  # a1 and a2 hold one each
    aimed_at_a1, _ = await _walk(api, "/api/v1/tasks", "tasks", device_id="a1", limit=2)
    assert len(aimed_at_a1) == 6 and {t["device_id"] for t in aimed_at_a1} == {"a1"}
    queued, _ = await _walk(api, "/api/v1/tasks", "tasks", status="queued", device_id="zz")
    assert len(queued) == 3 and all(t["waiting_reason"] == "no_matching_device" for t in queued)
    for bad in ({"status": "lost"}, {"limit": 0}, {"limit": 501}, {"cursor": "x"}, {"host_id": "a b"}):
        assert (await api.admin("GET", "/api/v1/tasks", params=bad)).status_code == 400, bad


async def test_devices_page_in_order_with_filters(api: Api) -> None:
    await api.heartbeat("host-a", [f"a{i}" for i in range(5)] + [
        {"device_id": "x1", "driver": "adb", "status": "busy"}])
    await api.heartbeat("host-b", ["b1", {"device_id": "b2", "driver": "sim", "status": "unavailable"}])

    everything, pages = await _walk(api, "/api/v1/devices", "devices", limit=3)
    ids = [d["device_id"] for d in everything]
    assert ids == ["x1", "a0", "a1", "a2", "a3", "a4", "b1", "b2"] and pages == 3  # driver, then id
    on_b, _ = await _walk(api, "/api/v1/devices", "devices", host_id="host-b", limit=1)
    assert [d["device_id"] for d in on_b] == ["b1", "b2"]
    adb, _ = await _walk(api, "/api/v1/devices", "devices", driver="adb")
    assert [d["device_id"] for d in adb] == ["x1"]
    unavailable, _ = await _walk(api, "/api/v1/devices", "devices", status="unavailable", limit=1)
    assert [d["device_id"] for d in unavailable] == ["b2"]
    available_on_a, _ = await _walk(api, "/api/v1/devices", "devices", host_id="host-a", status="available", limit=2)
    assert len(available_on_a) == 5
    for bad in ({"status": "gone"}, {"limit": 1001}, {"driver": "?"}):
        assert (await api.admin("GET", "/api/v1/devices", params=bad)).status_code == 400, bad


async def test_hosts_page_including_static_hosts_never_seen(api: Api) -> None:
    await api.heartbeat("host-b", ["b1"])
    everything, _ = await _walk(api, "/api/v1/hosts", "hosts", limit=1)
    # host-a, host-b and host-c are configured (tests' HOSTS); only host-b has reported
    assert [(h["host_id"], h["online"], h["draining"]) for h in everything] == [
        ("host-a", False, False), ("host-b", True, False), ("host-c", False, False)]


async def test_enrollment_tokens_page_under_their_own_key(api: Api) -> None:
    made = [(await api.admin("POST", "/api/v1/enrollment-tokens", json={})).json()["id"] for _ in range(5)]
    listed, pages = await _walk(api, "/api/v1/enrollment-tokens", "enrollment_tokens", limit=2)
    assert [t["id"] for t in listed] == made and pages == 3
    assert all("token" not in t for t in listed)


# -- waiting reasons -----------------------------------------------------------------------


async def test_waiting_reasons_and_candidates(api: Api) -> None:
    nothing = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "gold"}})).json()
    assert nothing["waiting_reason"] == "no_matching_device"
    assert nothing["candidates"]["matching"] == 0

    gold = {"driver": "sim", "status": "available", "labels": {"tier": "gold"}}
    await api.heartbeat("host-a", [{**gold, "device_id": "g1"}, {**gold, "device_id": "g2"}, "plain"])
    # both gold devices took tasks: the first waiting one and a new one
    busy_one = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "gold"}})).json()
    assert busy_one["status"] == "assigned"
    waiting = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "gold"}})).json()
    assert waiting["waiting_reason"] == "matching_devices_busy"
    assert waiting["candidates"] == {"matching": 2, "busy": 2, "unavailable": 0, "host_offline": 0,
                                     "host_draining": 0, "disabled": 0, "host_stalled": 0,
                                     "no_workflow": 0, "team_at_quota": False}

    await silence_host(api, "host-a")
    offline = await api.task(waiting["task_id"])
    assert offline["waiting_reason"] == "no_schedulable_device"
    assert offline["candidates"]["host_offline"] == 2

    aimed = (await api.create_task(device_id="plain")).json()
    assert aimed["candidates"]["matching"] == 1 and aimed["candidates"]["host_offline"] == 1
    assert (await api.task(busy_one["task_id"]))["waiting_reason"] is None  # not queued


async def test_a_queued_tasks_candidates_are_the_same_from_its_create_and_from_a_read(
        api_factory: Callable[..., Any]) -> None:
    """The create step reads the candidates of the task it queued (createTask), a later read reads
    them again (readWaiting): both see every reason a device is kept from work, and both stop at
    the scan limit."""
    def gold(device_id: str, **fields: Any) -> dict[str, Any]:
        return {"device_id": device_id, "driver": "sim", "status": "available", "labels": {"tier": "gold"}, **fields}

    # Two processes of one deployment: one scanning the default 1,000 devices, one only three.
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as api, api_factory(prefix=prefix, candidates_scanned=3) as three:
        await api.heartbeat("host-a", [gold("busy1"), gold("off1", status="unavailable"), gold("dis1"),
                                       gold("tin1", labels={"tier": "tin"})])
        await api.heartbeat("host-b", [gold("drain1")])
        await api.heartbeat("host-c", [gold("gone1")])
        assert (await api.create_task(device_id="busy1")).json()["status"] == "assigned"
        assert (await api.admin("POST", "/api/v1/devices/dis1/disable", json={"reason": "cracked"})).status_code == 200
        assert (await api.admin("POST", "/api/v1/hosts/host-b/drain")).status_code == 200
        await silence_host(api, "host-c")

        created = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "gold"}})).json()
        assert created["status"] == "queued" and created["waiting_reason"] == "matching_devices_busy"
        assert created["candidates"] == {"matching": 5, "busy": 1, "unavailable": 1, "host_offline": 1,
                                         "host_draining": 1, "disabled": 1, "host_stalled": 0,
                                         "no_workflow": 0, "team_at_quota": False}
        assert (await api.task(created["task_id"]))["candidates"] == created["candidates"]

        # Past the limit, in device-id order: busy1, dis1, drain1 of the six sim devices.
        capped = (await three.create_task(selector={"driver": "sim", "labels": {"tier": "gold"}})).json()
        assert capped["candidates"] == {"matching": 3, "busy": 1, "unavailable": 0, "host_offline": 0,
                                        "host_draining": 1, "disabled": 1, "host_stalled": 0, "no_workflow": 0,
                                        "truncated": True, "team_at_quota": False}
        assert (await three.task(capped["task_id"]))["candidates"] == capped["candidates"]


# -- metrics -------------------------------------------------------------------------------


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_metrics_show_the_deployment(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    await api.create_task(device_id="nowhere")
    await api.result("host-a", await claim_one(api, "host-a"), "failed", failure_reason="x", retryable=True)

    text = (await api.client.get("/metrics")).text
    assert _sample(text, 'tether_tasks{status="queued"}') == 1
    assert _sample(text, 'tether_tasks{status="assigned"}') == 1  # the retry, back on a1
    assert _sample(text, 'tether_queued_tasks_by_reason{reason="no_matching_device"}') == 1
    assert _sample(text, "tether_retries_total") == 1
    assert _sample(text, "tether_schedule_to_start_seconds_count") == 1
    assert _sample(text, "tether_feed_watchers") == 0
    assert _sample(text, "tether_queue_timeouts_total") == 0


async def test_a_reaper_pass_upgrades_the_earlier_status_index(api: Api) -> None:
    """The earlier layout held "status\\0seq\\0id" members at score 0: one pass rewrites them, and the
    listing, counts and order are as if they had been written in the current layout."""
    # The app's own reaper sweeps once as it starts: stopped, so only this test's passes run.
    reaper = next(task for task in asyncio.all_tasks() if task.get_name() == "reaper")
    reaper.cancel()
    await asyncio.gather(reaper, return_exceptions=True)
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    await api.heartbeat("host-a", ["a1"])
    created = [(await api.create_task(device_id=d)).json()["task_id"] for d in ("a1", "zz", "a1")]
    before = await redis.zrange(keys.tasks_by_status, 0, -1, withscores=True)
    earlier = {}
    for task_id, score in before:
        status = {code: name for name, code in STATUS_CODES.items()}[int(score) // STATUS_SPAN]
        earlier[f"{status}\0{int(score) % STATUS_SPAN:016d}\0{task_id.decode()}"] = 0
    await redis.delete(keys.tasks_by_status)
    await redis.zadd(keys.tasks_by_status, earlier)
    assert (await api.admin("GET", "/api/v1/tasks")).json()["tasks"] == []  # the old entries are invisible

    assert (await api.sweep())["upgraded"] == 3
    assert await redis.zrange(keys.tasks_by_status, 0, -1, withscores=True) == before
    listed = (await api.admin("GET", "/api/v1/tasks")).json()["tasks"]
    assert [t["task_id"] for t in listed] == created[::-1]
    assert (await api.sweep())["upgraded"] == 0
