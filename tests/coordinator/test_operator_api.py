"""The operator API: tasks by device or selector, listing, cancel, the pool, hosts."""

from __future__ import annotations

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import claim_one, expire_lease, silence_host

pytestmark = pytest.mark.anyio


def sim(device_id: str, labels: dict[str, str] | None = None, driver: str = "sim",
        status: str = "available") -> dict[str, object]:
    return {"device_id": device_id, "driver": driver, "status": status, "labels": labels or {}}


async def test_selector_matches_driver_and_labels(api: Api) -> None:
    await api.heartbeat("host-a", [sim("a1", {"tier": "b"}), sim("a2", {"tier": "a", "site": "x"}),
                                   sim("a3", {"tier": "a"}, driver="adb")])
    task = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "a"}})).json()
    assert (task["status"], task["device_id"]) == ("assigned", "a2")
    assert task["selector"] == {"driver": "sim", "labels": {"tier": "a"}}
    waiting = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "c"}})).json()
    assert waiting["status"] == "queued" and waiting["device_id"] is None


async def test_task_waits_until_a_matching_device_appears(api: Api) -> None:
    task = (await api.create_task(selector={"driver": "adb", "labels": {"site": "berlin"}})).json()
    assert task["status"] == "queued"
    await api.heartbeat("host-a", [sim("a1", {"site": "paris"}, driver="adb")])
    assert (await api.task(task["task_id"]))["status"] == "queued"
    await api.heartbeat("host-b", [sim("b1", {"site": "berlin"}, driver="adb")])
    placed = await api.task(task["task_id"])
    assert (placed["status"], placed["host_id"], placed["device_id"]) == ("assigned", "host-b", "b1")


async def test_freed_device_takes_the_oldest_matching_waiting_task(api: Api) -> None:
    await api.heartbeat("host-a", [sim("a1", {"tier": "a"})])
    running = (await api.create_task(device_id="a1")).json()
    older_other = (await api.create_task(selector={"driver": "sim", "labels": {"tier": "z"}})).json()
    by_selector = (await api.create_task(selector={"driver": "sim"})).json()
    by_device = (await api.create_task(device_id="a1")).json()
    assert {t["status"] for t in (older_other, by_selector, by_device)} == {"queued"}
    assignment = await claim_one(api, "host-a")
    assert assignment["task_id"] == running["task_id"]
    await api.result("host-a", assignment)
    # by_selector is older than by_device; older_other does not match the device
    assert (await api.task(by_selector["task_id"]))["status"] == "assigned"
    assert (await api.task(by_device["task_id"]))["status"] == "queued"
    assert (await api.task(older_other["task_id"]))["status"] == "queued"


async def test_a_device_runs_one_task_at_a_time(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    ids = [(await api.create_task(device_id="a1")).json()["task_id"] for _ in range(3)]
    statuses = [(await api.task(t))["status"] for t in ids]
    assert statuses == ["assigned", "queued", "queued"]
    for expected in ids:
        assignment = await claim_one(api, "host-a")
        assert assignment["task_id"] == expected
        assert (await api.claim("host-a")).status_code == 204
        await api.result("host-a", assignment)


async def test_unavailable_and_busy_devices_are_not_scheduled(api: Api) -> None:
    await api.heartbeat("host-a", [sim("a1", status="unavailable"), sim("a2", status="busy")])
    task = (await api.create_task(selector={"driver": "sim"})).json()
    assert task["status"] == "queued"
    await api.heartbeat("host-a", [sim("a1", status="unavailable"), sim("a2")])
    assert (await api.task(task["task_id"]))["device_id"] == "a2"


async def test_offline_host_is_not_scheduled_and_returns_unclaimed_work(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(selector={"driver": "sim"})).json()
    assert task["host_id"] == "host-a"
    await silence_host(api, "host-a")
    assert (await api.sweep())["hosts"] == 1
    back = await api.task(task["task_id"])
    assert (back["status"], back["attempt"], back["host_id"]) == ("queued", 1, None)
    pool = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert pool[0]["host_online"] is False and pool[0]["reserved_by"] is None
    # new work does not go to the offline host either; it goes to the next host that is online
    await api.heartbeat("host-b", ["b1"])
    assert (await api.task(task["task_id"]))["host_id"] == "host-b"
    # and the host coming back is scheduled again
    await api.heartbeat("host-a", ["a1"])
    fresh = (await api.create_task(selector={"driver": "sim"})).json()
    assert fresh["host_id"] == "host-a"


async def test_device_id_target_on_unknown_device_waits(api: Api) -> None:
    task = (await api.create_task(device_id="later")).json()
    assert task["status"] == "queued" and task["device_id"] == "later"
    await api.heartbeat("host-c", ["later"])
    assert (await api.task(task["task_id"]))["status"] == "assigned"


async def test_list_tasks_newest_first_with_cursor(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    ids = [(await api.create_task(device_id="a1")).json()["task_id"] for _ in range(5)]
    seen: list[str] = []
    url = "/api/v1/tasks?limit=2"
    while url:
        page = (await api.client.get(url, headers=api.admin_headers)).json()
        seen += [t["task_id"] for t in page["tasks"]]
        url = f"/api/v1/tasks?limit=2&cursor={page['next_cursor']}" if page["next_cursor"] else ""
    assert seen == ids[::-1]
    queued = (await api.client.get("/api/v1/tasks?status=queued&limit=3", headers=api.admin_headers)).json()
    assert [t["task_id"] for t in queued["tasks"]] == ids[:0:-1][:3]
    rest = (await api.client.get(f"/api/v1/tasks?status=queued&limit=3&cursor={queued['next_cursor']}",
                                 headers=api.admin_headers)).json()
    assert [t["task_id"] for t in rest["tasks"]] == [ids[1]] and rest["next_cursor"] is None
    assigned = (await api.client.get("/api/v1/tasks?status=assigned", headers=api.admin_headers)).json()
    assert [t["task_id"] for t in assigned["tasks"]] == [ids[0]]


async def test_cancel_queued_assigned_and_running(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    assigned = (await api.create_task(device_id="a1")).json()
    queued = (await api.create_task(device_id="a1")).json()
    cancel = await api.client.post(f"/api/v1/tasks/{queued['task_id']}/cancel", headers=api.admin_headers)
    assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"
    cancel = await api.client.post(f"/api/v1/tasks/{assigned['task_id']}/cancel", headers=api.admin_headers)
    assert cancel.json()["status"] == "cancelled"
    assert (await api.claim("host-a")).status_code == 204
    devices = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert devices[0]["reserved_by"] is None

    running = (await api.create_task(device_id="a1")).json()
    assignment = await claim_one(api, "host-a")
    cancel = await api.client.post(f"/api/v1/tasks/{running['task_id']}/cancel", headers=api.admin_headers)
    assert (cancel.json()["status"], cancel.json()["cancel_requested"]) == ("running", True)
    renewed = await api.renew("host-a", assignment)
    assert renewed.json()["cancel_requested"] is True
    await api.result("host-a", assignment, status="cancelled")
    assert (await api.task(running["task_id"]))["status"] == "cancelled"
    # cancelling again is harmless; cancelling a finished task is a conflict
    again = await api.client.post(f"/api/v1/tasks/{running['task_id']}/cancel", headers=api.admin_headers)
    assert again.status_code == 200
    done = (await api.create_task(device_id="a1")).json()
    await api.result("host-a", await claim_one(api, "host-a"))
    finished = await api.client.post(f"/api/v1/tasks/{done['task_id']}/cancel", headers=api.admin_headers)
    assert finished.status_code == 409 and finished.json()["error"]["code"] == "task_terminal"
    missing = await api.client.post("/api/v1/tasks/t_missing/cancel", headers=api.admin_headers)
    assert missing.status_code == 404


async def test_cancelled_running_task_whose_lease_expires_is_cancelled(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    task = (await api.create_task(device_id="a1")).json()
    assignment = await claim_one(api, "host-a")
    await api.client.post(f"/api/v1/tasks/{task['task_id']}/cancel", headers=api.admin_headers)
    await expire_lease(api, assignment)
    await api.sweep()
    final = await api.task(task["task_id"])
    assert (final["status"], final["attempt"]) == ("cancelled", 1)


async def test_idempotency_key_returns_the_same_task(api: Api) -> None:
    first = await api.create_task(device_id="x1", idempotency_key="job-42")
    again = await api.create_task(device_id="x1", idempotency_key="job-42")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["task_id"] == first.json()["task_id"]
    other = await api.create_task(device_id="x2", idempotency_key="job-42")
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_conflict"
    listed = (await api.client.get("/api/v1/tasks", headers=api.admin_headers)).json()["tasks"]
    assert len(listed) == 1


async def test_hosts_list_shows_configured_and_seen_hosts(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    hosts = (await api.client.get("/api/v1/hosts", headers=api.admin_headers)).json()["hosts"]
    by_id = {h["host_id"]: h for h in hosts}
    assert set(by_id) == {"host-a", "host-b", "host-c"}
    assert by_id["host-a"]["online"] is True and by_id["host-a"]["devices"] == 1
    assert by_id["host-b"]["online"] is False and by_id["host-b"]["last_seen"] is None
    assert all(h["kind"] == "static" and h["revoked"] is False for h in hosts)
    missing = await api.client.get("/api/v1/hosts/nobody", headers=api.admin_headers)
    assert missing.status_code == 404
