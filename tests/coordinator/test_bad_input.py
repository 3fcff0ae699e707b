"""Bad input gets a clear 4xx with the contract's error code, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.coordinator.helpers import claim_one, redis_state

pytestmark = pytest.mark.anyio


@pytest.fixture
async def running(api: Api) -> dict[str, Any]:
    await api.heartbeat("host-a", ["a1", "a2"])
    await api.create_task(device_id="a1")
    await api.create_task(device_id="a2")
    return await claim_one(api, "host-a")


def _raw(body: bytes) -> dict[str, Any]:
    return {"content": body}


HOST = "/internal/v1/hosts/host-a"
BAD_BODIES: list[tuple[str, str, list[Any]]] = [
    ("PUT", f"{HOST}/heartbeat", [
        b"{not json", b"[]", b'"x"', {}, {"devices": "a1"},
        {"devices": [{"device_id": "bad id!", "driver": "sim", "status": "available"}]},
        {"devices": [{"device_id": "x" * 129, "driver": "sim", "status": "available"}]},
        {"devices": [{"device_id": "a1", "driver": "sim", "status": "sleeping"}]},
        {"devices": [{"device_id": "a1", "driver": 7, "status": "available"}]},
        {"devices": [{"device_id": "a1", "driver": "sim", "status": "available", "labels": {"a": 1}}]},
        {"devices": [{"device_id": "a1", "driver": "sim", "status": "available", "attributes": []}]},
        {"devices": [{"device_id": "a1", "driver": "sim", "status": "available"}] * 2},
        {"devices": ["a1"]},
    ]),
    ("POST", f"{HOST}/claim?wait_s=0", [b"{not json", b"[1]", {"claim_id": "bad id!"}, {"claim_id": 5}]),
    ("POST", f"{HOST}/claim?wait_s=abc", [None]),
    ("POST", f"{HOST}/claim?wait_s=-1", [None]),
    ("POST", f"{HOST}/claim?wait_s=nan", [None]),
    ("POST", f"{HOST}/results", [
        b"{not json", {}, {"task_id": "t", "attempt": 1, "lease_id": "l", "status": "done"},
        {"task_id": "t", "attempt": "1", "lease_id": "l", "status": "succeeded"},
        {"task_id": "t", "attempt": 0, "lease_id": "l", "status": "succeeded"},
        {"task_id": "bad id!", "attempt": 1, "lease_id": "l", "status": "succeeded"},
        {"task_id": "t", "attempt": 1, "lease_id": "l", "status": "succeeded", "metadata": [1]},
        {"task_id": "t", "attempt": 1, "lease_id": "l", "status": "succeeded", "failure_reason": 3},
    ]),
    ("POST", "/api/v1/tasks", [
        b"{not json", b"[]", {}, {"kind": "goal"}, {"kind": "goal", "goal": "x"},
        {"kind": "goal", "goal": "", "device_id": "d"}, {"kind": "goal", "goal": 5, "device_id": "d"},
        {"kind": "shell", "goal": "x", "device_id": "d"},
        {"kind": "goal", "goal": "x", "device_id": "d", "selector": {"driver": "sim"}},
        {"kind": "goal", "goal": "x", "device_id": "bad id!"},
        {"kind": "goal", "goal": "x", "selector": {"labels": {}}},
        {"kind": "goal", "goal": "x", "selector": "sim"},
        {"kind": "goal", "goal": "x", "selector": {"driver": "sim", "labels": {"a": ["b"]}}},
        {"kind": "goal", "goal": "x", "device_id": "d", "max_attempts": 0},
        {"kind": "goal", "goal": "x", "device_id": "d", "max_attempts": True},
        {"kind": "goal", "goal": "x", "device_id": "d", "max_steps": "10"},
        {"kind": "goal", "goal": "x", "device_id": "d", "idempotency_key": "bad key!"},
        {"kind": "workflow", "device_id": "d"},
        {"kind": "workflow", "workflow": {"name": "bad name!"}, "device_id": "d"},
        {"kind": "workflow", "workflow": {"name": "w", "params": []}, "device_id": "d"},
    ]),
]


@pytest.mark.parametrize(("method", "path", "bodies"), BAD_BODIES, ids=[f"{m} {p}" for m, p, _ in BAD_BODIES])
async def test_bad_bodies_are_rejected_and_change_nothing(api: Api, running: dict[str, Any], method: str,
                                                          path: str, bodies: list[Any]) -> None:
    before = await redis_state(api)
    headers = Api.admin_headers if path.startswith("/api") else Api.host_headers("host-a")
    for body in bodies:
        kwargs: dict[str, Any] = _raw(body) if isinstance(body, bytes) else {"json": body}
        response = await api.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_request" and error["message"]
    assert await redis_state(api) == before


async def test_bad_renewals_are_rejected_and_change_nothing(api: Api, running: dict[str, Any]) -> None:
    before = await redis_state(api)
    path = f"{HOST}/leases/{running['lease_id']}/renew"
    for body in (b"{oops", b"[]", {}, {"task_id": running["task_id"]}, {"task_id": 3, "attempt": 1},
                 {"task_id": running["task_id"], "attempt": "1"}, {"task_id": running["task_id"], "attempt": 0}):
        kwargs: dict[str, Any] = _raw(body) if isinstance(body, bytes) else {"json": body}
        response = await api.client.post(path, headers=Api.host_headers("host-a"), **kwargs)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "invalid_request"
    response = await api.client.post(f"{HOST}/leases/bad%20id/renew", headers=Api.host_headers("host-a"),
                                     json={"task_id": running["task_id"], "attempt": 1})
    assert response.status_code == 400
    assert await redis_state(api) == before


async def test_bad_operator_reads(api: Api) -> None:
    for path in ("/api/v1/tasks?status=done", "/api/v1/tasks?limit=0", "/api/v1/tasks?limit=x",
                 "/api/v1/tasks?cursor=abc", "/api/v1/tasks/bad%20id", "/api/v1/hosts/bad%20id"):
        response = await api.client.get(path, headers=api.admin_headers)
        assert response.status_code == 400, path
        assert response.json()["error"]["code"] == "invalid_request"
    assert (await api.client.get("/api/v1/tasks/t_nope", headers=api.admin_headers)).status_code == 404
    missing_route = await api.client.get("/api/v1/nothing", headers=api.admin_headers)
    assert missing_route.status_code == 404 and missing_route.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", f"{HOST}/heartbeat"),
    ("POST", f"{HOST}/claim?wait_s=0"),
    ("POST", f"{HOST}/leases/l_x/renew"),
    ("POST", f"{HOST}/results"),
    ("POST", "/api/v1/tasks"),
])
async def test_oversized_bodies_are_rejected(api_factory, method: str, path: str) -> None:
    async with api_factory(max_body_bytes=1024, max_renew_body_bytes=1024) as api:
        await api.heartbeat("host-a", ["a1"])
        before = await redis_state(api)
        headers = Api.admin_headers if path.startswith("/api") else Api.host_headers("host-a")
        big = {"devices": [], "padding": "x" * 2000}
        response = await api.client.request(method, path, json=big, headers=headers)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"

        async def chunks():  # no Content-Length: the limit holds while streaming too
            for _ in range(4):
                yield b"x" * 400

        response = await api.client.request(method, path, content=chunks(), headers=headers)
        assert response.status_code == 413
        assert await redis_state(api) == before


async def test_unauthenticated_operator_calls_change_nothing(api: Api) -> None:
    before = await redis_state(api)
    for headers in ({}, {"authorization": "Bearer wrong"}, Api.host_headers("host-a")):
        response = await api.client.post("/api/v1/tasks", headers=headers,
                                         json={"kind": "goal", "goal": "x", "device_id": "d"})
        assert response.status_code == 401
        assert response.json() == {"error": {"code": "unauthorized",
                                             "message": "missing, malformed or unknown credential"}}
    assert await redis_state(api) == before
