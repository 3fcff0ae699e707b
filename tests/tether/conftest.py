"""One real coordinator per test module (on real Redis, under a key prefix of its own), a real
agent with simulated phones and a few workflows, and the ``tether`` command run as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support import (
    ADMIN,
    FAST_COORDINATOR,
    CoordinatorProcess,
    Process,
    agent_process,
    child_env,
    coordinator_env,
    fresh_prefix,
    running,
    wait_until,
    write_workflows,
)

# Static hosts of these tests: the agent's, and hosts whose heartbeats the tests send themselves.
HOSTS = {name: f"{name}-token-0123456789" for name in ("runner", "fleet-1", "drain-1", "revoke-1", "wf-1")}
RUNNER_DEVICES = ("run-ok", "run-fail", "run-watch", "run-wait")
WORKFLOWS = {
    # A few waits, so the agent renews (every third of the 0.6 s lease) and reports progress meanwhile.
    "steps": [{"action": "key", "key": "home"}, {"action": "wait", "ms": 200}, {"action": "wait", "ms": 200},
              {"action": "wait", "ms": 200}],
    "broken": [{"action": "key", "key": "home"}, {"action": "assert_text", "text": "No such text"}],
}


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def tether_here(coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """``tether ARGS`` run in this process against ``coordinator``: for the follow-up reads of a
    test, which would otherwise spend most of the folder's time starting interpreters."""
    from tether.cli import main

    capsys.readouterr()
    code = main(["--url", coordinator.url, "--token", ADMIN, *args])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def tether(coordinator: CoordinatorProcess, *args: str, **env: str) -> Result:
    """``python -m tether ARGS`` against ``coordinator``, as an operator would run it."""
    env = child_env(**{"TETHER_URL": coordinator.url, "TETHER_TOKEN": ADMIN, **env})
    done = subprocess.run([sys.executable, "-m", "tether", *args], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def coordinator_settings() -> dict[str, str]:
    """Settings of the module's coordinator over this suite's; a module may override it."""
    return {}


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory,
                coordinator_settings: dict[str, str]) -> Iterator[CoordinatorProcess]:
    """The module's coordinator: this suite's hosts, and a lease short enough that the agent
    renews (every third of it) within a test."""
    settings = {**FAST_COORDINATOR, "COORDINATOR_LEASE_TTL_S": "0.6", **coordinator_settings}
    with fresh_prefix() as prefix, running(CoordinatorProcess(
            coordinator_env(prefix, COORDINATOR_STATIC_HOSTS=json.dumps(HOSTS), **settings),
            tmp_path_factory.mktemp("coordinator"))) as coord:
        yield coord


@pytest.fixture(scope="module")
def runner(coordinator: CoordinatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    """``python -m agent`` as the static host ``runner``, its phones pooled before tests start."""
    workdir = tmp_path_factory.mktemp("runner")
    folder = write_workflows(workdir / "workflows", WORKFLOWS)
    agent = agent_process(coordinator.url, workdir, HOST_ID="runner", TOKEN=HOSTS["runner"],
                          DEVICES=",".join(f"sim:{d}" for d in RUNNER_DEVICES), WORKFLOWS_DIR=str(folder),
                          SHUTDOWN_GRACE_S="5")

    def pooled() -> bool:
        devices = coordinator.api.get("/api/v1/devices", params={"host_id": "runner"}).json()["devices"]
        return len([d for d in devices if d["host_online"]]) == len(RUNNER_DEVICES)

    try:
        wait_until(pooled, what="the runner's devices pooled")
        yield agent
    finally:
        agent.stop()


class Host:
    """The host ``fleet-1`` played by a test over the host API (so what it uploads is known exactly):
    one device, one claimed task at a time. Its module's lease must outlast the test's calls."""

    def __init__(self, coordinator: CoordinatorProcess, device: str) -> None:
        self.coordinator = coordinator
        self.host_id = "fleet-1"
        self.device = device
        self.http = httpx.Client(base_url=coordinator.url, headers={"authorization": f"Bearer {HOSTS[self.host_id]}"})

    def close(self) -> None:
        self.http.close()

    def run_task(self) -> dict[str, Any]:
        """A new task on this device, claimed: its lease."""
        self.coordinator.heartbeat(self.host_id, [self.device])
        task = self.coordinator.create_task(goal="x", device_id=self.device)
        lease = self.coordinator.claim(self.host_id)
        assert lease["task_id"] == task["task_id"], lease
        return lease

    def upload(self, lease: dict[str, Any], name: str, body: bytes, content_type: str,
               step_index: int | None = None) -> None:
        params = {"task_id": lease["task_id"], "attempt": lease["attempt"]}
        if step_index is not None:
            params["step_index"] = step_index
        response = self.http.put(f"/internal/v1/hosts/{self.host_id}/leases/{lease['lease_id']}/artifacts/{name}",
                                 params=params, content=body, headers={"content-type": content_type})
        assert response.status_code == 201, response.text

    def succeed(self, lease: dict[str, Any]) -> None:
        result = {"task_id": lease["task_id"], "attempt": lease["attempt"], "lease_id": lease["lease_id"],
                  "status": "succeeded", "failure_reason": None, "metadata": {}}
        response = self.http.post(f"/internal/v1/hosts/{self.host_id}/results", json=result)
        assert response.status_code == 200, response.text
