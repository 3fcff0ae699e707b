"""``python -m agent`` as a person runs it, a real process: its help needs no configuration, it
loads the shipped example workflows unless told otherwise and says which at start, and its
errors name the URL it called and the cause."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.settings import AgentSettings
from agent.usage import MEANINGS
from tests.support import (
    HOSTS,
    CoordinatorProcess,
    Process,
    agent_process,
    child_env,
    coordinator_env,
    coordinator_process,
    free_port,
    fresh_prefix,
    wait_until,
)
from tether.render_fleet import host_fields
from wire import TERMINAL_STATUSES

pytestmark = pytest.mark.e2e

HOST = "host-a"


def run_agent(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=30, check=False)


def test_help_needs_no_configuration_and_names_every_setting(tmp_path: Path) -> None:
    result = run_agent("--help", cwd=tmp_path)  # no HOST_AGENT_* at all, no .env
    assert result.returncode == 0, result.stderr
    assert "configuration error" not in result.stdout + result.stderr
    for name in AgentSettings.model_fields:
        assert f"HOST_AGENT_{name.upper()}" in result.stdout
    assert "HOST_AGENT_LABELS" in result.stdout and "HOST_AGENT_HOSTNAME" in result.stdout
    assert "[default: 25]" in result.stdout  # defaults are read from the settings themselves


def test_every_setting_has_a_meaning() -> None:
    assert set(MEANINGS) == set(AgentSettings.model_fields)


def test_version_and_an_unknown_argument(tmp_path: Path) -> None:
    version = run_agent("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("tether agent ")
    unknown = run_agent("--bogus", cwd=tmp_path)
    assert unknown.returncode == 2 and "unrecognized arguments: --bogus" in unknown.stderr


def log_has(process: Process, *needles: str) -> bool:
    text = process.log()
    return all(needle in text for needle in needles)


def test_a_refused_connection_names_the_url_and_the_cause(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    agent = agent_process(url, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="sim:phone-1")
    try:
        wait_until(lambda: log_has(agent, f"PUT {url}/internal/v1/hosts/{HOST}/heartbeat: connection refused"),
                   what="the refused heartbeat in the agent's log")
        assert "ConnectError" not in agent.log()
    finally:
        agent.stop()


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    with fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix), tmp_path / "c") as coordinator:
        yield coordinator


def test_a_wrong_base_url_names_the_whole_url_status_and_the_error(tmp_path: Path,
                                                                    coordinator: CoordinatorProcess) -> None:
    wrong = f"{coordinator.url}/tether"  # a base URL with a path the coordinator does not have
    agent = agent_process(wrong, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="sim:phone-1")
    try:
        wait_until(lambda: log_has(agent, f"PUT {wrong}/internal/v1/hosts/{HOST}/heartbeat: HTTP 404 not_found: "),
                   what="the 404 heartbeat with its URL and error in the agent's log")
    finally:
        agent.stop()


def submit_note_smoke(coordinator: CoordinatorProcess) -> str:
    return str(coordinator.create_task(kind="workflow", workflow={"name": "note-smoke", "params": {"text": "hello"}},
                                       selector={"driver": "sim"})["task_id"])


def task_end(coordinator: CoordinatorProcess, task_id: str) -> tuple[str, str | None] | None:
    task = coordinator.task(task_id)
    if task["status"] in TERMINAL_STATUSES:
        return task["status"], task["result"]["failure_reason"]
    return None


def test_the_example_workflows_are_loaded_by_default_and_listed_at_start(tmp_path: Path,
                                                                         coordinator: CoordinatorProcess) -> None:
    agent = agent_process(coordinator.url, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="sim:phone-1")
    try:
        wait_until(lambda: log_has(agent, "workflows: home-smoke, note-smoke, settings-smoke, the examples from ",
                                   "example_workflows"), what="the loaded workflows in the agent's log")
        task_id = submit_note_smoke(coordinator)
        assert wait_until(lambda: task_end(coordinator, task_id), what="note-smoke to end") == ("succeeded", None)
    finally:
        agent.stop()


def test_workflows_none_loads_none_and_says_so(tmp_path: Path, coordinator: CoordinatorProcess) -> None:
    agent = agent_process(coordinator.url, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="sim:phone-1",
                          WORKFLOWS_DIR="none")
    try:
        wait_until(lambda: log_has(agent, "workflows: none (HOST_AGENT_WORKFLOWS_DIR=none)"),
                   what="'workflows: none' in the agent's log")
        task_id = submit_note_smoke(coordinator)
        # The host lists no workflows in its heartbeat, so the task is never placed on its phone:
        # it waits, and says why, instead of failing workflow_not_found on the device.
        waiting = wait_until(lambda: coordinator.task(task_id)["waiting_reason"] == "no_capable_host" or None,
                             what="note-smoke to wait as no_capable_host")
        assert waiting and task_end(coordinator, task_id) is None
    finally:
        agent.stop()


def test_a_token_of_another_host_stops_in_one_line_as_a_wrong_token_does(tmp_path: Path,
                                                                           coordinator: CoordinatorProcess) -> None:
    # host-a's valid token with host-b's id: every call is 403 forbidden, which once was retried forever.
    agent = agent_process(coordinator.url, tmp_path, HOST_ID="host-b", TOKEN=HOSTS[HOST], DEVICES="sim:phone-1")
    try:
        assert agent.wait() == 1
        stopped = [line for line in agent.log().splitlines() if "stopped:" in line]
        assert len(stopped) == 1, agent.log()
        assert "403 forbidden" in stopped[0] and "HOST_AGENT_HOST_ID" in stopped[0], stopped
        assert HOSTS[HOST] not in agent.log() and " ready with " not in agent.log()
    finally:
        agent.stop()


def test_ready_is_said_only_once_the_coordinator_answered_a_heartbeat(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    agent = agent_process(url, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="sim:phone-1")
    try:
        refused = f"PUT {url}/internal/v1/hosts/{HOST}/heartbeat: connection refused"
        wait_until(lambda: agent.log().count(refused) >= 3, what="three refused heartbeats")
        assert f"host {HOST} (legacy) started with 1 device(s): phone-1" in agent.log()
        assert " ready " not in agent.log(), agent.log()
    finally:
        agent.stop()


def test_ready_follows_the_first_answered_heartbeat(tmp_path: Path, coordinator: CoordinatorProcess) -> None:
    agent = agent_process(coordinator.url, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="sim:phone-1")
    try:
        wait_until(lambda: log_has(agent, f"host {HOST} (legacy) ready with 1 device(s): phone-1"),
                   what="the agent ready")
        host = coordinator.call("GET", f"/api/v1/hosts/{HOST}")
        assert host["online"] and host["devices"] == 1  # the coordinator knew it when it said so
    finally:
        agent.stop()


def test_an_empty_device_list_is_warned_about(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    agent = agent_process(url, tmp_path, HOST_ID=HOST, TOKEN=HOSTS[HOST], DEVICES="")
    try:
        wait_until(lambda: log_has(agent, "HOST_AGENT_DEVICES is empty: this host reports no device"),
                   what="the warning")
    finally:
        agent.stop()


def test_two_agents_on_one_host_id_are_named_in_the_host_s_record_and_the_log(tmp_path: Path) -> None:
    with fresh_prefix() as prefix, coordinator_process(
            coordinator_env(prefix, COORDINATOR_HEARTBEAT_INTERVAL_S="0.3"), tmp_path / "c") as coordinator:
        agents = [agent_process(coordinator.url, tmp_path / name, name, HOST_ID=HOST, TOKEN=HOSTS[HOST],
                                DEVICES=f"sim:{name}-phone", HOSTNAME=f"{name}.example") for name in ("one", "two")]
        try:
            def named() -> dict[str, Any] | None:
                host: dict[str, Any] = coordinator.call("GET", f"/api/v1/hosts/{HOST}")
                return host if host["conflicting_agent"] else None

            host = wait_until(named, what="the host's record to name the other agent")
            conflict = host["conflicting_agent"]
            assert conflict["hostname"] in ("one.example", "two.example") and conflict["instance_id"], conflict
            assert host["agent_instance_id"] not in (None, conflict["instance_id"])
            # `tether host` says so too
            assert re.search(r"^second agent +instance ai_\w+ on (one|two)\.example", host_fields(host), re.M)
            process = coordinator.process
            assert process is not None
            wait_until(lambda: f"two agents heartbeat as host {HOST}: instance " in process.log(),
                       what="the coordinator's warning")
            agents.pop().stop()
            # One agent left: from its second heartbeat on, the record names no other.
            wait_until(lambda: coordinator.call("GET", f"/api/v1/hosts/{HOST}")["conflicting_agent"] is None,
                       what="the conflict to clear")
        finally:
            for agent in agents:
                agent.stop()
