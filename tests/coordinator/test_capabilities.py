"""Hosts say what they can run (PROTOCOL.md, heartbeat `agent.capabilities`, "Waiting work"): a
workflow task goes only to a device whose host lists the workflow or lists nothing (older agents);
`candidates.no_workflow` and `no_capable_host` say why one waits; a heartbeat that newly lists the
workflow places it at once. Real Redis, fakeredis and a Redis Cluster."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import silence_host

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


def runs(*workflows: str) -> dict[str, Any]:
    """An agent block listing these workflows (and the scripted planner)."""
    return {"version": "0.1.0", "hostname": "lab", "capabilities": {"workflows": list(workflows),
                                                                     "planners": ["scripted"]}}


def workflow_task(name: str = "note-smoke", **target: Any) -> dict[str, Any]:
    return {"kind": "workflow", "workflow": {"name": name, "params": {}}, **(target or {"selector": {"driver": "sim"}})}


async def test_a_host_that_sends_no_capabilities_runs_any_workflow(api: Api) -> None:
    """Agents older than capabilities keep working as before."""
    assert (await api.heartbeat("host-a", ["a1"])).status_code == 200
    task = (await api.create_task(**workflow_task("anything-at-all"))).json()
    assert task["status"] == "assigned" and task["device_id"] == "a1"


async def test_a_workflow_task_goes_only_to_a_host_that_lists_it(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"], agent=runs("settings-tour"))
    await api.heartbeat("host-b", ["b1"], agent=runs("note-smoke"))
    task = (await api.create_task(**workflow_task("note-smoke"))).json()
    assert task["status"] == "assigned" and task["host_id"] == "host-b"
    waiting = (await api.create_task(**workflow_task("note-smoke"))).json()
    assert waiting["status"] == "queued", "a1's host does not list note-smoke: a1 stays free"
    assert waiting["candidates"]["no_workflow"] == 1 and waiting["candidates"]["busy"] == 1
    assert waiting["waiting_reason"] == "matching_devices_busy"
    # a goal runs on any host, capabilities or not
    goal = (await api.create_task(kind="goal", goal="Turn on airplane mode", selector={"driver": "sim"})).json()
    assert goal["status"] == "assigned" and goal["device_id"] == "a1"


async def test_no_capable_host_when_matching_devices_are_on_hosts_without_the_workflow(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"], agent=runs())
    created = (await api.create_task(**workflow_task("note-smoke"))).json()
    aimed = (await api.create_task(**workflow_task("note-smoke", device_id="a2"))).json()
    for task in (created, aimed, await api.task(created["task_id"]), await api.task(aimed["task_id"])):
        assert task["status"] == "queued"
        assert task["waiting_reason"] == "no_capable_host", task
        assert task["candidates"]["no_workflow"] == task["candidates"]["matching"] > 0
    listed = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert {d["device_id"]: d["reserved_by"] for d in listed} == {"a1": None, "a2": None}
    # nothing matches at all: no_matching_device comes first
    none = (await api.create_task(**workflow_task("note-smoke", selector={"driver": "ios"}))).json()
    assert none["waiting_reason"] == "no_matching_device"


async def test_a_heartbeat_that_newly_lists_the_workflow_places_the_waiting_tasks(api: Api) -> None:
    """The device was free all along; only the host's capabilities changed."""
    await api.heartbeat("host-a", ["a1", "a2"], agent=runs("home-smoke"))
    by_selector = (await api.create_task(**workflow_task("note-smoke"))).json()
    by_device = (await api.create_task(**workflow_task("note-smoke", device_id="a2"))).json()
    assert (by_selector["status"], by_device["status"]) == ("queued", "queued")
    await api.heartbeat("host-a", ["a1", "a2"], agent=runs("home-smoke", "note-smoke"))
    placed = [await api.task(by_selector["task_id"]), await api.task(by_device["task_id"])]
    assert [t["status"] for t in placed] == ["assigned", "assigned"]
    assert sorted(t["device_id"] for t in placed) == ["a1", "a2"]


async def test_an_unrunnable_task_aimed_at_a_device_does_not_block_younger_work_there(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"], agent=runs("note-smoke"))
    blocked = (await api.create_task(**workflow_task("factory-reset", device_id="a1"))).json()
    assert blocked["status"] == "queued" and blocked["waiting_reason"] == "no_capable_host"
    first = (await api.create_task(**workflow_task("note-smoke", device_id="a1"))).json()
    assert first["status"] == "assigned"
    second = (await api.create_task(**workflow_task("note-smoke", device_id="a1"))).json()
    assert second["status"] == "queued" and second["waiting_reason"] == "matching_devices_busy"
    # the device comes free: it takes the oldest task it can run, past the one it cannot
    done = await api.result("host-a", (await api.claim("host-a")).json())
    assert done.status_code == 200, done.text
    assert (await api.task(second["task_id"]))["status"] == "assigned"
    assert (await api.task(blocked["task_id"]))["status"] == "queued"


async def test_capabilities_are_checked_and_a_bad_one_changes_nothing(api: Api) -> None:
    assert (await api.heartbeat("host-a", ["a1"], agent=runs("note-smoke"))).status_code == 200
    for bad in ({"capabilities": []}, {"capabilities": {"workflows": "note-smoke"}},
                {"capabilities": {"workflows": ["no spaces allowed"]}},
                {"capabilities": {"planners": [1]}},
                {"capabilities": {"workflows": ["w"] * 1001}}):
        response = await api.heartbeat("host-a", ["a1", "a2"], agent=bad)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request", bad
        assert "agent.capabilities" in response.json()["error"]["message"]
    host = (await api.client.get("/api/v1/hosts/host-a", headers=api.admin_headers)).json()
    assert host["devices"] == 1
    workflows = (await api.client.get("/api/v1/workflows", headers=api.admin_headers)).json()
    assert workflows == {"workflows": [{"name": "note-smoke", "hosts": ["host-a"], "devices": 1}]}


async def test_the_fleets_workflows_come_from_the_online_hosts_capabilities(api: Api) -> None:
    assert (await api.client.get("/api/v1/workflows", headers=api.admin_headers)).json() == {"workflows": []}
    await api.heartbeat("host-a", ["a1", "a2"], agent=runs("note-smoke", "home-smoke"))
    await api.heartbeat("host-b", ["b1"], agent=runs("note-smoke"))
    await api.heartbeat("host-c", ["c1"])  # no capabilities: runs anything, names nothing
    listed = (await api.client.get("/api/v1/workflows", headers=api.admin_headers)).json()
    assert listed == {"workflows": [
        {"name": "home-smoke", "hosts": ["host-a"], "devices": 2},
        {"name": "note-smoke", "hosts": ["host-a", "host-b"], "devices": 3},
    ]}
    await silence_host(api, "host-a")
    listed = (await api.client.get("/api/v1/workflows", headers=api.admin_headers)).json()
    assert listed == {"workflows": [{"name": "note-smoke", "hosts": ["host-b"], "devices": 1}]}
    # a heartbeat without capabilities (an agent downgraded) takes the host's list away
    await api.heartbeat("host-b", ["b1"])
    assert (await api.client.get("/api/v1/workflows", headers=api.admin_headers)).json() == {"workflows": []}


async def test_an_unclaimed_assignment_the_host_stops_listing_goes_back_to_the_queue(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"], agent=runs("note-smoke"))
    task = (await api.create_task(**workflow_task("note-smoke"))).json()
    assert task["status"] == "assigned" and task["host_id"] == "host-a"
    await api.heartbeat("host-b", ["b1"], agent=runs("note-smoke"))
    await api.heartbeat("host-a", ["a1"], agent=runs("home-smoke"))  # its agent dropped note-smoke
    moved = await api.task(task["task_id"])
    assert (moved["status"], moved["host_id"], moved["attempt"]) == ("assigned", "host-b", 1)
    events = (await api.client.get(f"/api/v1/tasks/{task['task_id']}/events", headers=api.admin_headers)).json()
    assert [e["reason"] for e in events["events"] if e["type"] == "unassigned"] == ["workflow_unlisted"]
    assert (await api.claim("host-a")).status_code == 204


async def test_a_disabled_device_of_a_host_that_lists_the_workflow_is_not_no_capable_host(api: Api) -> None:
    """PROTOCOL: `no_capable_host` only when no online host of the matching devices lists the
    workflow. Here one does; its device is disabled (an operator can enable it), so the task waits
    for a schedulable device, not for a capable host."""
    await api.heartbeat("host-a", ["a1"], agent=runs("note-smoke"))
    await api.heartbeat("host-b", ["b1"], agent=runs("factory-reset"))
    assert (await api.admin("POST", "/api/v1/devices/a1/disable", json={"reason": "cracked"})).status_code == 200
    created = (await api.create_task(**workflow_task("note-smoke"))).json()
    for task in (created, await api.task(created["task_id"])):  # the create's answer, then a read
        assert task["status"] == "queued", task
        assert task["candidates"]["matching"] == 2 and task["candidates"]["no_workflow"] == 1, task
        assert task["waiting_reason"] == "no_schedulable_device", task
