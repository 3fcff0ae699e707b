"""Placement follows the fleet as it changes (PROTOCOL.md, "Sharing the fleet"): a relabelled or
handed-over device is offered the waiting work it can run now, in the heartbeat that changed it;
a team back under its quota places its waiting work by priority across all its targets, a bounded
slice a step with the reaper placing the rest; and `team_at_quota` is read, never inferred.
Through the HTTP API on real Redis, fakeredis and the cluster; any sequence of such changes is
the model test's (test_model.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import claim_one

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


def _sim(device_id: str, **labels: str) -> dict[str, Any]:
    return {"device_id": device_id, "driver": "sim", "status": "available", "labels": labels}


async def _task(api: Api, task_id: str) -> dict[str, Any]:
    response = await api.admin("GET", f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_relabelled_device_takes_the_waiting_work_it_now_matches_in_that_heartbeat(api: Api) -> None:
    assert (await api.heartbeat("host-a", [_sim("a1", rack="1")])).status_code == 200
    waiting = (await api.create_task(selector={"driver": "sim", "labels": {"rack": "3"}})).json()
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_matching_device"
    assert (await api.heartbeat("host-a", [_sim("a1", rack="3")])).status_code == 200
    placed = await _task(api, waiting["task_id"])
    assert (placed["status"], placed["device_id"]) == ("assigned", "a1")


async def test_a_device_handed_to_another_host_takes_work_only_that_host_runs(api: Api) -> None:
    """A workflow task waits while its device's host does not list the workflow; the device moved
    to a host that does (its old host stopped reporting it) takes it in the new host's heartbeat."""
    lists = {"capabilities": {"workflows": ["note-smoke"]}}
    assert (await api.heartbeat("host-a", [_sim("a1")], agent={"capabilities": {"workflows": []}})).status_code == 200
    waiting = (await api.create_task(kind="workflow", workflow={"name": "note-smoke", "params": {}},
                                     selector={"driver": "sim"})).json()
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_capable_host"
    assert (await api.heartbeat("host-a", [], agent={"capabilities": {"workflows": []}})).status_code == 200
    assert (await api.heartbeat("host-b", [_sim("a1")], agent=lists)).status_code == 200
    placed = await _task(api, waiting["task_id"])
    assert (placed["status"], placed["host_id"]) == ("assigned", "host-b")


async def test_a_team_back_under_its_quota_places_by_priority_across_its_targets(api: Api) -> None:
    """An older priority-0 pool task and a newer priority-50 task aimed at the one free phone: the
    team's cap lifted, the urgent one takes it, whichever target's queue was filed first."""
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": 0})).status_code == 200
    assert (await api.heartbeat("host-a", [_sim("a1")])).status_code == 200
    pool = (await api.create_task(selector={"driver": "sim"}, team="qa")).json()
    urgent = (await api.create_task(device_id="a1", team="qa", priority=50)).json()
    assert pool["waiting_reason"] == urgent["waiting_reason"] == "team_at_quota"
    assert pool["candidates"]["team_at_quota"] is True
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": 1})).status_code == 200
    assert (await _task(api, urgent["task_id"]))["status"] == "assigned"
    held = await _task(api, pool["task_id"])
    assert held["status"] == "queued" and held["waiting_reason"] == "matching_devices_busy"
    assert held["candidates"]["team_at_quota"] is True  # at its cap again, and nothing free


async def test_a_large_backlog_is_placed_in_bounded_slices_and_the_reaper_places_the_rest(api: Api) -> None:
    """Forty free phones, each wanted by its own target of one capped team: lifting the cap places
    a slice at once and leaves the team to the reaper, whose passes place every task."""
    devices = [_sim(f"a{n:02d}", slot=str(n)) for n in range(40)]
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": 0})).status_code == 200
    assert (await api.heartbeat("host-a", devices)).status_code == 200
    tasks = [(await api.create_task(selector={"driver": "sim", "labels": {"slot": str(n)}}, team="qa")).json()
             for n in range(40)]
    assert (await api.admin("PUT", "/api/v1/teams/qa", json={"max_devices": None})).status_code == 200
    first = [(await _task(api, t["task_id"]))["status"] for t in tasks]
    assert 0 < first.count("assigned") < len(tasks), "one step places a bounded slice"
    while await api.ctx.store.place_waiting_teams(1):
        pass
    assert [(await _task(api, t["task_id"]))["status"] for t in tasks] == ["assigned"] * len(tasks)
    assert (await claim_one(api, "host-a"))["task_id"] == tasks[0]["task_id"], "the oldest first"
