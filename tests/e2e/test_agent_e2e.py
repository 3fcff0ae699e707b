"""End to end with real processes: ``python -m coordinator serve`` on real Redis (a unique key
prefix per test) and ``python -m agent`` hosts with simulated phones, on loopback ports."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.e2e.processes import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/0"
ADMIN = "e2e-admin-token-0123456789"
HOST_TOKEN = "e2e-host-a-token-0123456789"
HOST_B_TOKEN = "e2e-host-b-token-0123456789"
EXAMPLE_WORKFLOWS = REPO / "agent" / "runtime" / "example_workflows"
TERMINAL = ("succeeded", "failed", "cancelled")


def poll_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOST_AGENT_", "COORDINATOR_"))}
    # Run the checkout under test, whatever state the installed package is in.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


class Proc:
    def __init__(self, name: str, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(args, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float = 20.0) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit in {timeout}s; log:\n{self.log()}") from None

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()


class Coordinator:
    def __init__(self, workdir: Path, prefix: str, **settings: str) -> None:
        self.workdir = workdir
        self.prefix = prefix
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = settings
        self.proc: Proc | None = None
        self.api = httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)

    def start(self) -> None:
        env = base_env()
        env.update(
            REDIS_URL=REDIS_URL,
            COORDINATOR_KEY_PREFIX=self.prefix,
            COORDINATOR_ADMIN_TOKEN=ADMIN,
            COORDINATOR_STATIC_HOSTS=json.dumps({"host-a": HOST_TOKEN, "host-b": HOST_B_TOKEN}),
            COORDINATOR_LEASE_TTL_S="1.5",
            COORDINATOR_REAPER_INTERVAL_S="0.1",
            COORDINATOR_HEARTBEAT_INTERVAL_S="0.5",
        )
        env.update(self.settings)
        args = [sys.executable, "-m", "coordinator", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = Proc("coordinator", args, env, self.workdir)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.popen.poll() is not None:
                raise AssertionError(f"coordinator exited:\n{self.proc.log()}")
            try:
                return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        poll_until(ready, what="coordinator ready")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def create_task(self, **body: Any) -> dict[str, Any]:
        response = self.api.post("/api/v1/tasks", json=body)
        assert response.status_code == 201, response.text
        return response.json()

    def task(self, task_id: str) -> dict[str, Any]:
        response = self.api.get(f"/api/v1/tasks/{task_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_task(self, task_id: str, statuses: tuple[str, ...] = TERMINAL, timeout: float = 20) -> dict[str, Any]:
        return poll_until(
            lambda: (t := self.task(task_id))["status"] in statuses and t, timeout, f"task {task_id} in {statuses}"
        )

    def devices(self) -> list[dict[str, Any]]:
        response = self.api.get("/api/v1/devices")
        assert response.status_code == 200, response.text
        return response.json()["devices"]


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    prefix = f"tether-test-{uuid.uuid4().hex[:12]}:{{t}}"
    coord = Coordinator(tmp_path, prefix)
    try:
        coord.start()
        yield coord
    finally:
        coord.stop()
        coord.api.close()
        client = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture
def start_agent(tmp_path: Path, coordinator: Coordinator) -> Iterator[Callable[..., Proc]]:
    agents: list[Proc] = []

    def start(name: str = "agent", **settings: str) -> Proc:
        env = base_env()
        env.update(
            HOST_AGENT_URL=coordinator.url,
            HOST_AGENT_POLL_WAIT_S="2",
            HOST_AGENT_HEARTBEAT_INTERVAL_S="0.3",
            HOST_AGENT_BACKOFF_CAP_S="0.5",
            HOST_AGENT_SHUTDOWN_GRACE_S="10",
        )
        env.update({f"HOST_AGENT_{k}": v for k, v in settings.items()})
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        proc = Proc(name, [sys.executable, "-m", "agent"], env, workdir)
        agents.append(proc)
        return proc

    yield start
    for proc in agents:
        proc.stop()


def legacy(**extra: str) -> dict[str, str]:
    return {"HOST_ID": "host-a", "TOKEN": HOST_TOKEN, "DEVICES": "sim:phone-1", **extra}


@pytest.fixture
def workflows(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    folder.mkdir()
    for name, steps in {
        "quick": [{"action": "key", "key": "home"}, {"action": "assert_text", "text": "Settings"}],
        "slow": [{"action": "key", "key": "home"}, {"action": "wait", "ms": "${ms}"}],
    }.items():
        (folder / f"{name}.json").write_text(json.dumps({"name": name, "steps": steps}))
    return folder


def wait_pooled(coordinator: Coordinator, count: int = 1) -> list[dict[str, Any]]:
    def online() -> list[dict[str, Any]] | None:
        devices = [d for d in coordinator.devices() if d["host_online"]]
        return devices if len(devices) >= count else None

    return poll_until(online, what=f"{count} pooled device(s)")


def listening_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                inodes.add(fields[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:["):-1])
    return found


def test_host_is_behind_nat(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    """Spec: with no inbound listener, the agent registers devices and executes goal and workflow
    assignments through the complete protocol (and an unknown workflow fails cleanly)."""
    agent = start_agent(**legacy(DEVICES="sim:phone-1,sim:phone-2", WORKFLOWS_DIR=str(workflows)))
    devices = wait_pooled(coordinator, 2)
    assert {d["device_id"] for d in devices} == {"phone-1", "phone-2"}
    assert all(d["host_id"] == "host-a" and d["driver"] == "sim" for d in devices)

    goal = coordinator.create_task(kind="goal", goal="Turn on airplane mode", device_id="phone-1")
    flow = coordinator.create_task(kind="workflow", workflow={"name": "quick", "params": {}},
                                   selector={"driver": "sim"})
    missing = coordinator.create_task(kind="workflow", workflow={"name": "nope", "params": {}}, device_id="phone-2")
    done = {t["task_id"]: coordinator.wait_task(t["task_id"]) for t in (goal, flow, missing)}
    assert done[goal["task_id"]]["status"] == "succeeded", agent.log()
    assert done[goal["task_id"]]["result"]["metadata"]["steps"] >= 1
    assert done[flow["task_id"]]["status"] == "succeeded", agent.log()
    assert done[missing["task_id"]]["status"] == "failed"
    assert done[missing["task_id"]]["result"]["failure_reason"] == "workflow_not_found"
    assert all(t["progress"] is None for t in done.values())

    assert not socket_inodes(agent.pid) & listening_inodes(), "the agent must not listen on any port"
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert HOST_TOKEN not in agent.log()


def test_progress_is_visible_and_cancel_stops_the_run(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 60000}},
                                   device_id="phone-1")
    running = poll_until(lambda: (t := coordinator.task(task["task_id"]))["progress"] and t, what="progress")
    assert running["status"] == "running"
    assert set(running["progress"]) >= {"step_index", "status", "summary"}
    response = coordinator.api.post(f"/api/v1/tasks/{task['task_id']}/cancel")
    assert response.status_code == 200, response.text
    done = coordinator.wait_task(task["task_id"], timeout=10)
    assert done["status"] == "cancelled", agent.log()
    assert done["result"]["status"] == "cancelled"  # reported by the agent, not a lease expiry
    assert done["attempt"] == 1
    assert "cancel requested" in agent.log()


def test_killed_agent_mid_task_finishes_on_another_host_as_attempt_2(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    doomed = start_agent("doomed", **legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 1500}},
                                   selector={"driver": "sim"})
    running = coordinator.wait_task(task["task_id"], ("running",))
    assert (running["host_id"], running["attempt"]) == ("host-a", 1)
    rescuer = start_agent("rescuer", HOST_ID="host-b", TOKEN=HOST_B_TOKEN, DEVICES="sim:phone-9",
                          WORKFLOWS_DIR=str(workflows))
    wait_pooled(coordinator, 2)
    doomed.signal(signal.SIGKILL)
    done = coordinator.wait_task(task["task_id"], timeout=30)
    assert done["status"] == "succeeded", rescuer.log()
    assert (done["attempt"], done["host_id"], done["device_id"]) == (2, "host-b", "phone-9")
    assert done["result"]["attempt"] == 2


def test_sigterm_lets_running_work_finish_then_exits_zero(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 2000}},
                                   device_id="phone-1")
    coordinator.wait_task(task["task_id"], ("running",))
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    done = coordinator.task(task["task_id"])
    assert done["status"] == "succeeded", agent.log()
    assert done["attempt"] == 1


def test_sigterm_past_the_grace_period_stops_the_run_and_reports_it(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows), SHUTDOWN_GRACE_S="0.3"))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 60000}},
                                   device_id="phone-1")
    coordinator.wait_task(task["task_id"], ("running",))
    started = time.monotonic()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert time.monotonic() - started < 8
    done = coordinator.task(task["task_id"])
    assert done["status"] == "cancelled", agent.log()
    assert done["result"]["failure_reason"] == "shutdown"


def test_agent_rides_out_a_coordinator_restart(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    coordinator.stop()
    poll_until(lambda: "failed" in agent.log(), what="agent notices the outage")
    coordinator.start()  # same port, same Redis prefix
    task = coordinator.create_task(kind="workflow", workflow={"name": "quick", "params": {}}, device_id="phone-1")
    done = coordinator.wait_task(task["task_id"])
    assert done["status"] == "succeeded", agent.log()
    assert agent.popen.poll() is None


def test_stalled_agent_loses_its_lease_reports_nothing_and_runs_the_retry(
    coordinator: Coordinator, start_agent: Callable[..., Proc], workflows: Path
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 2500}},
                                   device_id="phone-1")
    coordinator.wait_task(task["task_id"], ("running",))
    agent.signal(signal.SIGSTOP)  # the host stalls past its lease
    try:
        poll_until(lambda: coordinator.task(task["task_id"])["attempt"] == 2, what="requeued as attempt 2")
    finally:
        agent.signal(signal.SIGCONT)
    done = coordinator.wait_task(task["task_id"], timeout=30)
    assert done["status"] == "succeeded", agent.log()
    assert done["attempt"] == 2
    log = agent.log()
    assert "attempt 1: lease lost" in log
    assert "reported task" in log and f"reported task {task['task_id']} attempt 1" not in log


def test_managed_agent_enrolls_once_and_restarts_without_the_token(
    coordinator: Coordinator, start_agent: Callable[..., Proc], tmp_path: Path
) -> None:
    response = coordinator.api.post("/api/v1/enrollment-tokens", json={"ttl_s": 600, "max_uses": 1})
    if response.status_code in (404, 405):
        pytest.skip("this coordinator does not serve enrollment yet")
    assert response.status_code == 201, response.text
    enrollment_token = response.json()["token"]
    state = tmp_path / "state"

    agent = start_agent("managed", ENROLLMENT_TOKEN=enrollment_token, STATE_DIR=str(state), DEVICES="sim:phone-1")
    [device] = wait_pooled(coordinator)
    identity = json.loads((state / "identity.json").read_text())
    assert device["host_id"] == identity["host_id"] != "host-a"
    assert stat.S_IMODE((state / "identity.json").stat().st_mode) == 0o600
    stored = b"".join(p.read_bytes() for p in state.iterdir())
    assert enrollment_token.encode() not in stored
    first = coordinator.create_task(kind="goal", goal="Turn on airplane mode", selector={"driver": "sim"})
    assert coordinator.wait_task(first["task_id"])["status"] == "succeeded", agent.log()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0

    again = start_agent("managed-again", STATE_DIR=str(state), DEVICES="sim:phone-1")  # no token now
    second = coordinator.create_task(kind="goal", goal="Turn off Wi-Fi", device_id=device["device_id"])
    assert coordinator.wait_task(second["task_id"])["status"] == "succeeded", again.log()
    assert json.loads((state / "identity.json").read_text()) == identity
    hosts = coordinator.api.get("/api/v1/hosts").json()["hosts"]
    assert [h["host_id"] for h in hosts if h.get("kind") == "enrolled"] == [identity["host_id"]]
    assert enrollment_token not in agent.log() + again.log()


def test_revoked_managed_host_exits_nonzero(
    coordinator: Coordinator, start_agent: Callable[..., Proc], tmp_path: Path
) -> None:
    response = coordinator.api.post("/api/v1/enrollment-tokens", json={"ttl_s": 600, "max_uses": 1})
    if response.status_code in (404, 405):
        pytest.skip("this coordinator does not serve enrollment yet")
    agent = start_agent("managed", ENROLLMENT_TOKEN=response.json()["token"], STATE_DIR=str(tmp_path / "state"),
                        DEVICES="sim:phone-1")
    [device] = wait_pooled(coordinator)
    revoked = coordinator.api.post(f"/api/v1/hosts/{device['host_id']}/revoke")
    assert revoked.status_code == 200, revoked.text
    assert agent.wait() == 1
    assert "rejected this host's credential" in agent.log()
