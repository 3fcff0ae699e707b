"""Input that is too deep, too bulky or too many: refused with the contract's code and nothing
changed, or (bulk progress) dropped while the renewal goes through; text stored without C0
controls; and views that still answer data stored before the limits existed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from coordinator.api.auth import HostPrincipal, token_digest
from tests.conftest import HOSTS, Api
from tests.coordinator.helpers import (
    claim_one,
    enrolled_host,
    nested,
    redis_state,
    running_task,
)

pytestmark = pytest.mark.anyio

HOST = "/internal/v1/hosts/host-a"


async def test_json_deeper_than_32_levels_is_400_and_changes_nothing(api: Api) -> None:
    running = await running_task(api)
    before = await redis_state(api)
    # The body object is level 1, so metadata may nest 31 more levels.
    deep_result = await api.result("host-a", running, metadata=nested(32))
    assert deep_result.status_code == 400
    assert deep_result.json()["error"]["code"] == "invalid_request"
    deep_heartbeat = await api.heartbeat(
        "host-a", [{"device_id": "a1", "driver": "sim", "status": "available", "attributes": nested(31)}]
    )
    assert deep_heartbeat.status_code == 400
    deep_task = await api.create_task(kind="workflow", workflow={"name": "w", "params": nested(31)},
                                      device_id="a1")
    assert deep_task.status_code == 400
    assert await redis_state(api) == before
    assert (await api.result("host-a", running, metadata=nested(31))).status_code == 200


async def test_operator_views_answer_whatever_a_host_stored(api: Api) -> None:
    """Data stored before the depth limit existed (deeper than orjson writes) is still shown."""
    running = await running_task(api)
    store = api.ctx.store
    host = HostPrincipal("host-a", "static", token_digest(HOSTS["host-a"]))
    deep = orjson.dumps(nested(200)).decode()
    snapshot = orjson.dumps({"agent": {"info": nested(200)}, "devices": [{
        "device_id": "a1", "driver": "sim", "status": "busy", "attributes": deep, "labels": "{}",
    }]}, option=orjson.OPT_SORT_KEYS).decode()
    await store.heartbeat(host, snapshot)
    report = f'{{"failure_reason":null,"metadata":{orjson.dumps(nested(250)).decode()},"status":"succeeded"}}'
    await store.record_result(host, running["task_id"], 1, running["lease_id"], report)
    for path in ("/api/v1/tasks", f"/api/v1/tasks/{running['task_id']}", "/api/v1/devices",
                 "/api/v1/hosts", "/api/v1/hosts/host-a"):
        response = await api.client.get(path, headers=Api.admin_headers)
        assert response.status_code == 200, path
    task = await api.task(running["task_id"])
    assert task["result"]["metadata"] == nested(250)


# -- 6. bulk progress never fails the renewal ---------------------------------------------


async def test_a_screenshot_in_progress_is_rejected_and_the_lease_renewed(api: Api) -> None:
    running = await running_task(api)
    progress = {"step_index": 1, "status": "running", "summary": "ok", "screenshot": "A" * 60_000}
    response = await api.renew("host-a", running, progress=progress)
    assert response.status_code == 200
    assert response.json()["progress"] == "rejected"
    assert response.json()["lease_expires_at"] >= running["lease_expires_at"]
    deep = await api.renew("host-a", running, progress=nested(40))
    assert deep.status_code == 200 and deep.json()["progress"] == "rejected"
    assert (await api.task(running["task_id"]))["progress"] is None


async def test_renewal_bodies_past_their_own_limit_are_413(api_factory: Any) -> None:
    async with api_factory(max_renew_body_bytes=100_000) as api:
        running = await running_task(api)
        progress = {"step_index": 1, "status": "running", "screenshot": "A" * 100_001}
        response = await api.renew("host-a", running, progress=progress)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"



async def test_device_limit_caps_enrollment_and_the_snapshot(api_factory: Any) -> None:
    async with api_factory(max_devices_per_host=3) as api:
        host_id, headers = await enrolled_host(api)
        path = f"/internal/v1/hosts/{host_id}"

        def batch(*ids: str) -> dict[str, Any]:
            return {"devices": [{"local_id": i, "driver": "sim"} for i in ids]}

        assert (await api.client.post(f"{path}/devices/enroll", headers=headers, json=batch("a", "b"))).status_code == 200
        before = await redis_state(api)
        for ids in (("c", "d"), ("a", "b", "c", "d")):
            response = await api.client.post(f"{path}/devices/enroll", headers=headers, json=batch(*ids))
            assert response.status_code == 409, ids
            assert response.json()["error"]["code"] == "device_limit"
        assert await redis_state(api) == before
        # Re-enrolling known devices adds nothing, so it fits; one more new one still does.
        ok = await api.client.post(f"{path}/devices/enroll", headers=headers, json=batch("a", "b", "c"))
        assert ok.status_code == 200

        before = await redis_state(api)
        snapshot = {"devices": [{"device_id": f"d{i}", "driver": "sim", "status": "available"} for i in range(4)]}
        response = await api.client.put("/internal/v1/hosts/host-a/heartbeat", json=snapshot,
                                        headers=Api.host_headers("host-a"))
        assert response.status_code == 409 and response.json()["error"]["code"] == "device_limit"
        assert await redis_state(api) == before


async def test_text_is_stored_without_c0_controls_except_tab_and_newline(api: Api) -> None:
    # Labels are keys, judged as sent (a control in one is refused: test_exact_ids.py); a tab is
    # no control there either.
    device = {"device_id": "a1", "driver": "sim", "status": "available",
              "attributes": {"model\x07": "Pixel\x1b[31m 7\r"}, "labels": {"room": "lab 1\tB"}}
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
