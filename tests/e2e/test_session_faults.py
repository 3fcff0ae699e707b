"""A live session's faults with real processes (issue 54, "Bad input and faults"): two
``python -m coordinator serve`` processes on one deployment (a single Redis node, and a real local
cluster), a real ``python -m agent`` with a sim phone polling process B, an operator whose command
waits on process A when A is killed with SIGKILL.

The command is in Redis from the step that queued it: the host runs it and answers through B,
and the operator, asking again through B, gets that one answer; or, when the session ends first,
``409 session_ended`` at once. Either way the command is answered at most once. (A host that dies
while an operator waits, with every coordinator up, is tests/e2e/test_mcp_processes.py's
``test_a_session_whose_host_dies_...``.)"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import (
    ADMIN,
    FAST_COORDINATOR,
    HOSTS,
    REAL_REDIS_URL,
    CoordinatorProcess,
    agent_process,
    coordinator_env,
    fresh_prefix,
    running,
    wait_until,
)

pytestmark = pytest.mark.e2e

WAIT_MS = 2000  # the command A dies under: the sim phone is busy this long


@dataclass
class Fleet:
    a: CoordinatorProcess
    b: CoordinatorProcess
    workdir: Path


@pytest.fixture(scope="module", params=["redis", "cluster"])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    url = REAL_REDIS_URL if request.param == "redis" else request.getfixturevalue("local_cluster").url
    workdir = tmp_path_factory.mktemp("session-faults")
    with fresh_prefix(url) as prefix, ExitStack() as stack:
        env = coordinator_env(prefix, url, **FAST_COORDINATOR,
                              COORDINATOR_ARTIFACTS_DIR=str(workdir / "artifacts"))
        a = stack.enter_context(running(CoordinatorProcess(env, workdir / "a")))
        b = stack.enter_context(running(CoordinatorProcess(env, workdir / "b")))
        agent = agent_process(b.url, workdir / "agent", HOST_ID="host-a", TOKEN=HOSTS["host-a"],
                              DEVICES="sim:phone-1")
        stack.callback(agent.stop)
        pooled(b, "phone-1")
        yield Fleet(a, b, workdir)


def pooled(coordinator: CoordinatorProcess, device_id: str) -> None:
    wait_until(lambda: any(d["device_id"] == device_id and d["host_online"] and d["status"] == "available"
                           for d in coordinator.call("GET", "/api/v1/devices")["devices"]),
               what=f"{device_id} pooled")


def start_session(fleet: Fleet, device_id: str) -> str:
    task = fleet.b.create_task(kind="session", device_id=device_id, idle_timeout_s=60)
    fleet.b.wait_task(task["task_id"], {"running"})
    return str(task["task_id"])


def command_waiting_on_a_when_it_dies(fleet: Fleet, session_id: str, wait_ms: int,
                                     also: Callable[[], None] = lambda: None) -> str:
    """An operator's ``wait`` command sent through A; once it is queued, ``also()``, and A is
    killed (SIGKILL) while the request waits for the answer (it gets none); the command's id."""
    def send() -> httpx.Response:
        with httpx.Client(headers={"authorization": f"Bearer {ADMIN}"}, timeout=30) as operator:
            return operator.post(f"{fleet.a.url}/api/v1/tasks/{session_id}/commands", params={"wait_s": 30},
                                 json={"action": {"action": "wait", "ms": wait_ms, "observe": False}})

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(send)
        [command] = wait_until(lambda: [c for c in recording(fleet, session_id) if c["action"]["action"] == "wait"],
                               what="the command queued")
        # Queued, so in Redis: whether the host's poll on B has taken it yet or not, it runs for
        # wait_ms, and A (and the host, if ``also`` kills it) dies while the request waits.
        also()
        assert fleet.a.process is not None
        fleet.a.process.signal(signal.SIGKILL)
        fleet.a.process.wait()
        with pytest.raises(httpx.TransportError):
            waiting.result()
    return str(command["command_id"])


def recording(fleet: Fleet, session_id: str) -> list[dict[str, Any]]:
    return list(fleet.b.call("GET", f"/api/v1/tasks/{session_id}/commands")["commands"])


def answered_events(fleet: Fleet, session_id: str, command_id: str) -> int:
    events = fleet.b.call("GET", f"/api/v1/tasks/{session_id}/events")["events"]
    return sum(1 for e in events if e["type"] == "command_answered" and e.get("command_id") == command_id)


def test_a_command_whose_coordinator_is_killed_while_it_waits_is_answered_once_through_the_other(
        fleet: Fleet) -> None:
    session_id = start_session(fleet, "phone-1")
    try:
        command_id = command_waiting_on_a_when_it_dies(fleet, session_id, WAIT_MS)
        asked = fleet.b.api.get(f"/api/v1/tasks/{session_id}/commands/{command_id}", params={"wait_s": 20})
        assert asked.status_code == 200, asked.text
        answer = asked.json()
        assert answer["status"] == "done" and answer["duration_ms"] >= WAIT_MS, answer
        again = fleet.b.call("GET", f"/api/v1/tasks/{session_id}/commands/{command_id}")
        assert again == answer  # the first answer stands
        assert answered_events(fleet, session_id, command_id) == 1
        # The session goes on, through the process that is left.
        tapped = fleet.b.call("POST", f"/api/v1/tasks/{session_id}/commands", params={"wait_s": 20},
                              json={"action": {"action": "observe"}})
        assert tapped["status"] == "done" and tapped["observation"]["elements"], tapped
        assert [c["command_id"] for c in recording(fleet, session_id)] == [command_id, tapped["command_id"]]
    finally:
        fleet.a.start()
        fleet.b.call("POST", f"/api/v1/tasks/{session_id}/end")
    assert fleet.b.wait_task(session_id)["status"] == "succeeded"


def test_a_command_whose_coordinator_and_host_die_under_it_is_reported_session_ended_at_once(
        fleet: Fleet) -> None:
    host = agent_process(fleet.b.url, fleet.workdir / "agent-b", HOST_ID="host-b", TOKEN=HOSTS["host-b"],
                         DEVICES="sim:phone-9")
    try:
        pooled(fleet.b, "phone-9")
        session_id = start_session(fleet, "phone-9")

        def kill_host() -> None:
            host.signal(signal.SIGKILL)
            host.wait()

        command_id = command_waiting_on_a_when_it_dies(fleet, session_id, 10 * WAIT_MS, kill_host)
        # Nobody will answer it: the lease lapses (1.5 s here), the session ends failed, and the
        # operator's wait, asked again through B, is told at once, far inside its own 30 s.
        sent = time.monotonic()
        asked = fleet.b.api.get(f"/api/v1/tasks/{session_id}/commands/{command_id}", params={"wait_s": 30})
        waited = time.monotonic() - sent
        assert asked.status_code == 409 and asked.json()["error"]["code"] == "session_ended", asked.text
        assert waited < 10, f"answered after {waited:.1f} s"
        task = fleet.b.task(session_id)
        assert task["status"] == "failed" and task["result"]["failure_reason"] == "lease_expired", task
        [command] = recording(fleet, session_id)
        assert command["status"] == "pending" and "observation" not in command  # never answered
        assert answered_events(fleet, session_id, command_id) == 0
    finally:
        host.stop()
        if fleet.a.process is not None and fleet.a.process.popen.poll() is not None:
            fleet.a.start()
