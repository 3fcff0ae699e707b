"""Spec scenarios for statically configured hosts: identity, heartbeat and device snapshots."""

from __future__ import annotations

import pytest

from tests.conftest import HOSTS, Api

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


async def test_host_authenticates_as_itself(api: Api) -> None:
    assert (await api.heartbeat("host-a", ["a1"])).status_code == 200
    assert (await api.claim("host-a")).status_code == 204
    task = (await api.create_task(device_id="a1")).json()
    assignment = (await api.claim("host-a")).json()
    assert assignment["task_id"] == task["task_id"]
    assert (await api.renew("host-a", assignment)).status_code == 200
    assert (await api.result("host-a", assignment)).status_code == 200


async def test_host_attempts_to_impersonate_another_host(api: Api) -> None:
    await api.heartbeat("host-b", ["b1"])
    task = (await api.create_task(device_id="b1")).json()
    pool_before = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()
    hosts_before = (await api.client.get("/api/v1/hosts/host-b", headers=api.admin_headers)).json()
    as_a = Api.host_headers("host-a")
    calls = [
        api.client.put("/internal/v1/hosts/host-b/heartbeat", json={"devices": []}, headers=as_a),
        api.client.post("/internal/v1/hosts/host-b/claim?wait_s=0", headers=as_a),
        api.client.post("/internal/v1/hosts/host-b/leases/l_x/renew", json={"task_id": "t", "attempt": 1},
                        headers=as_a),
        api.client.post("/internal/v1/hosts/host-b/results", json={}, headers=as_a),
        # a host id that does not exist gets the same answer: nothing is learnt about host ids
        api.client.post("/internal/v1/hosts/no-such-host/claim?wait_s=0", headers=as_a),
    ]
    for call in calls:
        response = await call
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    assert (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json() == pool_before
    assert (await api.client.get("/api/v1/hosts/host-b", headers=api.admin_headers)).json() == hosts_before
    assert (await api.task(task["task_id"]))["status"] == "assigned"


async def test_unknown_host_credential_is_presented(api: Api) -> None:
    bodies = set()
    for host in ("host-a", "no-such-host", "bad id!"):
        for header in ({"authorization": "Bearer not-a-token"}, {}, {"authorization": "Basic abc"},
                       {"authorization": "Bearer"}, {"authorization": f"Bearer {HOSTS['host-a']}x"}):
            response = await api.client.post(f"/internal/v1/hosts/{host}/claim?wait_s=0", headers=header)
            assert response.status_code == 401
            bodies.add(response.content)
    assert len(bodies) == 1
    assert b"token-a" not in bodies.pop()
    # the admin token is no host credential either
    response = await api.client.post("/internal/v1/hosts/host-a/claim?wait_s=0", headers=api.admin_headers)
    assert response.status_code == 401


async def test_host_token_is_no_admin_token(api: Api) -> None:
    response = await api.client.get("/api/v1/tasks", headers=Api.host_headers("host-a"))
    assert response.status_code == 401


async def test_legacy_host_reports_devices(api: Api) -> None:
    response = await api.heartbeat("host-a", [
        {"device_id": "emulator-5554", "driver": "adb", "status": "available",
         "attributes": {"model": "Pixel 7", "os_version": "14"}, "labels": {"tier": "a"}},
        {"device_id": "a2", "driver": "sim", "status": "busy"},
    ])
    assert response.status_code == 200
    assert response.json() == {"host_id": "host-a", "devices": 2, "heartbeat_interval_s": 15, "draining": False}
    assert isinstance(response.json()["heartbeat_interval_s"], int)
    pool = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    # ordered by driver, then device id
    # host_name: none, for an agent that sent no hostname; device_name: a static device's id
    not_disabled = {"disabled": False, "disabled_reason": None, "disabled_at": None, "host_name": None}
    assert pool == [
        {"device_id": "emulator-5554", "name": "emulator-5554", "host_id": "host-a", "driver": "adb",
         "status": "available",
         "attributes": {"model": "Pixel 7", "os_version": "14"}, "labels": {"tier": "a"},
         "host_online": True, "reserved_by": None, "device_name": "emulator-5554", **not_disabled},
        {"device_id": "a2", "name": "a2", "host_id": "host-a", "driver": "sim", "status": "busy", "attributes": {},
         "labels": {}, "host_online": True, "reserved_by": None, "device_name": "a2", **not_disabled},
    ]
    host = (await api.client.get("/api/v1/hosts/host-a", headers=api.admin_headers)).json()
    assert host["online"] is True and host["kind"] == "static" and host["devices"] == 2
    assert host["last_seen"] is not None


async def test_heartbeat_refreshes_last_seen(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    first = (await api.client.get("/api/v1/hosts/host-a", headers=api.admin_headers)).json()["last_seen"]
    # an identical snapshot (the fast path) still refreshes last-seen
    await api.ctx.store.redis.zadd(api.ctx.store.keys.host_seen, {"host-a": 0})
    await api.heartbeat("host-a", ["a1"])
    second = (await api.client.get("/api/v1/hosts/host-a", headers=api.admin_headers)).json()["last_seen"]
    assert second >= first and second != "1970-01-01T00:00:00.000Z"


async def test_legacy_device_owned_by_online_host_conflicts(api: Api) -> None:
    await api.heartbeat("host-a", ["shared", "a1"])
    before = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()
    response = await api.heartbeat("host-b", ["b1", "shared"])
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "device_conflict"
    assert response.json()["error"]["details"] == {"device_id": "shared"}
    # the whole snapshot was rejected: b1 did not join, host-b was not seen
    assert (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json() == before
    host_b = (await api.client.get("/api/v1/hosts/host-b", headers=api.admin_headers)).json()
    assert host_b["last_seen"] is None and host_b["online"] is False


async def test_legacy_device_of_offline_host_passes_to_new_reporter(api: Api) -> None:
    from tests.coordinator.helpers import silence_host

    await api.heartbeat("host-a", ["shared"])
    await silence_host(api, "host-a")
    assert (await api.heartbeat("host-b", ["shared"])).status_code == 200
    pool = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert [(d["device_id"], d["host_id"], d["host_online"]) for d in pool] == [("shared", "host-b", True)]
    # the old owner coming back finds it owned by an online host
    assert (await api.heartbeat("host-a", ["shared"])).status_code == 409


async def test_host_reports_no_devices(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.heartbeat("host-b", ["b1"])
    assert (await api.heartbeat("host-a", [])).status_code == 200
    pool = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert [d["device_id"] for d in pool] == ["b1"]
    host = (await api.client.get("/api/v1/hosts/host-a", headers=api.admin_headers)).json()
    assert host["online"] is True and host["devices"] == 0


async def test_snapshot_replaces_only_missing_devices(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.heartbeat("host-a", ["a2", "a3"])
    pool = (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]
    assert [d["device_id"] for d in pool] == ["a2", "a3"]


async def test_device_leaving_takes_its_unclaimed_assignment_back(api: Api) -> None:
    await api.heartbeat("host-a", ["a1", "a2"])
    task = (await api.create_task(selector={"driver": "sim"})).json()
    assert task["status"] == "assigned"
    first = task["device_id"]
    remaining = [d for d in ("a1", "a2") if d != first]
    await api.heartbeat("host-a", remaining)
    moved = await api.task(task["task_id"])
    assert moved["status"] == "assigned" and moved["device_id"] == remaining[0]
    assert moved["attempt"] == 1
