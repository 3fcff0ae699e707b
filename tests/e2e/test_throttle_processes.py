"""The failed-credential throttle across two real coordinator processes on one Redis prefix: the
failures sent to either count together, both answer 429 once the address is throttled, a valid
credential still gets through on both, and one line in one log says so, with no secret."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support import (
    ADMIN,
    HOSTS,
    coordinator_env,
    coordinator_process,
    fresh_prefix,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ALLOWED = 5
WRONG = "tet_wrong-enrollment-token-0123456789"


async def test_two_processes_throttle_one_address_together() -> None:
    with fresh_prefix() as prefix:
        env = coordinator_env(prefix, COORDINATOR_AUTH_FAILURES_MAX=ALLOWED, COORDINATOR_AUTH_THROTTLE_S=30,
                              COORDINATOR_LOG_FORMAT="json")
        with coordinator_process(env) as first, coordinator_process(env) as second:
            urls = (first.url, second.url)
            async with httpx.AsyncClient(timeout=10) as client:

                async def enroll(url: str, token: str, enrollment_id: str = "e-1") -> httpx.Response:
                    return await client.post(f"{url}/internal/v1/enroll",
                                             headers={"authorization": f"Bearer {token}"},
                                             json={"enrollment_id": enrollment_id, "host_token": "h" * 40 + url[-5:]})

                # Failures alternate between the processes; only their sum crosses the line.
                for n in range(ALLOWED):
                    assert (await enroll(urls[n % 2], f"{WRONG}{n}")).status_code == 401
                for url in (*urls, *urls):
                    response = await enroll(url, WRONG)
                    assert response.status_code == 429
                    assert response.json()["error"]["code"] == "rate_limited"
                    assert 1 <= int(response.headers["retry-after"]) <= 30
                # Valid credentials from the throttled address: served by both.
                for url in urls:
                    listed = await client.get(f"{url}/api/v1/tasks", headers={"authorization": f"Bearer {ADMIN}"})
                    assert listed.status_code == 200
                    heartbeat = await client.put(f"{url}/internal/v1/hosts/host-a/heartbeat", json={"devices": []},
                                                 headers={"authorization": f"Bearer {HOSTS['host-a']}"})
                    assert heartbeat.status_code == 200
                    token = await client.post(f"{url}/api/v1/enrollment-tokens", json={},
                                              headers={"authorization": f"Bearer {ADMIN}"})
                    assert (await enroll(url, token.json()["token"], f"e-{url[-5:]}")).status_code == 201

            def throttle_lines() -> list[dict[str, object]]:
                return [entry for process in (first, second) for entry in _entries(process.process.log())
                        if "throttled" in str(entry.get("message"))]

            lines = wait_until(throttle_lines, timeout=10, what="the throttle's log line")
            logs = first.process.log() + second.process.log()
    # One line, by the process whose failure began the throttle, naming the peer uvicorn saw.
    assert len(lines) == 1
    assert lines[0]["client_address"] == "127.0.0.1" and lines[0]["route"] == "/internal/v1/enroll"
    assert WRONG not in logs and ADMIN not in logs and HOSTS["host-a"] not in logs


def _entries(log: str) -> list[dict[str, object]]:
    entries = []
    for line in log.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries
