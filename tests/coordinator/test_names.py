"""Names where ids were all a person saw (issue 42, seen 2): the API's task, event, run and device
objects carry ``host_name`` (what the host calls itself) and ``device_name`` (a managed host's
device's local id, its serial; a static host's device id, which is its local id) beside the ids."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


async def _managed_host(api: Api, hostname: str) -> tuple[str, dict[str, str]]:
    token = (await api.admin("POST", "/api/v1/enrollment-tokens", json={})).json()["token"]
    host_token = "m" * 40
    enrolled = await api.client.post("/internal/v1/enroll", headers={"authorization": f"Bearer {token}"},
                                     json={"enrollment_id": "e-names", "host_token": host_token,
                                           "hostname": hostname})
    assert enrolled.status_code == 201, enrolled.text
    return enrolled.json()["host_id"], {"authorization": f"Bearer {host_token}"}


async def _get(api: Api, path: str) -> Any:
    response = await api.admin("GET", path)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_managed_host_s_task_events_runs_and_device_carry_its_names(api: Api) -> None:
    host_id, headers = await _managed_host(api, "lab-enrolled")
    enrolled = await api.client.post(f"/internal/v1/hosts/{host_id}/devices/enroll", headers=headers,
                                     json={"devices": [{"local_id": "emulator-5554", "driver": "sim"}]})
    device_id = enrolled.json()["devices"][0]["device_id"]
    assert device_id != "emulator-5554"
    beat = await api.client.put(f"/internal/v1/hosts/{host_id}/heartbeat", headers=headers, json={
        "devices": [{"device_id": device_id, "driver": "sim", "status": "available"}],
        "agent": {"hostname": "lab-7.example"}})  # the agent's word wins over the enrollment's
    assert beat.status_code == 200, beat.text

    created = await api.create_task(device_id=device_id)
    assert created.status_code == 201, created.text
    task = created.json()
    assert (task["host_name"], task["device_name"]) == ("lab-7.example", "emulator-5554"), task
    claimed = await api.client.post(f"/internal/v1/hosts/{host_id}/claim?wait_s=0", headers=headers)
    assignment = claimed.json()
    result = await api.client.post(f"/internal/v1/hosts/{host_id}/results", headers=headers, json={
        "task_id": task["task_id"], "attempt": 1, "lease_id": assignment["lease_id"], "status": "succeeded",
        "failure_reason": None, "metadata": {}})
    assert result.status_code == 200, result.text

    shown = await api.task(task["task_id"])
    assert (shown["host_id"], shown["host_name"], shown["device_name"]) == (host_id, "lab-7.example", "emulator-5554")
    listed = (await _get(api, f"/api/v1/tasks?device_id={device_id}"))["tasks"]
    assert [(t["host_name"], t["device_name"]) for t in listed] == [("lab-7.example", "emulator-5554")]
    events = (await _get(api, f"/api/v1/tasks/{task['task_id']}/events"))["events"]
    claimed_event = next(e for e in events if e["type"] == "claimed")
    assert (claimed_event["host_name"], claimed_event["device_name"]) == ("lab-7.example", "emulator-5554")
    created_event = next(e for e in events if e["type"] == "created")
    assert created_event["host_id"] is None and created_event["host_name"] is None
    runs = (await _get(api, f"/api/v1/devices/{device_id}/history"))["runs"]
    assert [r["host_name"] for r in runs] == ["lab-7.example"]
    device = await _get(api, f"/api/v1/devices/{device_id}")
    assert (device["host_name"], device["device_name"], device["name"]) == (
        "lab-7.example", "emulator-5554", "emulator-5554")


async def test_a_static_host_s_device_is_named_by_its_id_and_the_host_by_its_agent(api: Api) -> None:
    await api.heartbeat("host-a", ["phone-1"], agent={"hostname": "lab-1.example"})
    task = (await api.create_task(device_id="phone-1")).json()
    assert (task["host_id"], task["host_name"], task["device_name"]) == ("host-a", "lab-1.example", "phone-1")
    waiting = (await api.create_task(device_id="phone-nowhere")).json()
    assert (waiting["host_name"], waiting["device_name"]) == (None, "phone-nowhere")
    devices = (await _get(api, "/api/v1/devices?host_id=host-a"))["devices"]
    assert [(d["host_name"], d["device_name"]) for d in devices] == [("lab-1.example", "phone-1")]


async def test_a_host_s_new_name_shows_from_its_next_heartbeat(api: Api) -> None:
    await api.heartbeat("host-b", ["phone-b"], agent={"hostname": "old.example"})
    task = (await api.create_task(device_id="phone-b")).json()
    assert task["host_name"] == "old.example"
    await api.heartbeat("host-b", ["phone-b"], agent={"hostname": "new.example"})
    assert (await api.task(task["task_id"]))["host_name"] == "new.example"
