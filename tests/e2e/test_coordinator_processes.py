"""Two real coordinator processes on one Redis, a single node and a real local cluster: wake-ups
across processes, concurrent claims."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support import (
    ADMIN,
    HOSTS,
    REAL_REDIS_URL,
    coordinator_env,
    coordinator_process,
    fresh_prefix,
    unique_prefix,
    wait_until_async,
)

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}


def host_headers(host: str) -> dict[str, str]:
    return {"authorization": f"Bearer {HOSTS[host]}"}


@pytest.fixture(scope="module", params=["redis", "cluster"])
def two_coordinators(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    url = REAL_REDIS_URL if request.param == "redis" else request.getfixturevalue("local_cluster").url
    with fresh_prefix(url) as prefix:
        env = coordinator_env(prefix, url)
        with coordinator_process(env) as first, coordinator_process(env) as second:
            yield first.url, second.url


async def _metrics_show(client: httpx.AsyncClient, url: str, line: bytes) -> bool:
    return line in (await client.get(f"{url}/metrics")).content


async def test_poll_on_one_process_wakes_for_work_created_through_the_other(
    two_coordinators: tuple[str, str],
) -> None:
    first, second = two_coordinators
    async with httpx.AsyncClient(timeout=30) as client:
        heartbeat = {"devices": [{"device_id": "wake-1", "driver": "sim", "status": "available"}]}
        assert (await client.put(f"{first}/internal/v1/hosts/host-a/heartbeat", json=heartbeat,
                                 headers=host_headers("host-a"))).status_code == 200
        poll = asyncio.ensure_future(client.post(f"{first}/internal/v1/hosts/host-a/claim?wait_s=20",
                                                 headers=host_headers("host-a")))
        await wait_until_async(lambda: _metrics_show(client, first, b"tether_waiting_polls 1.0"),
                               what="the poll waiting on the first process")
        loop = asyncio.get_running_loop()
        created_at = loop.time()
        task = (await client.post(f"{second}/api/v1/tasks", headers=ADMIN_HEADERS,
                                  json={"kind": "goal", "goal": "g", "device_id": "wake-1"})).json()
        response = await asyncio.wait_for(poll, 10)
        woke_after = loop.time() - created_at
        assert response.status_code == 200 and response.json()["task_id"] == task["task_id"]
        # answered by the wake-up, not by the 20 s poll timeout
        assert woke_after < 5


async def test_concurrent_claimers_on_two_processes_dispatch_each_assignment_once(
    two_coordinators: tuple[str, str],
) -> None:
    first, second = two_coordinators
    devices = [f"race-{i}" for i in range(24)]
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200)) as client:
        heartbeat = {"devices": [{"device_id": d, "driver": "race", "status": "available"} for d in devices]}
        assert (await client.put(f"{second}/internal/v1/hosts/host-b/heartbeat", json=heartbeat,
                                 headers=host_headers("host-b"))).status_code == 200

        async def claim(url: str) -> dict[str, object] | None:
            response = await client.post(f"{url}/internal/v1/hosts/host-b/claim?wait_s=3",
                                         headers=host_headers("host-b"))
            return response.json() if response.status_code == 200 else None

        polls = [asyncio.ensure_future(claim(url)) for url in [first, second] * 30]
        created = [
            (await client.post(f"{(first, second)[i % 2]}/api/v1/tasks", headers=ADMIN_HEADERS,
                               json={"kind": "goal", "goal": "g", "selector": {"driver": "race"}})).json()
            for i in range(len(devices))
        ]
        claimed = [a for a in await asyncio.gather(*polls) if a is not None]
    # every task dispatched exactly once, none lost, each under its own lease
    assert sorted(a["task_id"] for a in claimed) == sorted(t["task_id"] for t in created)
    assert len({a["lease_id"] for a in claimed}) == len(created)
    assert sorted(a["device_id"] for a in claimed) == sorted(devices)


async def test_poll_whose_client_disconnected_claims_nothing(two_coordinators: tuple[str, str]) -> None:
    first, _ = two_coordinators
    async with httpx.AsyncClient(timeout=30) as client:
        heartbeat = {"devices": [{"device_id": "gone-1", "driver": "gone", "status": "available"}]}
        await client.put(f"{first}/internal/v1/hosts/host-c/heartbeat", json=heartbeat,
                         headers=host_headers("host-c"))

        async with httpx.AsyncClient(timeout=30) as doomed:
            poll = asyncio.ensure_future(doomed.post(f"{first}/internal/v1/hosts/host-c/claim?wait_s=20",
                                                     headers=host_headers("host-c")))
            await wait_until_async(lambda: _metrics_show(client, first, b"tether_waiting_polls 1.0"),
                                   what="the poll waiting")
            poll.cancel()  # the agent goes away mid-poll: its connection closes
        await wait_until_async(
            lambda: _metrics_show(client, first, b'tether_claims_total{outcome="disconnected"} 1.0'),
            what="the disconnected claim counted")
        task = (await client.post(f"{first}/api/v1/tasks", headers=ADMIN_HEADERS,
                                  json={"kind": "goal", "goal": "g", "device_id": "gone-1"})).json()
        state = (await client.get(f"{first}/api/v1/tasks/{task['task_id']}", headers=ADMIN_HEADERS)).json()
        assert state["status"] == "assigned"  # nobody claimed it for the vanished poll
        claim = await client.post(f"{first}/internal/v1/hosts/host-c/claim?wait_s=0", headers=host_headers("host-c"))
        assert claim.status_code == 200 and claim.json()["task_id"] == task["task_id"]


def test_coordinator_refuses_bad_configuration() -> None:
    # The line names the environment variable at fault, as the operator wrote it.
    for bad, field in (({"COORDINATOR_LEASE_TTL_S": "-1"}, "COORDINATOR_LEASE_TTL_S"),
                       ({"COORDINATOR_STATIC_HOSTS": '{"bad id!": "t"}'}, "COORDINATOR_STATIC_HOSTS"),
                       ({"COORDINATOR_STATIC_HOSTS": "{nope"}, "COORDINATOR_STATIC_HOSTS")):
        env = coordinator_env(unique_prefix(), **bad)
        result = subprocess.run(
            [sys.executable, "-m", "coordinator", "serve", "--port", "1"], env=env, capture_output=True,
            timeout=30, cwd="/",
        )
        assert result.returncode == 2
        lines = result.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and field in lines[0], lines
