"""Faults around a real coordinator process: Redis going away, and a poll handled after its client
has gone."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.conftest import ADMIN, HOSTS, unique_prefix
from tests.e2e.processes import coordinator_env, coordinator_process, free_port

pytestmark = pytest.mark.e2e

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}
HOST_A = {"authorization": f"Bearer {HOSTS['host-a']}"}


def _until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


@contextmanager
def _redis_server(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A throwaway redis-server of our own, so the test may stop it."""
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _until(lambda: _answers(port))
        yield process
    finally:
        process.kill()
        process.wait()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to stop and start")
def test_redis_going_away_is_503_unavailable_and_service_resumes_when_it_returns() -> None:
    redis_port = free_port()
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
    with _redis_server(redis_port) as redis, coordinator_process(env) as (url, _):
        heartbeat = {"devices": [{"device_id": "a1", "driver": "sim", "status": "available"}]}
        assert httpx.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=heartbeat, headers=HOST_A).status_code == 200
        redis.kill()
        redis.wait()
        for method, path, headers, body in [
            ("PUT", "/internal/v1/hosts/host-a/heartbeat", HOST_A, heartbeat),
            ("POST", "/internal/v1/hosts/host-a/claim?wait_s=0", HOST_A, None),
            ("GET", "/api/v1/tasks", ADMIN_HEADERS, None),
            ("POST", "/api/v1/tasks", ADMIN_HEADERS, {"kind": "goal", "goal": "g", "device_id": "a1"}),
        ]:
            response = httpx.request(method, f"{url}{path}", headers=headers, json=body, timeout=15)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["content-type"] == "application/json"
            assert response.json()["error"]["code"] == "unavailable"
            assert int(response.headers["retry-after"]) >= 1
        assert httpx.get(f"{url}/readyz").status_code == 503
        with _redis_server(redis_port):  # an empty Redis: the scripts are loaded again on demand
            response = httpx.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=heartbeat, headers=HOST_A)
            assert response.status_code == 200
            _until(lambda: httpx.get(f"{url}/readyz").status_code == 200)


def test_a_poll_whose_client_left_before_it_was_served_claims_nothing() -> None:
    """The coordinator stalls (SIGSTOP); meanwhile a host sends a claim and hangs up. When the
    coordinator resumes it reads the request and the hang-up together: it must not claim."""
    env = coordinator_env(unique_prefix())
    with coordinator_process(env) as (url, process):
        heartbeat = {"devices": [{"device_id": "a1", "driver": "sim", "status": "available"}]}
        assert httpx.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=heartbeat, headers=HOST_A).status_code == 200
        task = httpx.post(f"{url}/api/v1/tasks", headers=ADMIN_HEADERS,
                          json={"kind": "goal", "goal": "g", "device_id": "a1", "max_attempts": 1}).json()
        assert task["status"] == "assigned"
        port = int(url.rsplit(":", 1)[1])
        os.kill(process.pid, signal.SIGSTOP)
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    b"POST /internal/v1/hosts/host-a/claim?wait_s=0 HTTP/1.1\r\nHost: c\r\n"
                    b"Authorization: Bearer " + HOSTS["host-a"].encode() + b"\r\nContent-Length: 0\r\n\r\n"
                )
        finally:
            os.kill(process.pid, signal.SIGCONT)
        _until(lambda: "tether_claims_total{" in httpx.get(f"{url}/metrics").text)
        claims = [line for line in httpx.get(f"{url}/metrics").text.splitlines()
                  if line.startswith("tether_claims_total{")]
        assert claims == ['tether_claims_total{outcome="disconnected"} 1.0']
        assert httpx.get(f"{url}/api/v1/tasks/{task['task_id']}", headers=ADMIN_HEADERS).json()["status"] == "assigned"
        response = httpx.post(f"{url}/internal/v1/hosts/host-a/claim?wait_s=0", headers=HOST_A)
        assert response.status_code == 200 and response.json()["task_id"] == task["task_id"]
