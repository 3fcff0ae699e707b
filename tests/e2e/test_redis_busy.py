"""Redis busy with another client's script is an outage, not a traceback (issue 57 item 9): while
a script of someone else's holds the coordinator's Redis, requests get ``503 unavailable`` with
``Retry-After``, and the background loops (the reaper, webhook delivery) log one line each and
keep trying; once the script is killed, everything resumes. A real coordinator process on a
redis-server of the test's own (a short ``busy-reply-threshold``), so the Redis the other tests
share is never made busy."""

from __future__ import annotations

import re
import shutil
import threading

import httpx
import pytest
import redis

from tests.support import (
    ADMIN,
    HOSTS,
    CoordinatorProcess,
    coordinator_env,
    coordinator_process,
    free_port,
    redis_server,
    unique_prefix,
    wait_until,
)

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server of its own")]

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}
HOST_A = {"authorization": f"Bearer {HOSTS['host-a']}"}
HEARTBEAT = {"devices": [{"device_id": "a1", "driver": "sim", "status": "available"}]}
# Loops whose every pass calls Redis: each must say "busy" once, and "reachable again" once.
LOOPS = ("requests and reaper", "webhook delivery")


def _busy(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=2) as client:
        try:
            client.get("anything")
        except redis.ResponseError as exc:
            return str(exc).startswith("BUSY")
    return False


def _log(coordinator: CoordinatorProcess) -> str:
    assert coordinator.process is not None
    return coordinator.process.log()


def test_a_redis_busy_with_another_script_is_503_unavailable_and_the_loops_log_one_line_and_resume() -> None:
    port = free_port()
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://127.0.0.1:{port}/0",
                          COORDINATOR_REAPER_INTERVAL_S="0.05", COORDINATOR_WEBHOOK_POLL_INTERVAL_S="0.05")
    with redis_server(port, "--busy-reply-threshold", "50") as _, coordinator_process(env) as coordinator:
        url = coordinator.url
        assert httpx.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=HEARTBEAT, headers=HOST_A).status_code == 200
        killed: list[str] = []

        def hold() -> None:  # another deployment's script that runs until it is killed
            with redis.Redis(port=port) as other:
                try:
                    other.eval("while true do end", 0)
                except redis.ResponseError as exc:
                    killed.append(str(exc))

        holder = threading.Thread(target=hold, name="busy script")
        holder.start()
        try:
            wait_until(lambda: _busy(port), 10, 0.02, what="Redis busy with the script")
            for method, path, headers, body in [
                ("PUT", "/internal/v1/hosts/host-a/heartbeat", HOST_A, HEARTBEAT),
                ("POST", "/internal/v1/hosts/host-a/claim?wait_s=0", HOST_A, None),
                ("GET", "/api/v1/tasks", ADMIN_HEADERS, None),
                ("POST", "/api/v1/tasks", ADMIN_HEADERS, {"kind": "goal", "goal": "g", "device_id": "a1"}),
            ]:
                response = httpx.request(method, f"{url}{path}", headers=headers, json=body, timeout=15)
                assert response.status_code == 503, (path, response.text)
                assert response.json()["error"]["code"] == "unavailable"
                assert int(response.headers["retry-after"]) >= 1
            wait_until(lambda: all(f"{loop}: Redis busy" in _log(coordinator) for loop in LOOPS), 10,
                       what="each loop's one line about the busy Redis")
        finally:
            with redis.Redis(port=port) as killer:
                killer.script_kill()
            holder.join(10)
        assert killed and "killed" in killed[0].lower()
        wait_until(lambda: httpx.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json=HEARTBEAT,
                                     headers=HOST_A).status_code == 200, 10, 0.05, what="heartbeats accepted again")
        wait_until(lambda: all(f"{loop}: Redis reachable again" in _log(coordinator) for loop in LOOPS), 10,
                   what="each loop's line that Redis answers again")
        log = _log(coordinator)
    for loop in LOOPS:
        assert len(re.findall(rf"{loop}: Redis busy", log)) == 1, log
    assert "Traceback" not in log, log
