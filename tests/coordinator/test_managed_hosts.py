"""Managed (enrolled) hosts: enrollment tokens, host and device enrollment, heartbeat, revocation."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import orjson
import pytest

from tests.conftest import Api
from tests.coordinator.helpers import expire_lease

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]


class Managed:
    """A managed host as an agent drives it: its own host token, enrolled devices."""

    def __init__(self, api: Api, host_id: str, host_token: str) -> None:
        self.api, self.host_id, self.host_token = api, host_id, host_token
        self.headers = {"authorization": f"Bearer {host_token}"}
        self.path = f"/internal/v1/hosts/{host_id}"

    async def enroll_devices(self, *devices: tuple[str, str]) -> Any:
        body = {"devices": [{"local_id": local, "driver": driver} for local, driver in devices]}
        return await self.api.client.post(f"{self.path}/devices/enroll", json=body, headers=self.headers)

    async def heartbeat(self, *devices: tuple[str, str]) -> Any:
        body = {"devices": [{"device_id": d, "driver": drv, "status": "available"} for d, drv in devices]}
        return await self.api.client.put(f"{self.path}/heartbeat", json=body, headers=self.headers)

    async def claim(self) -> Any:
        return await self.api.client.post(f"{self.path}/claim?wait_s=0", headers=self.headers)


async def make_token(api: Api, **body: Any) -> dict[str, Any]:
    response = await api.client.post("/api/v1/enrollment-tokens", json=body, headers=api.admin_headers)
    assert response.status_code == 201, response.text
    return response.json()


async def enroll(api: Api, token: str, enrollment_id: str | None = None, host_token: str | None = None,
                 **extra: Any) -> Any:
    body = {"enrollment_id": enrollment_id or "e-" + secrets.token_hex(6),
            "host_token": host_token or "tht_" + secrets.token_urlsafe(32), **extra}
    return await api.client.post("/internal/v1/enroll", json=body, headers={"authorization": f"Bearer {token}"})


async def new_host(api: Api, **token_body: Any) -> Managed:
    token = await make_token(api, **token_body)
    host_token = "tht_" + secrets.token_urlsafe(32)
    response = await enroll(api, token["token"], host_token=host_token, hostname="lab-7")
    assert response.status_code == 201
    return Managed(api, response.json()["host_id"], host_token)


async def _pool(api: Api) -> list[dict[str, Any]]:
    return (await api.client.get("/api/v1/devices", headers=api.admin_headers)).json()["devices"]


async def _host(api: Api, host_id: str) -> dict[str, Any]:
    return (await api.client.get(f"/api/v1/hosts/{host_id}", headers=api.admin_headers)).json()


async def test_enrollment_token_is_shown_once_and_stored_as_a_hash(api: Api) -> None:
    token = await make_token(api, ttl_s=600, max_uses=2, labels={"site": "berlin"})
    assert token["token"].startswith("tet_") and len(token["token"]) > 40
    assert token["max_uses"] == 2 and token["uses_left"] == 2 and token["labels"] == {"site": "berlin"}
    listed = (await api.client.get("/api/v1/enrollment-tokens", headers=api.admin_headers)).json()["enrollment_tokens"]
    assert [t["id"] for t in listed] == [token["id"]]
    assert "token" not in listed[0] and token["token"] not in str(listed)
    stored = await api.ctx.store.redis.hgetall(api.ctx.store.keys.enrollment_tokens)
    assert token["token"].encode() not in b"".join(stored.values())


async def test_new_managed_host_enrolls(api: Api) -> None:
    token = await make_token(api, labels={"site": "berlin"})
    host_token = "tht_" + secrets.token_urlsafe(32)
    first = await enroll(api, token["token"], "enr-1", host_token, hostname="lab-7", labels={"rack": "3"})
    assert first.status_code == 201 and first.json()["created"] is True
    host_id = first.json()["host_id"]
    # the identical retry after a lost response: same host, even though the token is used up
    again = await enroll(api, token["token"], "enr-1", host_token, hostname="lab-7", labels={"rack": "3"})
    assert again.status_code == 200 and again.json() == {"host_id": host_id, "created": False}
    conflict = await enroll(api, token["token"], "enr-1", "tht_" + secrets.token_urlsafe(32))
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "enrollment_conflict"
    used_up = await enroll(api, token["token"], "enr-2")
    assert used_up.status_code == 401
    host = await _host(api, host_id)
    assert host["kind"] == "enrolled" and host["enrollment_token_id"] == token["id"]
    assert host["labels"] == {"site": "berlin", "rack": "3"} and host["hostname"] == "lab-7"
    assert host["revoked"] is False and host["online"] is False
    stored = await api.ctx.store.redis.hgetall(api.ctx.store.keys.hosts)
    assert host_token.encode() not in b"".join(stored.values())


async def test_operator_labels_win_over_the_agents(api: Api) -> None:
    token = await make_token(api, labels={"site": "berlin"})
    response = await enroll(api, token["token"], labels={"site": "elsewhere", "rack": "1"})
    assert (await _host(api, response.json()["host_id"]))["labels"] == {"site": "berlin", "rack": "1"}


async def test_max_uses_greater_than_one(api: Api) -> None:
    token = await make_token(api, max_uses=3)
    hosts = [await enroll(api, token["token"]) for _ in range(3)]
    assert [r.status_code for r in hosts] == [201, 201, 201]
    assert len({r.json()["host_id"] for r in hosts}) == 3
    assert (await enroll(api, token["token"])).status_code == 401
    listed = (await api.client.get("/api/v1/enrollment-tokens", headers=api.admin_headers)).json()["enrollment_tokens"]
    assert (listed[0]["uses"], listed[0]["uses_left"]) == (3, 0)


async def test_expired_token_is_refused(api: Api) -> None:
    token = await make_token(api, ttl_s=60)
    # move the token's expiry into the past rather than wait a minute
    keys = api.ctx.store.keys
    record = orjson.loads(await api.ctx.store.redis.hget(keys.enrollment_tokens, token["id"]))
    await api.ctx.store.redis.hset(keys.enrollment_tokens, token["id"], orjson.dumps({**record, "expires_at": 0}))
    response = await enroll(api, token["token"])
    assert response.status_code == 401
    listed = (await api.client.get("/api/v1/enrollment-tokens", headers=api.admin_headers)).json()["enrollment_tokens"]
    assert listed[0]["expired"] is True and listed[0]["uses"] == 0


async def test_revoked_token_is_refused(api: Api) -> None:
    token = await make_token(api, max_uses=5)
    host_token = "tht_" + secrets.token_urlsafe(32)
    done = await enroll(api, token["token"], "enr-x", host_token)
    revoked = await api.client.delete(f"/api/v1/enrollment-tokens/{token['id']}", headers=api.admin_headers)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert (await enroll(api, token["token"])).status_code == 401
    # a host enrolled before keeps working, and its identical retry still answers
    assert (await enroll(api, token["token"], "enr-x", host_token)).json()["host_id"] == done.json()["host_id"]
    missing = await api.client.delete("/api/v1/enrollment-tokens/et_missing", headers=api.admin_headers)
    assert missing.status_code == 404


async def test_host_and_enrollment_tokens_are_not_interchangeable(api: Api) -> None:
    token = await make_token(api, max_uses=5)
    host = await new_host(api)
    unauthorized = (await api.client.post("/internal/v1/hosts/x/claim?wait_s=0",
                                          headers={"authorization": "Bearer nope"})).content
    # a host token presented as an enrollment token
    as_enrollment = await enroll(api, host.host_token)
    assert as_enrollment.status_code == 401 and as_enrollment.content == unauthorized
    # an enrollment token presented as a host token
    response = await api.client.post(f"{host.path}/claim?wait_s=0",
                                     headers={"authorization": f"Bearer {token['token']}"})
    assert response.status_code == 401 and response.content == unauthorized
    # and a static host token enrolls nothing
    assert (await enroll(api, "token-a-0123456789")).status_code == 401


async def test_two_enrollments_racing_for_the_last_use(api: Api) -> None:
    token = await make_token(api, max_uses=1)
    responses = await asyncio.gather(*(enroll(api, token["token"]) for _ in range(8)))
    assert sorted(r.status_code for r in responses) == [201] + [401] * 7
    enrolled = [h for h in (await api.client.get("/api/v1/hosts", headers=api.admin_headers)).json()["hosts"]
                if h["kind"] == "enrolled"]
    assert len(enrolled) == 1


async def test_device_enrollment_is_idempotent_and_all_or_nothing(api: Api) -> None:
    host = await new_host(api)
    first = await host.enroll_devices(("emulator-5554", "adb"), ("phone-1", "sim"))
    assert first.status_code == 200
    devices = first.json()["devices"]
    assert [(d["local_id"], d["driver"]) for d in devices] == [("emulator-5554", "adb"), ("phone-1", "sim")]
    again = await host.enroll_devices(("phone-1", "sim"), ("emulator-5554", "adb"))
    assert {d["local_id"]: d["device_id"] for d in again.json()["devices"]} == {
        d["local_id"]: d["device_id"] for d in devices}
    conflict = await host.enroll_devices(("new-one", "sim"), ("phone-1", "adb"))
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "driver_conflict"
    after = await host.enroll_devices(("new-one", "sim"))
    assert after.json()["devices"][0]["device_id"] not in {d["device_id"] for d in devices}
    enrolled = await api.ctx.store.redis.hlen(api.ctx.store.keys.enrolled_devices)
    assert enrolled == 3  # the conflicting batch enrolled nothing, not even new-one
    # the same local id on another host is another device
    other = await new_host(api)
    elsewhere = (await other.enroll_devices(("phone-1", "sim"))).json()["devices"][0]["device_id"]
    assert elsewhere != devices[1]["device_id"]


async def test_static_hosts_do_not_enroll_devices(api: Api) -> None:
    response = await api.client.post("/internal/v1/hosts/host-a/devices/enroll", headers=Api.host_headers("host-a"),
                                     json={"devices": [{"local_id": "x", "driver": "sim"}]})
    assert response.status_code == 403


async def test_managed_host_reports_enrolled_devices(api: Api) -> None:
    host = await new_host(api, labels={"site": "berlin"})
    devices = (await host.enroll_devices(("phone-1", "sim"), ("phone-2", "sim"))).json()["devices"]
    ids = [d["device_id"] for d in devices]
    response = await host.heartbeat(*[(d, "sim") for d in ids])
    assert response.status_code == 200 and response.json()["devices"] == 2
    pool = await _pool(api)
    assert sorted(d["device_id"] for d in pool) == sorted(ids)
    assert all(d["host_id"] == host.host_id and d["host_online"] for d in pool)
    # the host's labels apply to its devices, so selectors can use them
    assert all(d["labels"] == {"site": "berlin"} for d in pool)
    task = (await api.create_task(selector={"driver": "sim", "labels": {"site": "berlin"}})).json()
    assert task["host_id"] == host.host_id
    info = await _host(api, host.host_id)
    assert info["online"] is True and info["last_seen"] is not None and info["devices"] == 2


async def test_managed_host_reports_an_unknown_device_id(api: Api) -> None:
    host = await new_host(api)
    other = await new_host(api)
    mine = (await host.enroll_devices(("phone-1", "sim"))).json()["devices"][0]["device_id"]
    theirs = (await other.enroll_devices(("phone-9", "sim"))).json()["devices"][0]["device_id"]
    await host.heartbeat((mine, "sim"))
    # an old last-seen time, so a refresh by a rejected snapshot could not go unnoticed
    await api.ctx.store.redis.zadd(api.ctx.store.keys.host_seen, {host.host_id: 1})
    seen_before = (await _host(api, host.host_id))["last_seen"]
    pool_before = await _pool(api)
    for devices, code in (
        ([(mine, "sim"), ("d_never_enrolled", "sim")], "unknown_device"),
        ([(mine, "sim"), (theirs, "sim")], "unknown_device"),
        ([(mine, "adb")], "driver_conflict"),
        ([("phone-1", "sim")], "unknown_device"),  # a local id is not a cloud id
    ):
        response = await host.heartbeat(*devices)
        assert response.status_code == 409 and response.json()["error"]["code"] == code
        assert await _pool(api) == pool_before
        assert (await _host(api, host.host_id))["last_seen"] == seen_before


async def test_managed_host_reports_no_devices(api: Api) -> None:
    host = await new_host(api)
    other = await new_host(api)
    ids = [d["device_id"] for d in (await host.enroll_devices(("p1", "sim"), ("p2", "sim"))).json()["devices"]]
    theirs = (await other.enroll_devices(("p1", "sim"))).json()["devices"][0]["device_id"]
    await host.heartbeat(*[(d, "sim") for d in ids])
    await other.heartbeat((theirs, "sim"))
    assert (await host.heartbeat()).status_code == 200
    assert [d["device_id"] for d in await _pool(api)] == [theirs]
    # enrollment records stay: the devices come back under the same ids
    again = (await host.enroll_devices(("p1", "sim"), ("p2", "sim"))).json()["devices"]
    assert [d["device_id"] for d in again] == ids
    assert (await host.heartbeat(*[(d, "sim") for d in ids])).status_code == 200


async def test_enrolled_host_authenticates_as_itself_and_not_as_others(api: Api) -> None:
    host = await new_host(api)
    device = (await host.enroll_devices(("p1", "sim"))).json()["devices"][0]["device_id"]
    await host.heartbeat((device, "sim"))
    await api.create_task(device_id=device)
    assignment = (await host.claim()).json()
    renew = await api.client.post(f"{host.path}/leases/{assignment['lease_id']}/renew", headers=host.headers,
                                  json={"task_id": assignment["task_id"], "attempt": 1})
    assert renew.status_code == 200
    other = await api.client.post("/internal/v1/hosts/host-a/claim?wait_s=0", headers=host.headers)
    assert other.status_code == 403


async def test_revoked_host(api: Api) -> None:
    host = await new_host(api)
    ids = [d["device_id"] for d in (await host.enroll_devices(("p1", "sim"), ("p2", "sim"))).json()["devices"]]
    await host.heartbeat(*[(d, "sim") for d in ids])
    spare = await new_host(api)
    running_task = (await api.create_task(device_id=ids[0])).json()
    assignment = (await host.claim()).json()
    waiting = (await api.create_task(selector={"driver": "sim"})).json()
    assert waiting["host_id"] == host.host_id and waiting["status"] == "assigned"

    revoked = await api.client.post(f"/api/v1/hosts/{host.host_id}/revoke", headers=api.admin_headers)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True and revoked.json()["online"] is False
    # its credential fails on the next request, whatever it asks
    assert (await host.heartbeat(*[(d, "sim") for d in ids])).status_code == 401
    assert (await host.claim()).status_code == 401
    renew = await api.client.post(f"{host.path}/leases/{assignment['lease_id']}/renew", headers=host.headers,
                                  json={"task_id": assignment["task_id"], "attempt": 1})
    assert renew.status_code == 401
    # its devices left the pool; its unclaimed assignment went back to waiting
    assert await _pool(api) == []
    back = await api.task(waiting["task_id"])
    assert (back["status"], back["host_id"]) == ("queued", None)
    # its running lease cannot be renewed, so it expires and the task requeues as attempt 2
    await expire_lease(api, assignment)
    await api.sweep()
    requeued = await api.task(running_task["task_id"])
    assert (requeued["status"], requeued["attempt"]) == ("queued", 2)
    # new work lands on another host's devices
    spare_device = (await spare.enroll_devices(("s1", "sim"))).json()["devices"][0]["device_id"]
    await spare.heartbeat((spare_device, "sim"))
    assert (await api.task(waiting["task_id"]))["host_id"] == spare.host_id
    missing = await api.client.post("/api/v1/hosts/h_nobody/revoke", headers=api.admin_headers)
    assert missing.status_code == 404


async def test_revoked_static_host(api: Api) -> None:
    await api.heartbeat("host-c", ["c1"])
    response = await api.client.post("/api/v1/hosts/host-c/revoke", headers=api.admin_headers)
    assert response.status_code == 200 and response.json()["kind"] == "static"
    assert (await api.heartbeat("host-c", ["c1"])).status_code == 401
    assert (await api.claim("host-c")).status_code == 401


async def test_bad_enrollment_requests(api: Api) -> None:
    token = await make_token(api, max_uses=10)
    headers = {"authorization": f"Bearer {token['token']}"}
    for body in ({}, {"enrollment_id": "e1"}, {"enrollment_id": "e1", "host_token": "short"},
                 {"enrollment_id": "e1", "host_token": "x" * 257}, {"enrollment_id": "e1", "host_token": 5},
                 {"enrollment_id": "bad id!", "host_token": "x" * 40},
                 {"enrollment_id": "e1", "host_token": "x" * 40, "labels": {"a": 1}},
                 {"enrollment_id": "e1", "host_token": "x" * 40, "hostname": 7}):
        response = await api.client.post("/internal/v1/enroll", json=body, headers=headers)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "invalid_request"
    assert (await api.client.post("/internal/v1/enroll", content=b"{no", headers=headers)).status_code == 400
    listed = (await api.client.get("/api/v1/enrollment-tokens", headers=api.admin_headers)).json()["enrollment_tokens"]
    assert listed[0]["uses"] == 0
    for body in ({"ttl_s": 0}, {"ttl_s": "60"}, {"max_uses": 0}, {"labels": ["x"]}, {"ttl_s": 10**9}):
        response = await api.client.post("/api/v1/enrollment-tokens", json=body, headers=api.admin_headers)
        assert response.status_code == 400, body
    host = await new_host(api)
    for body in ({}, {"devices": []}, {"devices": [{"local_id": "bad id!", "driver": "sim"}]},
                 {"devices": [{"local_id": "x", "driver": "sim"}, {"local_id": "x", "driver": "sim"}]},
                 {"devices": [{"local_id": "x"}]}, {"devices": [{"local_id": "x", "driver": "sim", "attributes": 3}]}):
        response = await api.client.post(f"{host.path}/devices/enroll", json=body, headers=host.headers)
        assert response.status_code == 400, body
    assert await api.ctx.store.redis.hlen(api.ctx.store.keys.enrolled_devices) == 0
    for headers in ({}, {"authorization": "Bearer nope"}):
        assert (await api.client.post("/internal/v1/enroll", headers=headers,
                                      json={"enrollment_id": "e1", "host_token": "x" * 40})).status_code == 401


async def test_operators_see_the_names_people_use(api: Api) -> None:
    """Enrolled devices carry `name` (their local id on the host, e.g. the serial); a static host's
    devices are named by their id; hosts carry `hostname` (the agent's latest, else the
    enrollment's) and `labels`."""
    host = await new_host(api, labels={"site": "berlin"})
    enrolled = (await host.enroll_devices(("pixel-a", "sim"), ("R58N12ABC", "sim"))).json()["devices"]
    cloud = {d["local_id"]: d["device_id"] for d in enrolled}
    assert (await host.heartbeat(*[(d, "sim") for d in cloud.values()])).status_code == 200
    await api.heartbeat("host-a", ["a1"])
    pool = {d["device_id"]: d for d in await _pool(api)}
    assert {d["name"] for d in pool.values()} == {"pixel-a", "R58N12ABC", "a1"}
    assert pool[cloud["pixel-a"]]["name"] == "pixel-a" and pool["a1"]["name"] == "a1"
    one = (await api.client.get(f"/api/v1/devices/{cloud['R58N12ABC']}", headers=api.admin_headers)).json()
    assert one["name"] == "R58N12ABC"
    info = await _host(api, host.host_id)
    assert info["hostname"] == "lab-7" and info["labels"] == {"site": "berlin"}
    # the agent's own word wins once it heartbeats it (a machine renamed since it enrolled)
    body = {"devices": [{"device_id": d, "driver": "sim", "status": "available"} for d in cloud.values()],
            "agent": {"version": "0.1.0", "hostname": "lab-7b"}}
    assert (await api.client.put(f"{host.path}/heartbeat", json=body, headers=host.headers)).status_code == 200
    assert (await _host(api, host.host_id))["hostname"] == "lab-7b"
    await api.heartbeat("host-b", ["b1"], agent={"hostname": "bench-2"})
    listed = (await api.client.get("/api/v1/hosts", headers=api.admin_headers)).json()["hosts"]
    hosts = {h["host_id"]: h for h in listed}
    assert hosts["host-b"]["hostname"] == "bench-2" and hosts["host-b"]["labels"] == {}
    assert hosts[host.host_id]["hostname"] == "lab-7b"
