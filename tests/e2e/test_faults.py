"""Faults around a real coordinator process: Redis going away or restarting, and a poll handled
after its client has gone."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.history.checker import verify
from tests.history.records import History, RecordingTransport
from tests.support import (
    ADMIN,
    HOSTS,
    coordinator_env,
    coordinator_process,
    free_port,
    fresh_prefix,
    redis_server,
    unique_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}
HOST_A = {"authorization": f"Bearer {HOSTS['host-a']}"}


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to stop and start")
def test_redis_going_away_is_503_unavailable_and_service_resumes_when_it_returns() -> None:
    redis_port = free_port()
    # The prefix is on the throwaway server: nothing to clean up on the shared one.
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
    history = History()  # every call is recorded and the run's history checked at the end
    with (redis_server(redis_port) as redis, coordinator_process(env) as coordinator,
          httpx.Client(transport=RecordingTransport(history), timeout=15) as client):
        url = coordinator.url
        heartbeat = {"devices": [{"device_id": "a1", "driver": "sim", "status": "available"}]}
        assert client.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=heartbeat, headers=HOST_A).status_code == 200
        redis.kill()
        redis.wait()
        for method, path, headers, body in [
            ("PUT", "/internal/v1/hosts/host-a/heartbeat", HOST_A, heartbeat),
            ("POST", "/internal/v1/hosts/host-a/claim?wait_s=0", HOST_A, None),
            ("GET", "/api/v1/tasks", ADMIN_HEADERS, None),
            ("POST", "/api/v1/tasks", ADMIN_HEADERS, {"kind": "goal", "goal": "g", "device_id": "a1"}),
        ]:
            response = client.request(method, f"{url}{path}", headers=headers, json=body)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["content-type"] == "application/json"
            assert response.json()["error"]["code"] == "unavailable"
            assert int(response.headers["retry-after"]) >= 1
        assert httpx.get(f"{url}/readyz").status_code == 503
        with redis_server(redis_port):  # an empty Redis: the scripts are loaded again on demand
            # A request racing the pool's reconnection may still get the 503 it is told to retry
            # (Retry-After); what must hold is that service resumes, without a restart.
            def heartbeat_accepted() -> bool:
                put = client.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=heartbeat, headers=HOST_A)
                assert put.status_code in (200, 503), put.text
                return put.status_code == 200

            wait_until(heartbeat_accepted, 10, 0.05, what="heartbeats accepted again")
            wait_until(lambda: coordinator.api.get("/readyz").status_code == 200, 10, 0.02, what="ready again")
    verify(history, at_least=6)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to stop and start")
def test_after_redis_restarts_the_requests_that_follow_are_served_not_503() -> None:
    """The connections the pool held were closed by the restarted Redis; each is replaced before a
    request is given it. The reaper sweeps rarely here, so the closed connections wait for the
    requests instead of being used up by its sweeps first."""
    redis_port = free_port()
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
                          COORDINATOR_REAPER_INTERVAL_S="60")
    burst = 8  # the pool's size: every connection it may hold is checked out at once

    def listed(client: httpx.Client) -> int:
        return client.get("/api/v1/webhooks").status_code  # one read on a connection of the pool

    with (redis_server(redis_port) as redis, coordinator_process(env) as coordinator,
          ThreadPoolExecutor(burst) as pool):
        clients = [httpx.Client(base_url=coordinator.url, headers=ADMIN_HEADERS, timeout=15) for _ in range(burst)]
        try:
            assert set(pool.map(listed, clients)) == {200}  # the pool now holds open connections
            redis.kill()
            redis.wait()
            with redis_server(redis_port):  # an empty Redis on the same port
                assert listed(clients[0]) == 200
                assert list(pool.map(listed, clients)) == [200] * burst
                assert coordinator.api.post("/api/v1/tasks", json={"kind": "goal", "goal": "g", "device_id": "a1"}
                                            ).status_code == 201
        finally:
            for client in clients:
                client.close()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to stop and start")
def test_after_a_redis_outage_a_waiting_poll_is_woken_within_about_a_second_of_redis_answering() -> None:
    """A poll waits on the process's wake-up loop, which retries Redis throughout the outage: it
    must try again soon enough once Redis answers, however long the outage lasted."""
    redis_port = free_port()
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
    with (redis_server(redis_port) as redis, coordinator_process(env) as coordinator,
          ThreadPoolExecutor(1) as pool):
        process = coordinator.process
        assert process is not None
        redis.kill()
        redis.wait()
        wait_until(lambda: "wake-up inbox: Redis unreachable" in process.log(), 10, what="the outage noticed")
        # The outage lasts long enough for the loop's waits between tries to grow (the scenario,
        # not a wait for a condition).
        time.sleep(2.5)
        with redis_server(redis_port):
            back = time.monotonic()
            wait_until(lambda: coordinator.api.put("/internal/v1/hosts/host-a/heartbeat", headers=HOST_A, json={
                "devices": [{"device_id": "a1", "driver": "sim", "status": "available"}]}).status_code == 200,
                5, 0.02, what="the host's heartbeat accepted")

            def poll() -> tuple[int, float]:
                response = httpx.post(f"{coordinator.url}/internal/v1/hosts/host-a/claim?wait_s=10",
                                      headers=HOST_A, timeout=15)
                return response.status_code, time.monotonic()

            answer = pool.submit(poll)
            wait_until(lambda: "tether_waiting_polls 1.0" in coordinator.api.get("/metrics").text, 5, 0.02,
                       what="the poll waiting")
            coordinator.create_task(goal="g", device_id="a1")
            status, answered = answer.result(timeout=15)
    assert status == 200
    assert answered - back < 1.5, f"the poll was answered {answered - back:.2f} s after Redis was back"


def test_a_poll_whose_client_left_before_it_was_served_claims_nothing() -> None:
    """The coordinator stalls (SIGSTOP); meanwhile a host sends a claim and hangs up. When the
    coordinator resumes it reads the request and the hang-up together: it must not claim."""
    with fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix)) as coordinator:
        url, pid = coordinator.url, coordinator.pid
        coordinator.heartbeat("host-a", ["a1"])
        task = coordinator.create_task(goal="g", device_id="a1", max_attempts=1)
        assert task["status"] == "assigned"
        port = coordinator.port
        os.kill(pid, signal.SIGSTOP)
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    b"POST /internal/v1/hosts/host-a/claim?wait_s=0 HTTP/1.1\r\nHost: c\r\n"
                    b"Authorization: Bearer " + HOSTS["host-a"].encode() + b"\r\nContent-Length: 0\r\n\r\n"
                )
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: "tether_claims_total{" in coordinator.api.get("/metrics").text, 10, 0.02,
                   what="the claim counted")
        claims = [line for line in httpx.get(f"{url}/metrics").text.splitlines()
                  if line.startswith("tether_claims_total{")]
        assert claims == ['tether_claims_total{outcome="disconnected"} 1.0']
        assert httpx.get(f"{url}/api/v1/tasks/{task['task_id']}", headers=ADMIN_HEADERS).json()["status"] == "assigned"
        response = httpx.post(f"{url}/internal/v1/hosts/host-a/claim?wait_s=0", headers=HOST_A)
        assert response.status_code == 200 and response.json()["task_id"] == task["task_id"]
