"""The whole agent in-process (``run_agent``) with the real runtime (sim phones, scripted planner,
example workflows) against a MockTransport coordinator: start-up order, identity, execution."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from agent.app import run_agent
from agent.identity import StateStore
from agent.retry import RetryPolicy
from agent.runtime import EXAMPLE_WORKFLOWS_DIR
from agent.settings import AgentSettings
from tests.agent.fake_adb import FakeAdb
from tests.agent.host_fakes import FakeCoordinator, wait_until

pytestmark = pytest.mark.anyio

ENROLL_SECRET = "tet_enroll-secret-for-app-test-0123456789"


def managed_settings(state: Path, *, enrollment_token: str | None = ENROLL_SECRET, **extra: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "url": "http://coordinator.test",
        "state_dir": state,
        "devices": "sim:phone-1,sim:phone-2",
        "workflows_dir": EXAMPLE_WORKFLOWS_DIR,
        "poll_wait_s": 1,
        "heartbeat_interval_s": 0.2,
        "shutdown_grace_s": 1.0,
        "hostname": "lab-7",
        "labels": {"site": "berlin"},
    }
    if enrollment_token is not None:
        values["enrollment_token"] = SecretStr(enrollment_token)
    values.update(extra)
    return AgentSettings(_env_file=None, **values)


def result(coordinator: FakeCoordinator, task: dict[str, Any]) -> dict[str, Any] | None:
    return coordinator.results.get((task["task_id"], 1))


async def start(settings: AgentSettings, coordinator: FakeCoordinator) -> tuple[asyncio.Event, asyncio.Task[int]]:
    shutdown = asyncio.Event()
    task = asyncio.create_task(
        run_agent(settings, shutdown, transport=coordinator.transport(),
                  retry_policy=RetryPolicy(base_s=0.01, cap_s=settings.backoff_cap_s))
    )
    return shutdown, task


async def test_new_managed_host_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    coordinator.fail_next("enroll", "drop_after")  # the first enroll answer is lost
    state = tmp_path / "state"
    shutdown, agent = await start(managed_settings(state), coordinator)

    goal = coordinator.assign("host-m.phone-1", goal="Turn on airplane mode", max_steps=10)
    flow = coordinator.assign("host-m.phone-2", kind="workflow", workflow={"name": "home-smoke", "params": {}})
    await wait_until(lambda: result(coordinator, goal) and result(coordinator, flow), what="both results")
    missing = coordinator.assign("host-m.phone-1", kind="workflow", workflow={"name": "no-such-flow", "params": {}})
    await wait_until(lambda: result(coordinator, missing), what="third result")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0

    endpoints = [c.path.rsplit("/", 1)[-1] if not c.path.endswith("devices/enroll") else "devices/enroll"
                 for c in coordinator.calls]
    assert endpoints[:3] == ["enroll", "enroll", "devices/enroll"]  # identity, retry, devices: then loops
    first, retry = coordinator.of("enroll")
    assert first.body == retry.body
    assert coordinator.of("devices_enroll")[0].headers["authorization"] == f"Bearer {first.body['host_token']}"
    heartbeat = coordinator.of("heartbeat")[0].body
    assert [d["device_id"] for d in heartbeat["devices"]] == ["host-m.phone-1", "host-m.phone-2"]
    assert heartbeat["devices"][0]["labels"] == {"site": "berlin"}
    assert heartbeat["devices"][0]["attributes"]["model"] == "Tether Sim"

    assert result(coordinator, goal)["status"] == "succeeded"
    assert result(coordinator, flow)["status"] == "succeeded"
    assert result(coordinator, flow)["metadata"]["workflow"] == "home-smoke"
    assert (result(coordinator, missing)["status"], result(coordinator, missing)["failure_reason"]) == (
        "failed", "workflow_not_found"
    )

    secrets = (ENROLL_SECRET, first.body["host_token"])
    assert not any(s in caplog.text for s in secrets), "a secret reached a log line"
    stored = b"".join(p.read_bytes() for p in state.iterdir())
    assert ENROLL_SECRET.encode() not in stored


async def test_managed_restart_reuses_identity_and_device_ids(tmp_path: Path) -> None:
    state = tmp_path / "state"
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    shutdown, agent = await start(managed_settings(state), coordinator)
    await wait_until(lambda: coordinator.of("heartbeat"), what="first heartbeat")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0

    coordinator.enrollment_token = None  # used up; the restart must not need it
    before = len(coordinator.calls)
    shutdown, agent = await start(managed_settings(state, enrollment_token=None), coordinator)
    await wait_until(
        lambda: any(c.path.endswith("/heartbeat") for c in coordinator.calls[before:]), what="heartbeat"
    )
    restarted = coordinator.calls[before:]
    assert restarted[0].path.endswith("/devices/enroll")  # device ids re-confirmed, idempotently
    assert restarted[0].headers["authorization"] == f"Bearer {coordinator.token}"
    task = coordinator.assign("host-m.phone-2", goal="Turn off Wi-Fi")
    await wait_until(lambda: result(coordinator, task), what="result after restart")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0
    assert len(coordinator.of("enroll")) == 1
    assert result(coordinator, task)["status"] == "succeeded"


async def test_explicit_legacy_credentials_are_configured(tmp_path: Path) -> None:
    coordinator = FakeCoordinator(host_id="host-a", token="token-a-0123456789")
    settings = AgentSettings(
        _env_file=None,
        url="http://coordinator.test",
        host_id="host-a",
        token=SecretStr("token-a-0123456789"),
        devices="sim:phone-1",
        workflows_dir="none",
        poll_wait_s=1,
        heartbeat_interval_s=0.2,
    )
    shutdown, agent = await start(settings, coordinator)
    task = coordinator.assign("phone-1", kind="workflow", workflow={"name": "home-smoke", "params": {}})
    await wait_until(lambda: result(coordinator, task), what="result")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0
    assert coordinator.of("enroll") == [] and coordinator.of("devices_enroll") == []
    assert [d["device_id"] for d in coordinator.of("heartbeat")[0].body["devices"]] == ["phone-1"]
    # No workflows (HOST_AGENT_WORKFLOWS_DIR=none): workflow assignments fail cleanly.
    assert (result(coordinator, task)["status"], result(coordinator, task)["failure_reason"]) == (
        "failed", "workflow_not_found"
    )


async def test_forgotten_device_is_enrolled_again_and_reported_under_its_new_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    state = tmp_path / "state"
    shutdown, agent = await start(managed_settings(state), coordinator)
    await wait_until(lambda: coordinator.reported_ids(), what="first heartbeat")
    assert coordinator.reported_ids()[0] == ["host-m.phone-1", "host-m.phone-2"]

    coordinator.forget("host-m.phone-1")  # DELETE /api/v1/devices/host-m.phone-1
    enrollments = len(coordinator.of("devices_enroll"))
    forgotten_at = len(coordinator.calls)
    await wait_until(
        lambda: coordinator.reported_ids()[-1] == ["host-m.phone-1.2", "host-m.phone-2"],
        what="heartbeat with the new id",
    )
    # The heartbeat naming the forgotten id was refused; one enrollment of the host's devices
    # answered it, and the map on disk has the new id (written atomically, like at start-up).
    later = [c.body["devices"][0]["device_id"] for c in coordinator.calls[forgotten_at:] if c.path.endswith("/heartbeat")]
    assert later[0] == "host-m.phone-1" and "host-m.phone-1.2" in later
    assert len(coordinator.of("devices_enroll")) == enrollments + 1
    assert [d["local_id"] for d in coordinator.of("devices_enroll")[-1].body["devices"]] == ["phone-1", "phone-2"]
    assert StateStore(state).load_device_map() == {
        "phone-1": {"driver": "sim", "device_id": "host-m.phone-1.2"},
        "phone-2": {"driver": "sim", "device_id": "host-m.phone-2"},
    }
    assert "no longer knows device host-m.phone-1" in caplog.text
    assert "phone-1 as host-m.phone-1.2" in caplog.text
    # The device serves work under its new id.
    task = coordinator.assign("host-m.phone-1.2", goal="Turn on airplane mode")
    await wait_until(lambda: result(coordinator, task), what="result on the re-enrolled device")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0
    assert result(coordinator, task)["status"] == "succeeded"


async def test_static_host_never_enrolls_when_a_heartbeat_names_an_unknown_device(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    coordinator = FakeCoordinator(host_id="host-a", token="token-a-0123456789")
    coordinator.always["heartbeat"] = (409, "unknown_device")
    settings = AgentSettings(
        _env_file=None,
        url="http://coordinator.test",
        host_id="host-a",
        token=SecretStr("token-a-0123456789"),
        devices="sim:phone-1",
        poll_wait_s=1,
        heartbeat_interval_s=0.05,
    )
    shutdown, agent = await start(settings, coordinator)
    await wait_until(lambda: len(coordinator.of("heartbeat")) >= 3, what="heartbeats go on")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0
    assert coordinator.of("devices_enroll") == [] and coordinator.of("enroll") == []
    assert "heartbeat rejected" in caplog.text and "enrolling" not in caplog.text


async def test_shutdown_during_startup_exits_zero(tmp_path: Path) -> None:
    coordinator = FakeCoordinator(host_id="host-m")
    coordinator.enrollment_token = ENROLL_SECRET
    coordinator.always["enroll"] = "drop_before"  # the coordinator is unreachable
    shutdown, agent = await start(managed_settings(tmp_path / "state"), coordinator)
    await wait_until(lambda: len(coordinator.of("enroll")) >= 2, what="enroll retries")
    shutdown.set()
    assert await asyncio.wait_for(agent, 5) == 0
    assert coordinator.of("heartbeat") == [] and coordinator.of("claim") == []


def _adb_listing(*lines: str) -> str:
    return "List of devices attached\n" + "".join(f"{line}\n" for line in lines) + "\n"


async def test_adb_star_device_plugged_in_later_is_enrolled_then_reported(tmp_path: Path) -> None:
    (tmp_path / "adb").mkdir()
    adb = FakeAdb(tmp_path / "adb")
    adb.set(devices=_adb_listing("emulator-5554 device model:Pixel_7"))
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    state = tmp_path / "state"
    settings = managed_settings(
        state, devices="adb:*", adb_path=adb.path, device_refresh_s=0.05, heartbeat_interval_s=30
    )
    shutdown, agent = await start(settings, coordinator)

    def reported() -> list[list[str]]:
        return [[d["device_id"] for d in call.body["devices"]] for call in coordinator.of("heartbeat")]

    await wait_until(lambda: reported() == [["host-m.emulator-5554"]], what="first heartbeat")
    adb.set(devices=_adb_listing("emulator-5554 device model:Pixel_7", "0123456789ABCDEF device model:SM_G973F"))
    await wait_until(
        lambda: reported()[-1] == ["host-m.emulator-5554", "host-m.0123456789ABCDEF"], what="new phone reported"
    )
    # Enrolled (just the new phone) before any heartbeat named it, and the id map kept on disk.
    new_enroll = coordinator.of("devices_enroll")[-1]
    assert [d["local_id"] for d in new_enroll.body["devices"]] == ["0123456789ABCDEF"]
    first_report = next(c for c in coordinator.of("heartbeat") if len(c.body["devices"]) == 2)
    assert coordinator.calls.index(new_enroll) < coordinator.calls.index(first_report)
    assert StateStore(state).load_device_map() == {
        "emulator-5554": {"driver": "adb", "device_id": "host-m.emulator-5554"},
        "0123456789ABCDEF": {"driver": "adb", "device_id": "host-m.0123456789ABCDEF"},
    }

    adb.set(devices=_adb_listing("0123456789ABCDEF device model:SM_G973F"))  # the emulator went away
    await wait_until(lambda: reported()[-1] == ["host-m.0123456789ABCDEF"], what="gone phone dropped")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0


@pytest.mark.parametrize(
    ("url", "warned_host"),
    [
        ("http://coordinator.test", "coordinator.test"),
        ("http://10.0.0.5:8000", "10.0.0.5"),
        ("http://user:s3cret-in-url@coord.example", "coord.example"),
        ("http://127.0.0.1:8000", None),
        ("http://127.8.9.10", None),
        ("http://[::1]:8000", None),
        ("http://localhost:8000", None),
        ("http://LocalHost", None),
        ("https://coordinator.test", None),
    ],
)
async def test_plain_http_to_a_remote_coordinator_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, url: str, warned_host: str | None
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    coordinator = FakeCoordinator(host_id="host-a", token="token-a-0123456789")
    settings = AgentSettings(
        _env_file=None, url=url, host_id="host-a", token=SecretStr("token-a-0123456789"), devices=""
    )
    shutdown, agent = await start(settings, coordinator)
    await wait_until(lambda: "starting" in caplog.text, what="start-up line")
    shutdown.set()
    await asyncio.wait_for(agent, 10)  # (user info in the URL is not a credential the fake accepts)
    warnings = [r.getMessage() for r in caplog.records if "plain http://" in r.getMessage()]
    if warned_host is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warned_host in warnings[0]
    assert "s3cret" not in caplog.text


def lose_identity(coordinator: FakeCoordinator, new_host_id: str) -> None:
    """The coordinator's Redis lost this host: its token, enrollment and devices are unknown; an
    enrollment made now creates ``new_host_id``."""
    coordinator.token = "lost"
    coordinator.enrolled = None
    coordinator.device_ids = {}
    coordinator.host_id = new_host_id


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "rejected this host's credential" in r.getMessage()]


async def test_a_managed_host_the_coordinator_lost_enrolls_again_once_with_its_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    state = tmp_path / "state"
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    shutdown, agent = await start(managed_settings(state), coordinator)
    await wait_until(lambda: coordinator.of("heartbeat"), what="first heartbeat")
    first_enroll = coordinator.of("enroll")[0].body

    lose_identity(coordinator, "host-n")
    await wait_until(lambda: any("/hosts/host-n/heartbeat" in c.path for c in coordinator.calls),
                     what="a heartbeat as the new host")
    # The stored enrollment was replayed, not a new one minted; the state names the new host only.
    assert [c.body for c in coordinator.of("enroll")] == [first_enroll, first_enroll]
    assert StateStore(state).load_identity()["host_id"] == "host-n"
    assert {d["device_id"] for d in StateStore(state).load_device_map().values()} == {
        "host-n.phone-1", "host-n.phone-2"}
    task = coordinator.assign("host-n.phone-1", goal="Turn on airplane mode")
    await wait_until(lambda: result(coordinator, task), what="a result as the new host")
    [line] = refusal_lines(caplog)
    assert "enrolled again" in line and "host-m" in line and "host-n" in line

    # Lost again: enrolled once per process, so it stops, in one line, rather than loop.
    lose_identity(coordinator, "host-o")
    assert await asyncio.wait_for(agent, 10) == 1
    assert len(coordinator.of("enroll")) == 2
    assert len(refusal_lines(caplog)) == 2 and "stopped" in refusal_lines(caplog)[1]
    assert not shutdown.is_set()


async def test_a_managed_host_the_coordinator_lost_stops_in_one_line_without_a_valid_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    state = tmp_path / "state"
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    _, agent = await start(managed_settings(state), coordinator)
    await wait_until(lambda: coordinator.of("heartbeat"), what="first heartbeat")

    lose_identity(coordinator, "host-n")
    coordinator.enrollment_token = "tet_another-deployments-token"  # the agent's is unknown now
    assert await asyncio.wait_for(agent, 10) == 1
    [line] = refusal_lines(caplog)
    assert line.startswith("stopped:") and "enrolling again" in line and "failed" in line
    assert StateStore(state).load_identity()["host_id"] == "host-m"  # nothing replaced
    assert len(coordinator.of("enroll")) == 2


async def test_a_restart_after_redis_lost_its_data_enrolls_again_with_a_new_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent")
    state = tmp_path / "state"
    coordinator = FakeCoordinator(host_id="host-m", token="unused")
    coordinator.enrollment_token = ENROLL_SECRET
    shutdown, agent = await start(managed_settings(state), coordinator)
    await wait_until(lambda: coordinator.of("heartbeat"), what="first heartbeat")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0

    # The operator mints a new token after the loss and restarts the agent with it: the state
    # folder need not be deleted.
    lose_identity(coordinator, "host-n")
    coordinator.enrollment_token = "tet_minted-after-the-loss-0123456789"
    shutdown, agent = await start(managed_settings(state, enrollment_token=coordinator.enrollment_token),
                                  coordinator)
    await wait_until(lambda: any("/hosts/host-n/heartbeat" in c.path for c in coordinator.calls),
                     what="a heartbeat as the new host")
    shutdown.set()
    assert await asyncio.wait_for(agent, 10) == 0
    first, again = coordinator.of("enroll")
    assert again.body == first.body
    assert StateStore(state).load_identity()["host_id"] == "host-n"
    assert len(refusal_lines(caplog)) == 1
