"""End to end with real processes: ``python -m coordinator serve`` on real Redis (a unique key
prefix per test) and ``python -m agent`` hosts with simulated phones, on loopback ports."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.history.checker import verify
from tests.history.proxy import RecordingProxy
from tests.history.records import History, RecordingTransport
from tests.support import (
    FAST_COORDINATOR,
    HOSTS,
    CoordinatorProcess,
    Process,
    coordinator_env,
    delete_prefix,
    fresh_prefix,
    running,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOST_TOKEN = HOSTS["host-a"]
HOST_B_TOKEN = HOSTS["host-b"]


@pytest.fixture
def history() -> History:
    """Every call of the test, the operator's and (through ``proxy``) the agents'."""
    return History()


@pytest.fixture
def coordinator(tmp_path: Path, history: History) -> Iterator[CoordinatorProcess]:
    with fresh_prefix() as prefix, running(CoordinatorProcess(
            coordinator_env(prefix, **FAST_COORDINATOR), tmp_path, transport=RecordingTransport(history))) as coord:
        yield coord


@pytest.fixture
def agent_url(coordinator: CoordinatorProcess, history: History) -> Iterator[str]:
    # through the recording proxy: the fault tests check the history of the run
    with RecordingProxy(history, [coordinator.url]) as proxy:
        yield proxy.url


def verify_history(coordinator: CoordinatorProcess, history: History, at_least: int) -> None:
    """Read every task created (the final reads), then check the run's history."""
    created = {op.body["task_id"] for op in history.ops
               if op.method == "POST" and op.path == "/api/v1/tasks" and op.ok}
    for task_id in sorted(created):
        coordinator.task(task_id)
    verify(history, at_least=at_least)


def legacy(**extra: str) -> dict[str, str]:
    return {"HOST_ID": "host-a", "TOKEN": HOST_TOKEN, "DEVICES": "sim:phone-1", **extra}


def wait_claimed(agent: Process, task_id: str) -> None:
    """Until the agent itself has the assignment: the coordinator says `running` as soon as the
    claim is recorded, which can be before the answer reaches the agent, and a signal sent in
    that gap tests a different story (an orphaned lease)."""
    wait_until(lambda: f"claimed task {task_id} " in agent.log(), what=f"the agent's claim of {task_id}")


def wait_pooled(coordinator: CoordinatorProcess, count: int = 1) -> list[dict[str, Any]]:
    def online() -> list[dict[str, Any]] | None:
        devices = [d for d in coordinator.call("GET", "/api/v1/devices")["devices"] if d["host_online"]]
        return devices if len(devices) >= count else None

    return wait_until(online, what=f"{count} pooled device(s)")


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
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path
) -> None:
    """Spec: with no inbound listener, the agent registers devices and executes goal and workflow
    assignments through the complete protocol; a workflow it has not loaded never reaches it: the
    agent lists what it loaded in its heartbeats, so that task waits, saying why."""
    agent = start_agent(**legacy(DEVICES="sim:phone-1,sim:phone-2", WORKFLOWS_DIR=str(workflows)))
    devices = wait_pooled(coordinator, 2)
    assert {d["device_id"] for d in devices} == {"phone-1", "phone-2"}
    assert all(d["host_id"] == "host-a" and d["driver"] == "sim" for d in devices)

    goal = coordinator.create_task(kind="goal", goal="Turn on airplane mode", device_id="phone-1")
    flow = coordinator.create_task(kind="workflow", workflow={"name": "quick", "params": {}},
                                   selector={"driver": "sim"})
    missing = coordinator.create_task(kind="workflow", workflow={"name": "nope", "params": {}}, device_id="phone-2")
    done = {t["task_id"]: coordinator.wait_task(t["task_id"]) for t in (goal, flow)}
    assert done[goal["task_id"]]["status"] == "succeeded", agent.log()
    assert done[goal["task_id"]]["result"]["metadata"]["steps"] >= 1
    assert done[flow["task_id"]]["status"] == "succeeded", agent.log()
    assert all(t["progress"] is None for t in done.values())
    waiting = coordinator.task(missing["task_id"])
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_capable_host", waiting
    assert waiting["candidates"]["no_workflow"] == 1
    listed = coordinator.api.get("/api/v1/workflows").json()["workflows"]
    assert {w["name"] for w in listed} >= {"quick", "slow"} and "nope" not in {w["name"] for w in listed}
    assert all(w["hosts"] == ["host-a"] and w["devices"] == 2 for w in listed)

    assert not socket_inodes(agent.pid) & listening_inodes(), "the agent must not listen on any port"
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert HOST_TOKEN not in agent.log()


def test_progress_is_visible_and_cancel_stops_the_run(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 60000}},
                                   device_id="phone-1")
    running = wait_until(lambda: (t := coordinator.task(task["task_id"]))["progress"] and t, what="progress")
    assert running["status"] == "running"
    assert set(running["progress"]) >= {"step_index", "status", "summary"}
    response = coordinator.api.post(f"/api/v1/tasks/{task['task_id']}/cancel")
    assert response.status_code == 200, response.text
    done = coordinator.wait_task(task["task_id"], timeout=10)
    assert done["status"] == "cancelled", agent.log()
    assert done["result"]["status"] == "cancelled"  # reported by the agent, not a lease expiry
    assert done["attempt"] == 1
    assert "cancel requested" in agent.log()
    verify_history(coordinator, history, at_least=10)


def test_killed_agent_mid_task_finishes_on_another_host_as_attempt_2(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
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
    verify_history(coordinator, history, at_least=20)


def test_sigterm_lets_running_work_finish_then_exits_zero(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 2000}},
                                   device_id="phone-1")
    wait_claimed(agent, task["task_id"])
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    done = coordinator.task(task["task_id"])
    assert done["status"] == "succeeded", agent.log()
    assert done["attempt"] == 1
    verify_history(coordinator, history, at_least=10)


def test_sigterm_past_the_grace_period_stops_the_run_and_reports_it(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows), SHUTDOWN_GRACE_S="0.3"))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 60000}},
                                   device_id="phone-1")
    wait_claimed(agent, task["task_id"])
    started = time.monotonic()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    assert time.monotonic() - started < 8
    # A run stopped by shutdown is a retryable failure: the task goes back to the queue as attempt 2
    # (no device left to take it here, so it waits).
    requeued = coordinator.task(task["task_id"])
    assert requeued["status"] == "queued" and requeued["attempt"] == 2, agent.log()
    result, again = coordinator.call("GET", f"/api/v1/tasks/{task['task_id']}/events")["events"][-2:]
    assert (result["type"], result["status"], result["reason"]) == ("result", "failed", "shutdown")
    assert (again["type"], again["reason"], again["attempt"]) == ("requeued", "retryable_failure", 2)
    # No device is left to run attempt 2: the operator cancels it, so the run's history ends.
    assert coordinator.api.post(f"/api/v1/tasks/{task['task_id']}/cancel").status_code == 200
    verify_history(coordinator, history, at_least=10)


def test_agent_rides_out_a_coordinator_restart(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    coordinator.stop()
    wait_until(lambda: "failed" in agent.log(), what="agent notices the outage")
    coordinator.start()  # same port, same Redis prefix
    task = coordinator.create_task(kind="workflow", workflow={"name": "quick", "params": {}}, device_id="phone-1")
    done = coordinator.wait_task(task["task_id"])
    assert done["status"] == "succeeded", agent.log()
    assert agent.popen.poll() is None
    verify_history(coordinator, history, at_least=10)


def test_stalled_agent_loses_its_lease_reports_nothing_and_runs_the_retry(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    task = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 2500}},
                                   device_id="phone-1")
    coordinator.wait_task(task["task_id"], ("running",))
    agent.signal(signal.SIGSTOP)  # the host stalls past its lease
    try:
        wait_until(lambda: coordinator.task(task["task_id"])["attempt"] == 2, what="requeued as attempt 2")
    finally:
        agent.signal(signal.SIGCONT)
    done = coordinator.wait_task(task["task_id"], timeout=30)
    assert done["status"] == "succeeded", agent.log()
    assert done["attempt"] == 2
    # the coordinator records the result before the agent has its answer and logs it
    reported = f"reported task {task['task_id']} attempt 2"
    wait_until(lambda: reported in agent.log(), what="attempt 2 reported in the agent's log")
    log = agent.log()
    assert "attempt 1: lease lost" in log
    assert f"reported task {task['task_id']} attempt 1" not in log
    verify_history(coordinator, history, at_least=20)


def test_managed_agent_enrolls_once_and_restarts_without_the_token(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], tmp_path: Path
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
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], tmp_path: Path
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


def test_a_managed_host_whose_redis_lost_its_data_stops_in_one_line(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], tmp_path: Path
) -> None:
    token = coordinator.api.post("/api/v1/enrollment-tokens", json={"ttl_s": 600, "max_uses": 1}).json()["token"]
    agent = start_agent("managed", ENROLLMENT_TOKEN=token, STATE_DIR=str(tmp_path / "state"), DEVICES="sim:phone-1")
    [device] = wait_pooled(coordinator)
    # Redis restarted empty: every key of the deployment is gone (its enrollment token with it).
    delete_prefix(coordinator.prefix)

    # Seen: the coordinator kept the cached token, recreated an empty host, and the agent looped
    # on 409 unknown_device and 403. Now: one line, exit 1, and no ghost host.
    assert agent.wait(timeout=20) == 1
    log = agent.log()
    [line] = [entry for entry in log.splitlines() if "rejected this host's credential" in entry]
    assert "stopped" in line and "enrolling again" in line, line
    # A status, not digits of a timestamp's milliseconds or of the coordinator's port.
    assert not re.search(r"unknown_device|(?<![\d,.:])403(?!\d)", log), log
    assert coordinator.api.get(f"/api/v1/hosts/{device['host_id']}").status_code == 404
    assert [h for h in coordinator.api.get("/api/v1/hosts").json()["hosts"] if h["kind"] != "static"] == []


def test_a_drained_host_finishes_its_run_keeps_heartbeating_and_takes_work_once_undrained(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    running = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 1500}},
                                      device_id="phone-1")
    coordinator.wait_task(running["task_id"], ("running",))
    assert coordinator.api.post("/api/v1/hosts/host-a/drain").json()["draining"] is True
    later = coordinator.create_task(kind="workflow", workflow={"name": "quick", "params": {}}, device_id="phone-1")

    assert coordinator.wait_task(running["task_id"])["status"] == "succeeded", agent.log()
    wait_until(lambda: "draining" in agent.log(), what="the agent logs that its host is draining")
    # Heartbeats go on (the host stays online) while the new task waits, with its reason.
    seen = coordinator.api.get("/api/v1/hosts/host-a").json()["last_seen"]
    wait_until(lambda: coordinator.api.get("/api/v1/hosts/host-a").json()["last_seen"] != seen,
               what="a heartbeat while draining")
    waiting = coordinator.task(later["task_id"])
    assert waiting["status"] == "queued" and waiting["waiting_reason"] == "no_schedulable_device"

    coordinator.api.post("/api/v1/hosts/host-a/undrain")
    assert coordinator.wait_task(later["task_id"])["status"] == "succeeded", agent.log()
    verify_history(coordinator, history, at_least=20)


def test_a_busy_device_runs_its_queued_jobs_without_claims_between_them(
    coordinator: CoordinatorProcess, start_agent: Callable[..., Process], workflows: Path,
    history: History
) -> None:
    """Eager dispatch (PROTOCOL.md, results): each result asks for the device's next assignment,
    and the answer carries it, so work queued behind a running task needs no claim."""
    agent = start_agent(**legacy(WORKFLOWS_DIR=str(workflows)))
    wait_pooled(coordinator)
    first = coordinator.create_task(kind="workflow", workflow={"name": "slow", "params": {"ms": 1000}},
                                    device_id="phone-1")
    wait_claimed(agent, first["task_id"])
    queued = [coordinator.create_task(kind="workflow", workflow={"name": "quick", "params": {}}, device_id="phone-1")
              for _ in range(3)]
    for task in (first, *queued):
        assert coordinator.wait_task(task["task_id"])["status"] == "succeeded", agent.log()
    log = agent.log()
    assert all(f"took from its result's answer task {t['task_id']} " in log for t in queued), log
    assert log.count("claimed task ") == 1, log
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    verify_history(coordinator, history, at_least=12)
