"""The contract's edges: the error boundary, late claim replays, deep and dirty JSON, bulk progress,
credential-first ordering, credential-bound revocation, growth limits and small slips."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from coordinator.app import create_app
from coordinator.auth import HostPrincipal, token_digest
from coordinator.redis_client import describe_url, open_redis
from tests.conftest import ADMIN, HOSTS, Api, make_settings, unique_prefix
from tests.coordinator.helpers import claim_one, expire_lease
from tests.coordinator.test_bad_input import _state

pytestmark = pytest.mark.anyio

HOST = "/internal/v1/hosts/host-a"


def _nested(depth: int) -> Any:
    """A JSON value whose containers nest ``depth`` levels."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


async def _running(api: Api) -> dict[str, Any]:
    await api.heartbeat("host-a", ["a1"])
    await api.create_task(device_id="a1")
    return await claim_one(api, "host-a", claim_id="c-1")


# -- 1. one error boundary -------------------------------------------------------------------


async def test_unexpected_errors_are_json_500_logged_once_and_never_echoed(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    async def explode(*args: Any) -> Any:
        raise RuntimeError("secret-detail-from-deep-inside")

    api.ctx.store.get_task = explode  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="coordinator"):
        response = await api.client.get("/api/v1/tasks/t_1", headers=Api.admin_headers)
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "internal"
    assert "secret-detail" not in response.text
    records = [r for r in caplog.records if r.exc_info]
    assert len(records) == 1
    request_id = error["message"].rsplit(" ", 1)[1].rstrip(")")
    assert request_id in records[0].getMessage()


async def test_redis_unreachable_is_503_unavailable_with_retry_after() -> None:
    # Nothing listens on port 1: every Redis call fails to connect.
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    app = create_app(make_settings(unique_prefix()), redis=dead)
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as client:
        for method, path, headers, body in [
            ("GET", "/api/v1/tasks", Api.admin_headers, None),
            ("POST", "/api/v1/tasks", Api.admin_headers, {"kind": "goal", "goal": "x", "device_id": "d"}),
            ("PUT", f"{HOST}/heartbeat", Api.host_headers("host-a"), {"devices": []}),
            ("POST", f"{HOST}/claim?wait_s=0", Api.host_headers("host-a"), None),
        ]:
            response = await client.request(method, path, headers=headers, json=body)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"]["code"] == "unavailable"
            assert int(response.headers["retry-after"]) >= 1
    await dead.aclose()


async def test_every_error_status_is_the_json_error_405_with_allow(api: Api) -> None:
    response = await api.client.put("/api/v1/tasks", headers=Api.admin_headers)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    response = await api.client.get(f"{HOST}/heartbeat", headers=Api.host_headers("host-a"))
    assert response.status_code == 405 and response.headers["allow"] == "PUT"


async def test_metrics_method_label_is_a_fixed_set(api: Api) -> None:
    for method in ("FROBNICATE", "X" * 40):
        response = await api.client.request(method, "/healthz")
        assert response.status_code == 405
    metrics = (await api.client.get("/metrics")).text
    assert "FROBNICATE" not in metrics and "X" * 40 not in metrics
    assert 'method="other"' in metrics


# -- 3. a late claim replay ------------------------------------------------------------------


async def test_claim_replay_extends_a_live_lease_to_a_full_ttl(api: Api) -> None:
    first = await _running(api)
    store = api.ctx.store
    # Time passes: the lease has 100 ms left when the replay arrives.
    now = await store.redis_time_ms()
    await store.redis.zadd(store.keys.lease_deadlines, {first["lease_id"]: now + 100})
    replay = await claim_one(api, "host-a", claim_id="c-1")
    assert replay["lease_id"] == first["lease_id"] and replay["task_id"] == first["task_id"]
    deadline = await store.redis.zscore(store.keys.lease_deadlines, first["lease_id"])
    assert deadline >= now + api.ctx.settings.lease_ttl_ms
    assert replay["lease_expires_at"] >= first["lease_expires_at"]
    assert replay["lease_ttl_ms"] == api.ctx.settings.lease_ttl_ms
    assert (await api.renew("host-a", replay)).status_code == 200


@pytest.mark.parametrize("ending", ["expired", "result"])
async def test_claim_replay_of_an_ended_lease_gets_204_and_claims_nothing(api: Api, ending: str) -> None:
    first = await _running(api)
    if ending == "expired":
        await expire_lease(api, first["lease_id"])
        await api.sweep()
    else:
        assert (await api.result("host-a", first)).status_code == 200
    await api.create_task(device_id="a1")  # new work is queued for the host meanwhile
    before = await _state(api)
    response = await api.claim("host-a", claim_id="c-1")
    assert response.status_code == 204
    assert await _state(api) == before


# -- 5. deep JSON ------------------------------------------------------------------------------


async def test_json_deeper_than_32_levels_is_400_and_changes_nothing(api: Api) -> None:
    running = await _running(api)
    before = await _state(api)
    # The body object is level 1, so metadata may nest 31 more levels.
    deep_result = await api.result("host-a", running, metadata=_nested(32))
    assert deep_result.status_code == 400
    assert deep_result.json()["error"]["code"] == "invalid_request"
    deep_heartbeat = await api.heartbeat(
        "host-a", [{"device_id": "a1", "driver": "sim", "status": "available", "attributes": _nested(31)}]
    )
    assert deep_heartbeat.status_code == 400
    deep_task = await api.create_task(kind="workflow", workflow={"name": "w", "params": _nested(31)},
                                      device_id="a1")
    assert deep_task.status_code == 400
    assert await _state(api) == before
    assert (await api.result("host-a", running, metadata=_nested(31))).status_code == 200


async def test_operator_views_answer_whatever_a_host_stored(api: Api) -> None:
    """Data stored before the depth limit existed (deeper than orjson writes) is still shown."""
    running = await _running(api)
    store = api.ctx.store
    host = HostPrincipal("host-a", "static", token_digest(HOSTS["host-a"]))
    deep = orjson.dumps(_nested(200)).decode()
    snapshot = orjson.dumps({"agent": {"info": _nested(200)}, "devices": [{
        "device_id": "a1", "driver": "sim", "status": "busy", "attributes": deep, "labels": "{}",
    }]}, option=orjson.OPT_SORT_KEYS).decode()
    await store.heartbeat(host, snapshot)
    report = '{"failure_reason":null,"metadata":%s,"status":"succeeded"}' % orjson.dumps(_nested(250)).decode()
    await store.record_result(host, running["task_id"], 1, running["lease_id"], report)
    for path in ("/api/v1/tasks", f"/api/v1/tasks/{running['task_id']}", "/api/v1/devices",
                 "/api/v1/hosts", "/api/v1/hosts/host-a"):
        response = await api.client.get(path, headers=Api.admin_headers)
        assert response.status_code == 200, path
    task = await api.task(running["task_id"])
    assert task["result"]["metadata"] == _nested(250)


# -- 6. bulk progress never fails the renewal ---------------------------------------------


async def test_a_screenshot_in_progress_is_rejected_and_the_lease_renewed(api: Api) -> None:
    running = await _running(api)
    progress = {"step_index": 1, "status": "running", "summary": "ok", "screenshot": "A" * 60_000}
    response = await api.renew("host-a", running, progress=progress)
    assert response.status_code == 200
    assert response.json()["progress"] == "rejected"
    assert response.json()["lease_expires_at"] >= running["lease_expires_at"]
    deep = await api.renew("host-a", running, progress=_nested(40))
    assert deep.status_code == 200 and deep.json()["progress"] == "rejected"
    assert (await api.task(running["task_id"]))["progress"] is None


async def test_renewal_bodies_past_their_own_limit_are_413(api_factory: Any) -> None:
    async with api_factory(max_renew_body_bytes=100_000) as api:
        running = await _running(api)
        progress = {"step_index": 1, "status": "running", "screenshot": "A" * 100_001}
        response = await api.renew("host-a", running, progress=progress)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"


# -- 7. credential first, then path, then body; revocation bound to the credential ---------


async def test_a_revoked_static_credential_gets_401_whatever_the_path_or_body(api: Api) -> None:
    await api.heartbeat("host-a", ["a1"])
    revoke = await api.client.post("/api/v1/hosts/host-a/revoke", headers=Api.admin_headers)
    assert revoke.status_code == 200 and revoke.json()["revoked"] is True
    headers = Api.host_headers("host-a")
    for method, path, body in [
        ("PUT", "/internal/v1/hosts/host-b/heartbeat", {"devices": []}),  # another host's path
        ("PUT", f"{HOST}/heartbeat", {"devices": "not a list"}),  # a bad body
        ("POST", f"{HOST}/claim?wait_s=-1", None),  # a bad query
        ("POST", f"{HOST}/leases/l_1/renew", {"attempt": "x"}),
        ("POST", f"{HOST}/results", {}),
        ("POST", f"{HOST}/devices/enroll", {"devices": []}),
    ]:
        response = await api.client.request(method, path, headers=headers, json=body)
        assert response.status_code == 401, (path, response.text)
    # A live credential still gets the path's 403 and the body's 400.
    live = Api.host_headers("host-b")
    assert (await api.client.put(f"{HOST}/heartbeat", headers=live, json={"devices": []})).status_code == 403
    assert (await api.client.put("/internal/v1/hosts/host-b/heartbeat", headers=live,
                                 json={"devices": "x"})).status_code == 400


async def test_a_rotated_static_token_works_again(api_factory: Any) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as api:
        await api.client.post("/api/v1/hosts/host-a/revoke", headers=Api.admin_headers)
        assert (await api.heartbeat("host-a", ["a1"])).status_code == 401
    rotated = {**HOSTS, "host-a": "a-brand-new-token-0123456789"}
    async with api_factory(prefix=prefix, static_hosts=rotated) as api:
        response = await api.client.put(f"{HOST}/heartbeat", json={"devices": []},
                                        headers={"authorization": f"Bearer {rotated['host-a']}"})
        assert response.status_code == 200
        view = (await api.client.get("/api/v1/hosts/host-a", headers=Api.admin_headers)).json()
        assert view["revoked"] is False and view["online"] is True
        old = await api.client.put(f"{HOST}/heartbeat", json={"devices": []}, headers=Api.host_headers("host-a"))
        assert old.status_code == 401


async def _enrolled_host(api: Api) -> tuple[str, dict[str, str]]:
    token = (await api.client.post("/api/v1/enrollment-tokens", headers=Api.admin_headers, json={})).json()
    host_token = "h" * 40
    enrolled = await api.client.post(
        "/internal/v1/enroll", headers={"authorization": f"Bearer {token['token']}"},
        json={"enrollment_id": "e-1", "host_token": host_token},
    )
    assert enrolled.status_code == 201
    return enrolled.json()["host_id"], {"authorization": f"Bearer {host_token}"}


async def test_a_revocation_through_one_process_holds_on_another_that_cached_the_credential(
        api_factory: Any) -> None:
    prefix = unique_prefix()
    async with api_factory(prefix=prefix) as first, api_factory(prefix=prefix) as second:
        host_id, headers = await _enrolled_host(first)
        path = f"/internal/v1/hosts/{host_id}"
        assert (await first.client.put(f"{path}/heartbeat", headers=headers, json={"devices": []})).status_code == 200
        revoke = await second.client.post(f"/api/v1/hosts/{host_id}/revoke", headers=Api.admin_headers)
        assert revoke.status_code == 200
        for method, target, body in [
            ("PUT", "/internal/v1/hosts/host-b/heartbeat", {"devices": []}),
            ("PUT", f"{path}/heartbeat", {"devices": 7}),
            ("PUT", f"{path}/heartbeat", {"devices": []}),
            ("POST", f"{path}/devices/enroll", {"devices": "x"}),
        ]:
            response = await first.client.request(method, target, headers=headers, json=body)
            assert response.status_code == 401, (target, response.text)


async def test_enroll_with_a_bad_token_and_a_bad_body_is_401(api: Api) -> None:
    bad_body = {"enrollment_id": "e-1", "host_token": "short"}
    unknown = await api.client.post("/internal/v1/enroll", headers={"authorization": "Bearer tet_nope"},
                                    json=bad_body)
    assert unknown.status_code == 401
    token = (await api.client.post("/api/v1/enrollment-tokens", headers=Api.admin_headers, json={})).json()
    good = {"authorization": f"Bearer {token['token']}"}
    assert (await api.client.post("/internal/v1/enroll", headers=good, json=bad_body)).status_code == 400
    await api.client.delete(f"/api/v1/enrollment-tokens/{token['id']}", headers=Api.admin_headers)
    assert (await api.client.post("/internal/v1/enroll", headers=good, json=bad_body)).status_code == 401


# -- 10. growth limits and text ------------------------------------------------------------


async def test_device_limit_caps_enrollment_and_the_snapshot(api_factory: Any) -> None:
    async with api_factory(max_devices_per_host=3) as api:
        host_id, headers = await _enrolled_host(api)
        path = f"/internal/v1/hosts/{host_id}"

        def batch(*ids: str) -> dict[str, Any]:
            return {"devices": [{"local_id": i, "driver": "sim"} for i in ids]}

        assert (await api.client.post(f"{path}/devices/enroll", headers=headers, json=batch("a", "b"))).status_code == 200
        before = await _state(api)
        for ids in (("c", "d"), ("a", "b", "c", "d")):
            response = await api.client.post(f"{path}/devices/enroll", headers=headers, json=batch(*ids))
            assert response.status_code == 409, ids
            assert response.json()["error"]["code"] == "device_limit"
        assert await _state(api) == before
        # Re-enrolling known devices adds nothing, so it fits; one more new one still does.
        ok = await api.client.post(f"{path}/devices/enroll", headers=headers, json=batch("a", "b", "c"))
        assert ok.status_code == 200

        before = await _state(api)
        snapshot = {"devices": [{"device_id": f"d{i}", "driver": "sim", "status": "available"} for i in range(4)]}
        response = await api.client.put("/internal/v1/hosts/host-a/heartbeat", json=snapshot,
                                        headers=Api.host_headers("host-a"))
        assert response.status_code == 409 and response.json()["error"]["code"] == "device_limit"
        assert await _state(api) == before


async def test_text_is_stored_without_c0_controls_except_tab_and_newline(api: Api) -> None:
    device = {"device_id": "a1", "driver": "sim", "status": "available",
              "attributes": {"model\x07": "Pixel\x1b[31m 7\r"}, "labels": {"room": "lab\x00 1\tB"}}
    assert (await api.heartbeat("host-a", [device])).status_code == 200
    task = (await api.create_task(device_id="a1", goal="line one\nline\x08 two")).json()
    assert task["goal"] == "line one\nline two"
    listed = (await api.client.get("/api/v1/devices", headers=Api.admin_headers)).json()["devices"][0]
    assert listed["attributes"] == {"model": "Pixel[31m 7"}
    assert listed["labels"] == {"room": "lab 1\tB"}
    running = await claim_one(api, "host-a")
    renewed = await api.renew("host-a", running,
                              progress={"step_index": 0, "status": "run\x1bning", "summary": "a\x00b"})
    assert renewed.json()["progress"] == "stored"
    assert (await api.task(running["task_id"]))["progress"] == {
        "step_index": 0, "status": "running", "summary": "ab"}


# -- 11. small slips -------------------------------------------------------------------------


async def test_heartbeat_interval_is_a_whole_number_of_seconds(api_factory: Any) -> None:
    async with api_factory(heartbeat_interval_s=0.3) as api:
        answer = (await api.heartbeat("host-a", [])).json()
        assert answer["heartbeat_interval_s"] == 1 and answer["draining"] is False


async def test_a_short_admin_token_is_warned_about(api_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        async with api_factory(admin_token="short"):
            pass
    warnings = [r.getMessage() for r in caplog.records if "COORDINATOR_ADMIN_TOKEN" in r.getMessage()]
    assert len(warnings) == 1 and "short" not in warnings[0].replace("shorter", "")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="coordinator"):
        async with api_factory(admin_token="x" * 32):
            pass
    assert not [r for r in caplog.records if "COORDINATOR_ADMIN_TOKEN" in r.getMessage()]


@pytest.mark.parametrize("url", [
    "redis://:hunter2-secret@127.0.0.1:6379/0",
    "redis://user:hunter2-secret@127.0.0.1:6379/0",
    "redis://127.0.0.1:6379/0?password=hunter2-secret",
    "rediss://127.0.0.1:6379/0?username=u&password=hunter2-secret",
])
async def test_the_redis_url_is_described_without_its_secret(url: str) -> None:
    assert "hunter2" not in describe_url(url)
    client, description = open_redis(make_settings(unique_prefix(), redis_url=url))
    assert "hunter2" not in description and "127.0.0.1" in description
    assert "hunter2" not in repr(make_settings(unique_prefix(), redis_url=url, admin_token=ADMIN))
    await client.aclose()
