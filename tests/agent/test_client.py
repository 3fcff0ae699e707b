"""The protocol client against httpx.MockTransport: request shapes and the error hierarchy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from agent.answers import (
    Assignment,
    BadRequest,
    Conflict,
    Forbidden,
    MalformedAnswer,
    ProtocolError,
    Rejected,
    TransientError,
    Unauthorized,
)
from agent.client import CLAIM_TIMEOUT_MARGIN_S, CoordinatorClient

pytestmark = pytest.mark.anyio

TOKEN = SecretStr("tht_host-secret-value-0123456789abcdef")
ENROLL = SecretStr("tet_enrollment-secret-0123456789abcdef")

ASSIGNMENT = {
    "task_id": "t-1",
    "attempt": 2,
    "lease_id": "l-1",
    "lease_ttl_ms": 60000,
    "lease_expires_at": "2026-12-02T08:00:00.123Z",
    "device_id": "d-1",
    "kind": "workflow",
    "workflow": {"name": "login-smoke", "params": {"user": "ann"}},
}


class Recorder:
    def __init__(self, respond: Callable[[httpx.Request], httpx.Response]) -> None:
        self.requests: list[httpx.Request] = []
        self._respond = respond

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self._respond(request)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def body(self) -> Any:
        return json.loads(self.last.content)


def make(respond: Callable[[httpx.Request], httpx.Response]) -> tuple[CoordinatorClient, Recorder]:
    recorder = Recorder(respond)
    client = CoordinatorClient(
        "http://coord.test/", transport=httpx.MockTransport(recorder), timeout=httpx.Timeout(7.0)
    )
    return client, recorder


def answer(status: int, body: Any = None) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, json=body) if body is not None else httpx.Response(status)


def error(status: int, code: str) -> Callable[[httpx.Request], httpx.Response]:
    return answer(status, {"error": {"code": code, "message": "no"}})


async def test_enroll_sends_the_generated_identity_with_the_enrollment_token() -> None:
    client, rec = make(answer(201, {"host_id": "h-9", "created": True}))
    async with client:
        got = await client.enroll(
            ENROLL, enrollment_id="e-1", host_token=TOKEN, hostname="lab-7", labels={"site": "berlin"}
        )
    assert got == {"host_id": "h-9", "created": True}
    assert (rec.last.method, rec.last.url.path) == ("POST", "/internal/v1/enroll")
    assert rec.last.headers["authorization"] == f"Bearer {ENROLL.get_secret_value()}"
    assert rec.body() == {
        "enrollment_id": "e-1",
        "host_token": TOKEN.get_secret_value(),
        "hostname": "lab-7",
        "labels": {"site": "berlin"},
    }


async def test_enroll_devices_heartbeat_renew_results_shapes() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/devices/enroll"):
            return httpx.Response(200, json={"devices": [{"local_id": "p1", "driver": "sim", "device_id": "d-1"}]})
        if path.endswith("/heartbeat"):
            return httpx.Response(200, json={"host_id": "h-1", "devices": 1, "heartbeat_interval_s": 15})
        if path.endswith("/renew"):
            return httpx.Response(200, json={"lease_ttl_ms": 60000, "cancel_requested": False, "progress": "stored"})
        return httpx.Response(200, json={"task_id": "t-1", "attempt": 2, "status": "succeeded", "replayed": False})

    client, rec = make(respond)
    host = client.host("h-1", TOKEN)
    async with client:
        enrolled = await host.enroll_devices([{"local_id": "p1", "driver": "sim", "attributes": {}}])
        assert enrolled == [{"local_id": "p1", "driver": "sim", "device_id": "d-1"}]
        assert (rec.last.method, rec.last.url.path) == ("POST", "/internal/v1/hosts/h-1/devices/enroll")

        await host.heartbeat([{"device_id": "d-1", "driver": "sim", "status": "available"}], {"version": "1"})
        assert (rec.last.method, rec.last.url.path) == ("PUT", "/internal/v1/hosts/h-1/heartbeat")
        assert rec.body() == {
            "devices": [{"device_id": "d-1", "driver": "sim", "status": "available"}],
            "agent": {"version": "1"},
        }

        await host.renew("l-1", task_id="t-1", attempt=2, progress=None)
        assert rec.last.url.path == "/internal/v1/hosts/h-1/leases/l-1/renew"
        assert rec.body() == {"task_id": "t-1", "attempt": 2}
        progress = {"step_index": 4, "status": "running", "summary": "Opened Settings"}
        await host.renew("l-1", task_id="t-1", attempt=2, progress=progress)
        assert rec.body() == {"task_id": "t-1", "attempt": 2, "progress": progress}

        await host.report_result(
            task_id="t-1", attempt=2, lease_id="l-1", status="failed", failure_reason="x", metadata={"steps": 7}
        )
        assert rec.last.url.path == "/internal/v1/hosts/h-1/results"
        assert rec.body() == {
            "task_id": "t-1", "attempt": 2, "lease_id": "l-1", "status": "failed",
            "failure_reason": "x", "metadata": {"steps": 7},
        }  # not retryable: the field is left out, never sent as false
        await host.report_result(
            task_id="t-1", attempt=2, lease_id="l-1", status="failed", failure_reason="device_lost",
            metadata={"steps": 3}, retryable=True,
        )
        assert rec.body() == {
            "task_id": "t-1", "attempt": 2, "lease_id": "l-1", "status": "failed",
            "failure_reason": "device_lost", "metadata": {"steps": 3}, "retryable": True,
        }
    for request in rec.requests:
        assert request.headers["authorization"] == f"Bearer {TOKEN.get_secret_value()}"
        assert request.headers["content-type"] == "application/json"


async def test_claim_returns_assignment_or_none_and_waits_longer_than_wait_s() -> None:
    client, rec = make(answer(200, ASSIGNMENT))
    async with client:
        got = await client.host("h-1", TOKEN).claim("c-1", 25)
    assert got == Assignment(
        task_id="t-1", attempt=2, lease_id="l-1", lease_ttl_ms=60000, device_id="d-1", kind="workflow",
        workflow_name="login-smoke", workflow_params={"user": "ann"},
    )
    assert rec.last.url.path == "/internal/v1/hosts/h-1/claim"
    assert rec.last.url.params["wait_s"] == "25"
    assert rec.body() == {"claim_id": "c-1"}
    timeout = rec.last.extensions["timeout"]
    assert timeout["read"] == 7.0 + 25 + CLAIM_TIMEOUT_MARGIN_S > 25
    assert timeout["connect"] == 7.0

    client, rec = make(answer(204))
    async with client:
        assert await client.host("h-1", TOKEN).claim("c-2", 0) is None


async def test_goal_assignment_parses() -> None:
    data = {**ASSIGNMENT, "kind": "goal", "goal": "Turn on airplane mode", "max_steps": 30}
    del data["workflow"]
    parsed = Assignment.from_wire(data)
    assert (parsed.kind, parsed.goal, parsed.max_steps, parsed.workflow_name) == (
        "goal", "Turn on airplane mode", 30, None
    )


@pytest.mark.parametrize(
    "broken",
    [
        {k: v for k, v in ASSIGNMENT.items() if k != "lease_id"},
        {**ASSIGNMENT, "attempt": "2"},
        {**ASSIGNMENT, "lease_ttl_ms": 0},
        ["not", "an", "object"],
    ],
)
async def test_malformed_assignment_is_malformed_answer(broken: Any) -> None:
    client, _ = make(answer(200, broken))
    async with client:
        with pytest.raises(MalformedAnswer):
            await client.host("h-1", TOKEN).claim("c-1", 0)


@pytest.mark.parametrize(
    ("respond", "kind", "code"),
    [
        (error(401, "unauthorized"), Unauthorized, "unauthorized"),
        (error(403, "forbidden"), Forbidden, "forbidden"),
        (error(409, "lease_expired"), Conflict, "lease_expired"),
        (error(409, "lease_replaced"), Conflict, "lease_replaced"),
        (error(400, "invalid_request"), BadRequest, "invalid_request"),
        (error(413, "payload_too_large"), BadRequest, "payload_too_large"),
        (error(500, "internal_error"), TransientError, "internal_error"),
        (lambda r: httpx.Response(503, text="<html>down</html>"), TransientError, None),
        (error(429, "too_many_requests"), TransientError, "too_many_requests"),
        (lambda r: httpx.Response(200, text="not json"), TransientError, None),
    ],
)
async def test_error_answers_map_to_the_hierarchy(
    respond: Callable[[httpx.Request], httpx.Response], kind: type[ProtocolError], code: str | None
) -> None:
    client, _ = make(respond)
    async with client:
        with pytest.raises(kind) as caught:
            await client.host("h-1", TOKEN).renew("l-1", task_id="t", attempt=1, progress=None)
    assert caught.value.code == code
    assert isinstance(caught.value, ProtocolError)
    assert isinstance(caught.value, Rejected) == (kind not in (TransientError,))
    assert TOKEN.get_secret_value() not in str(caught.value)
    # the log line names the request and the answer's status (built only on an error: answers.py)
    assert str(caught.value).startswith("POST http://coord.test/internal/v1/hosts/h-1/")
    assert f": HTTP {caught.value.status}" in str(caught.value)


async def test_error_details_are_kept() -> None:
    body = {"error": {"code": "unknown_device", "message": "no", "details": {"device_id": "d-9"}}}
    client, _ = make(answer(409, body))
    async with client:
        with pytest.raises(Conflict) as caught:
            await client.host("h-1", TOKEN).heartbeat([], {"version": "1"})
    assert (caught.value.code, caught.value.details) == ("unknown_device", {"device_id": "d-9"})


@pytest.mark.parametrize(
    "exc",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.ReadError("reset"),
     httpx.RemoteProtocolError("garbled")],
)
async def test_network_errors_are_transient(exc: Exception) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        raise exc

    client, _ = make(respond)
    async with client:
        with pytest.raises(TransientError) as caught:
            await client.host("h-1", TOKEN).claim("c-1", 5)
    assert caught.value.status is None


async def test_secrets_stay_out_of_reprs() -> None:
    client, _ = make(answer(204))
    async with client:
        host = client.host("h-1", TOKEN)
        assert TOKEN.get_secret_value() not in repr(host) + repr(client) + repr(vars(host))
