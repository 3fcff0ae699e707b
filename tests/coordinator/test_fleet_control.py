"""Operators steering the fleet: drain, disable, forget, and reading one device (real Redis and
fakeredis)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import orjson
import pytest

from coordinator.api.auth import HostPrincipal
from coordinator.state.store import Store
from tests.conftest import Api
from tests.coordinator.helpers import claim_one, enrolled_host

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


# -- drain ---------------------------------------------------------------------------------


async def test_a_drained_host_gets_no_new_work_and_finishes_what_runs(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    running = (await api.create_task(device_id="a1")).json()
    assignment = await claim_one(api, "host-a")
    unclaimed = (await api.create_task(device_id="a2")).json()
    assert unclaimed["status"] == "assigned"

    drained = await api.admin("POST", "/api/v1/hosts/host-a/drain")
    assert drained.status_code == 200 and drained.json()["draining"] is True
    # the unclaimed assignment went back to the queue, and waits with a reason
    waiting = await api.task(unclaimed["task_id"])
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_schedulable_device"
    assert waiting["candidates"]["host_draining"] == 1
    assert (await api.events(unclaimed["task_id"]))[-1] == {
        **(await api.events(unclaimed["task_id"]))[-1], "type": "unassigned", "reason": "drain"}
    # heartbeats go on and say so; polls find nothing; the running task finishes
    answer = await api.heartbeat("host-a", ["a1", "a2"])
    assert answer.json()["draining"] is True
    assert (await api.claim("host-a")).status_code == 204
    assert (await api.renew("host-a", assignment)).status_code == 200
    assert (await api.result("host-a", assignment)).status_code == 200
    assert (await api.task(running["task_id"]))["status"] == "succeeded"
    assert (await api.claim("host-a")).status_code == 204  # the freed device takes nothing either

    # idempotent
    assert (await api.admin("POST", "/api/v1/hosts/host-a/drain")).json()["draining"] is True
    undrained = await api.admin("POST", "/api/v1/hosts/host-a/undrain")
    assert undrained.json()["draining"] is False
    assert (await claim_one(api, "host-a"))["task_id"] == unclaimed["task_id"]
    assert (await api.heartbeat("host-a", ["a1", "a2"])).json()["draining"] is False


@pytest.mark.parametrize(("per_call", "listed"), [(None, ["checkout"]), (1, ["checkout"]), (2, None)])
async def test_a_reaper_pass_moves_the_earlier_layout_of_host_standing(
        api: Api, per_call: int | None, listed: list[str] | None) -> None:
    """The earlier layout kept drains, stalls and capabilities in three keys of the deployment: one
    pass moves them into each host's state (or calls of a few entries each, until none is left; the
    call that moves the last gives the online hosts their last heartbeat, whichever key it was
    in), and the hosts stand as before, online included."""
    # The app's own reaper sweeps once as it starts: stopped, so only this test's passes run.
    reaper = next(task for task in asyncio.all_tasks() if task.get_name() == "reaper")
    reaper.cancel()
    await asyncio.gather(reaper, return_exceptions=True)
    redis, keys = api.ctx.store.redis, api.ctx.store.keys
    agent = {"version": "0.1.0", "capabilities": {"workflows": listed, "planners": []}} if listed else None
    await api.heartbeat("host-a", ["a1"], agent=agent)
    await api.heartbeat("host-b", ["b1"])
    assert (await api.admin("POST", "/api/v1/hosts/host-a/drain")).json()["draining"] is True
    states = {h: await redis.hgetall(keys.host_state(h)) for h in ("host-a", "host-b")}
    assert set(states["host-a"]) == {b"seen", b"draining"} | ({b"capabilities"} if listed else set())
    assert set(states["host-b"]) == {b"seen"}
    # As the earlier layout held them (a stall too, which has no request of its own to make it):
    await redis.delete(keys.host_state("host-a"), keys.host_state("host-b"))
    await redis.sadd(keys.base + "hosts_draining", "host-a")
    await redis.sadd(keys.base + "hosts_stalled", "host-b")
    if listed:
        await redis.hset(keys.base + "host_capabilities", "host-a", states["host-a"][b"capabilities"])

    entries = 3 if listed else 2
    if per_call is None:
        assert (await api.sweep())["upgraded_hosts"] == entries
    else:
        calls = -(-entries // per_call) + 1
        moved = [await api.ctx.store.upgrade_host_state(per_call) for _ in range(calls)]
        assert sum(moved) == entries and moved[-1] == 0
    states["host-b"][b"stalled"] = b"1"
    assert {h: await redis.hgetall(keys.host_state(h)) for h in ("host-a", "host-b")} == states
    assert not await redis.exists(keys.base + "hosts_draining", keys.base + "hosts_stalled",
                                  keys.base + "host_capabilities")
    waiting = (await api.create_task(device_id="a1")).json()
    assert waiting["status"] == "queued" and waiting["candidates"]["host_draining"] == 1
    assert (await api.sweep())["upgraded_hosts"] == 0


async def test_drain_of_an_unknown_host_is_404(api: Api) -> None:
    assert (await api.admin("POST", "/api/v1/hosts/nobody/drain")).status_code == 404
    # a configured static host never seen can be drained before it ever reports
    assert (await api.admin("POST", "/api/v1/hosts/host-b/drain")).json()["draining"] is True
    await api.heartbeat("host-b", ["b1"])
    assert (await api.create_task(device_id="b1")).json()["status"] == "queued"


def _host(host_id: str) -> HostPrincipal:
    return HostPrincipal(host_id=host_id, kind="static", digest="d-" + host_id)


async def test_drain_racing_claims_never_hands_out_work_after_the_drain(store: Store) -> None:
    """Drain and claim are each one script: a claim either ran first (and the task runs on the
    host) or after (and finds nothing; the task is back in the queue). Never both, never lost."""
    snapshot = '{"agent":{},"devices":[{"attributes":"{}","device_id":"d1","driver":"sim","labels":"{}","status":"available"}]}'
    outcomes = set()
    for round_ in range(24):
        await store.set_host_draining("h1", False)
        await store.heartbeat(_host("h1"), snapshot)
        task = (await store.create_task({"id": "t_" + secrets.token_hex(6), "kind": "goal", "goal": "g",
                                         "max_attempts": 3, "target_device": "d1", "request_hash": "h"})).task
        assert task.status == "assigned"
        claim = store.claim(_host("h1"), "", "l_" + secrets.token_hex(6), 30_000)
        drain = store.set_host_draining("h1", True)
        if round_ % 2:  # either may reach Redis first
            claimed, _ = await asyncio.gather(claim, drain)
        else:
            _, claimed = await asyncio.gather(drain, claim)
        status = orjson.loads(await store.redis.hget(store.keys.tasks, task.id))["status"]
        if claimed is not None:
            assert claimed.assignment["task_id"] == task.id and status == "running"
            outcomes.add("claimed first")
            await store.record_result(_host("h1"), task.id, 1, claimed.assignment["lease_id"],
                                      '{"failure_reason":null,"metadata":{},"status":"succeeded"}')
        else:
            assert status == "queued"
            assert await store.redis.llen(store.keys.assigned("h1")) == 0
            outcomes.add("drained first")
            await store.cancel_task(task.id)
        # the device is reported idle again for the next round
        await store.heartbeat(_host("h1"), '{"agent":{},"devices":[]}')
    assert outcomes


# -- disable and enable --------------------------------------------------------------------


async def test_a_disabled_device_gets_no_work_across_heartbeats(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    assigned = (await api.create_task(device_id="a1")).json()
    response = await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "cracked screen"})
    assert response.status_code == 200
    device = response.json()
    assert device["disabled"] is True and device["disabled_reason"] == "cracked screen"
    assert device["reserved_by"] is None

    waiting = await api.task(assigned["task_id"])
    assert waiting["status"] == "queued" and waiting["candidates"]["disabled"] == 1
    assert (await api.events(assigned["task_id"]))[-1]["reason"] == "disable"
    await api.heartbeat("host-a", [{"device_id": "a1", "driver": "sim", "status": "busy"}])
    await api.heartbeat("host-a", ["a1"])
    assert (await api.admin("GET", "/api/v1/devices/a1")).json()["disabled"] is True
    assert (await api.claim("host-a")).status_code == 204

    again = await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "still cracked"})
    assert again.json()["disabled_reason"] == "still cracked"
    enabled = await api.admin("POST", "/api/v1/devices/a1/enable")
    assert enabled.json()["disabled"] is False and enabled.json()["reserved_by"] == assigned["task_id"]
    assert (await claim_one(api, "host-a"))["task_id"] == assigned["task_id"]


async def test_disabling_a_running_device_lets_the_run_finish(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    assignment = await claim_one(api, "host-a")
    await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "after this one"})
    assert (await api.renew("host-a", assignment)).status_code == 200
    assert (await api.result("host-a", assignment)).status_code == 200
    assert (await api.task(task["task_id"]))["status"] == "succeeded"
    assert (await api.create_task(device_id="a1")).json()["status"] == "queued"


async def test_disable_checks_its_input(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    assert (await api.admin("POST", "/api/v1/devices/ghost/disable", json={})).status_code == 404
    too_long = await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "x" * 300})
    assert too_long.status_code == 400
    assert (await api.admin("GET", "/api/v1/devices/a1")).json()["disabled"] is False


async def test_disable_and_drain_reach_the_feed(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "r"})
    await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "r"})  # no second event
    await api.admin("POST", "/api/v1/devices/a1/enable")
    await api.admin("POST", "/api/v1/hosts/host-a/drain")
    await api.admin("POST", "/api/v1/hosts/host-a/undrain")
    await api.admin("POST", "/api/v1/hosts/host-a/revoke")
    fed = [orjson.loads(f[b"e"]) for _, f in await api.ctx.store.redis.xrange(api.ctx.store.keys.feed)]
    assert [(e["type"], e.get("draining")) for e in fed] == [
        ("host_online", None), ("device_disabled", None), ("device_enabled", None),
        ("host_draining", True), ("host_draining", False), ("host_revoked", None)]
    assert fed[1]["device_id"] == "a1" and fed[1]["reason"] == "r" and fed[1]["host_id"] == "host-a"


# -- one device, and forgetting one ----------------------------------------------------------


async def test_one_device(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    device = (await api.admin("GET", "/api/v1/devices/a1")).json()
    assert device["device_id"] == "a1" and device["reserved_by"] == task["task_id"] and device["host_online"]
    assert (await api.admin("GET", "/api/v1/devices/ghost")).status_code == 404


async def _enroll_device(api: Api, headers: dict[str, str], host_id: str, local_id: str = "emulator-5554") -> str:
    response = await api.client.post(f"/internal/v1/hosts/{host_id}/devices/enroll", headers=headers,
                                     json={"devices": [{"local_id": local_id, "driver": "adb"}]})
    assert response.status_code == 200, response.text
    return response.json()["devices"][0]["device_id"]


async def _heartbeat(api: Api, headers: dict[str, str], host_id: str, *device_ids: str) -> Any:
    return await api.client.put(f"/internal/v1/hosts/{host_id}/heartbeat", headers=headers, json={
        "devices": [{"device_id": d, "driver": "adb", "status": "available"} for d in device_ids]})


async def test_forgetting_a_device_retires_its_id(api: Api) -> None:
    host_id, headers = await enrolled_host(api)
    device_id = await _enroll_device(api, headers, host_id)
    other = await _enroll_device(api, headers, host_id, "emulator-5556")
    assert (await _heartbeat(api, headers, host_id, device_id, other)).status_code == 200

    busy = (await api.create_task(device_id=device_id)).json()
    refused = await api.admin("DELETE", f"/api/v1/devices/{device_id}")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "device_busy"
    await api.admin("POST", f"/api/v1/tasks/{busy['task_id']}/cancel")

    assert (await api.admin("DELETE", f"/api/v1/devices/{device_id}")).status_code == 200
    assert (await api.admin("GET", f"/api/v1/devices/{device_id}")).status_code == 404
    assert (await api.admin("DELETE", f"/api/v1/devices/{device_id}")).status_code == 404
    # the host still reporting it is told, and changes nothing
    stale = await _heartbeat(api, headers, host_id, device_id, other)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "unknown_device"
    # enrolling the local device again gives it a new id, which pools
    renewed = await _enroll_device(api, headers, host_id)
    assert renewed != device_id
    assert (await _heartbeat(api, headers, host_id, renewed, other)).status_code == 200
    host = (await api.admin("GET", f"/api/v1/hosts/{host_id}")).json()
    assert host["devices"] == 2
    assert (await api.admin("GET", f"/api/v1/devices/{renewed}")).json()["host_online"] is True


async def test_a_static_hosts_device_cannot_be_forgotten(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    response = await api.admin("DELETE", "/api/v1/devices/a1")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert (await api.admin("GET", "/api/v1/devices/a1")).status_code == 200
