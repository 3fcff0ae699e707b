"""Managed identity: minted and persisted (0600, atomically) before enrolling, retried as the
identical request, reused on restart without the enrollment token, which is never written."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from agent.client import CoordinatorClient
from agent.identity import (
    HOST_TOKEN_PREFIX,
    HostIdentity,
    StartupError,
    StateStore,
    atomic_write_json,
    enroll_devices,
    resolve_identity,
)
from agent.retry import RetryPolicy
from agent.runtime import DeviceRecord
from agent.settings import AgentSettings, ConfigError

pytestmark = pytest.mark.anyio

ENROLL_SECRET = "tet_enrollment-secret-do-not-write-0123456789"


def settings(state_dir: Path | None, *, enrollment_token: str | None = ENROLL_SECRET, **extra: Any) -> AgentSettings:
    values: dict[str, Any] = {"url": "http://coord.test", "state_dir": state_dir, "hostname": "lab-7"}
    if enrollment_token is not None:
        values["enrollment_token"] = SecretStr(enrollment_token)
    values.update(extra)
    return AgentSettings(_env_file=None, **values)


class EnrollServer:
    """A coordinator's enroll endpoints: idempotent by (token, enrollment_id, host_token)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []
        self.identity_on_disk_at_call: list[dict[str, Any] | None] = []
        self.hosts: dict[str, tuple[str, str]] = {}  # enrollment_id -> (host_token, host_id)
        self.lose_responses = 0
        self.drop_requests = 0
        self.answer: Callable[[dict[str, Any]], httpx.Response] | None = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.auth.append(request.headers["authorization"])
        if request.url.path.endswith("/devices/enroll"):
            self.requests.append(body)
            return httpx.Response(200, json={"devices": [
                {"local_id": d["local_id"], "driver": d["driver"], "device_id": f"dev-{d['local_id']}"}
                for d in body["devices"]
            ]})
        path = self.state_dir / "identity.json"
        self.identity_on_disk_at_call.append(json.loads(path.read_text()) if path.exists() else None)
        self.requests.append(body)
        if self.drop_requests:
            self.drop_requests -= 1
            raise httpx.ConnectError("refused", request=request)
        if self.answer is not None:
            return self.answer(body)
        known = self.hosts.get(body["enrollment_id"])
        if known is None:
            self.hosts[body["enrollment_id"]] = (body["host_token"], f"host-{len(self.hosts) + 1}")
            response = httpx.Response(201, json={"host_id": self.hosts[body["enrollment_id"]][1], "created": True})
        elif known[0] != body["host_token"]:
            response = httpx.Response(409, json={"error": {"code": "enrollment_conflict", "message": "x"}})
        else:
            response = httpx.Response(200, json={"host_id": known[1], "created": False})
        if self.lose_responses:
            self.lose_responses -= 1
            raise httpx.ReadError("reset", request=request)
        return response

    def client(self) -> CoordinatorClient:
        return CoordinatorClient("http://coord.test", transport=httpx.MockTransport(self.handle))


def backoff() -> RetryPolicy:
    return RetryPolicy(base_s=0.001, cap_s=0.005)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


async def test_first_start_persists_identity_0600_before_enrolling(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = EnrollServer(state)
    async with server.client() as client:
        identity = await resolve_identity(settings(state), client, backoff())
    assert identity.managed and identity.host_id == "host-1"
    [request] = server.requests
    assert server.auth == [f"Bearer {ENROLL_SECRET}"]
    # Written before the call, and the call carries exactly what was written.
    on_disk = server.identity_on_disk_at_call[0]
    assert on_disk == {"enrollment_id": request["enrollment_id"], "host_token": request["host_token"], "host_id": None}
    assert request["hostname"] == "lab-7"
    assert request["host_token"].startswith(HOST_TOKEN_PREFIX) and len(request["host_token"]) >= 32
    assert identity.token.get_secret_value() == request["host_token"]
    stored = json.loads((state / "identity.json").read_text())
    assert stored["host_id"] == "host-1"
    assert mode(state / "identity.json") == 0o600
    assert mode(state) == 0o700
    assert ENROLL_SECRET.encode() not in all_bytes(state)
    assert [p.name for p in state.iterdir()] == ["identity.json"]  # no temporary files left


async def test_lost_enroll_responses_are_retried_as_the_identical_request(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = EnrollServer(state)
    server.drop_requests = 1
    server.lose_responses = 2
    async with server.client() as client:
        identity = await resolve_identity(settings(state), client, backoff())
    assert len(server.requests) == 4
    assert all(r == server.requests[0] for r in server.requests)
    assert identity.host_id == "host-1" and len(server.hosts) == 1


async def test_restart_reuses_identity_without_the_enrollment_token(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = EnrollServer(state)
    async with server.client() as client:
        first = await resolve_identity(settings(state), client, backoff())
        again = await resolve_identity(settings(state, enrollment_token=None), client, backoff())
        with_token = await resolve_identity(settings(state), client, backoff())
    assert len(server.requests) == 1  # no enrollment call after the first
    assert again == first == with_token


async def test_crash_between_persist_and_answer_resends_the_same_enrollment(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = EnrollServer(state)
    server.answer = lambda body: httpx.Response(503)
    async with server.client() as client:
        # The first process dies (cancelled) while the coordinator is unreachable ...
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await resolve_identity(settings(state), client, RetryPolicy(base_s=0.01, cap_s=0.02))
        unfinished = json.loads((state / "identity.json").read_text())
        assert unfinished["host_id"] is None
        # ... and the next one finishes the same enrollment.
        server.answer = None
        identity = await resolve_identity(settings(state), client, backoff())
    assert {r["enrollment_id"] for r in server.requests} == {unfinished["enrollment_id"]}
    assert {r["host_token"] for r in server.requests} == {unfinished["host_token"]}
    assert identity.token.get_secret_value() == unfinished["host_token"]


async def test_unfinished_enrollment_without_token_is_a_config_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    StateStore(state).save_identity("e-1", SecretStr("tht_x" * 8), None)
    async with EnrollServer(state).client() as client:
        with pytest.raises(ConfigError, match="unfinished"):
            await resolve_identity(settings(state, enrollment_token=None), client, backoff())


@pytest.mark.parametrize(
    ("status", "code", "needle"),
    [(401, "unauthorized", "rejected the enrollment token"), (409, "enrollment_conflict", "enrollment_conflict"),
     (400, "invalid_request", "enrollment failed")],
)
async def test_refused_enrollment_is_a_startup_error(tmp_path: Path, status: int, code: str, needle: str) -> None:
    state = tmp_path / "state"
    server = EnrollServer(state)
    server.answer = lambda body: httpx.Response(status, json={"error": {"code": code, "message": "no"}})
    async with server.client() as client:
        with pytest.raises(StartupError, match=needle) as caught:
            await resolve_identity(settings(state), client, backoff())
    assert ENROLL_SECRET not in str(caught.value)


async def test_legacy_identity_never_enrolls(tmp_path: Path) -> None:
    server = EnrollServer(tmp_path)
    legacy = settings(None, enrollment_token=None, host_id="host-a", token=SecretStr("tok-a-0123456789"))
    async with server.client() as client:
        identity = await resolve_identity(legacy, client, backoff())
        mapping = await enroll_devices(
            identity, client.host("host-a", identity.token), [DeviceRecord(local_id="phone-1", driver="sim")], None, backoff()
        )
    assert identity == HostIdentity("host-a", SecretStr("tok-a-0123456789"), managed=False)
    assert mapping == {"phone-1": "phone-1"}
    assert server.requests == []


async def test_managed_devices_are_enrolled_and_the_map_persisted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = EnrollServer(state)
    async with server.client() as client:
        identity = await resolve_identity(settings(state), client, backoff())
        devices = [
            DeviceRecord(local_id="phone-1", driver="sim", attributes={"model": "Tether Sim"}),
            DeviceRecord(local_id="emulator-5554", driver="adb"),
        ]
        mapping = await enroll_devices(identity, client.host(identity.host_id, identity.token), devices, state, backoff())
    assert mapping == {"phone-1": "dev-phone-1", "emulator-5554": "dev-emulator-5554"}
    assert server.requests[-1] == {"devices": [
        {"local_id": "phone-1", "driver": "sim", "attributes": {"model": "Tether Sim"}},
        {"local_id": "emulator-5554", "driver": "adb", "attributes": {}},
    ]}
    assert server.auth[-1] == f"Bearer {identity.token.get_secret_value()}"
    assert StateStore(state).load_device_map() == {
        "phone-1": {"driver": "sim", "device_id": "dev-phone-1"},
        "emulator-5554": {"driver": "adb", "device_id": "dev-emulator-5554"},
    }
    assert mode(state / "devices.json") == 0o600
    assert ENROLL_SECRET.encode() not in all_bytes(state)


def test_atomic_write_keeps_the_old_file_when_replacing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "s" / "identity.json"
    atomic_write_json(target, {"version": 1})

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_json(target, {"version": 2})
    assert json.loads(target.read_text()) == {"version": 1}
    assert [p.name for p in target.parent.iterdir()] == ["identity.json"]


def test_atomic_write_mode_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        atomic_write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert mode(tmp_path / "x.json") == 0o600


@pytest.mark.parametrize("content", ["not json", "[]", '{"enrollment_id": 1}'])
def test_corrupt_state_is_a_clear_startup_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "identity.json").write_text(content)
    with pytest.raises(StartupError, match=r"identity\.json"):
        StateStore(tmp_path).load_identity()
