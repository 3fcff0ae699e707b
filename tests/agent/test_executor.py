"""Spec scenarios "Execute a goal assignment" and "Execute a workflow assignment": the agent runs
claimed work through the runtime's TaskRunner and WorkflowRunner on its own DeviceManager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.answers import Assignment
from agent.executor import RuntimeExecutor
from agent.runtime import (
    EXAMPLE_WORKFLOWS_DIR,
    DeviceManager,
    DeviceNotFound,
    DeviceRecord,
    DeviceSpec,
    Progress,
    RunControl,
    ScriptedPlanner,
    TaskRunner,
    WorkflowRunner,
    parse_device_specs,
)
from tests.agent.fake_adb import FakeAdb

pytestmark = pytest.mark.anyio


async def _executor() -> tuple[RuntimeExecutor, DeviceManager]:
    manager = await DeviceManager.discover([DeviceSpec("sim", "phone-1")])
    manager.bind({"phone-1": "d_cloud_1"})
    return RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), WorkflowRunner(EXAMPLE_WORKFLOWS_DIR)), manager


async def test_capabilities_list_the_loaded_workflows_and_the_planner(tmp_path: Path) -> None:
    executor, _ = await _executor()
    assert executor.capabilities() == {
        "workflows": ["home-smoke", "note-smoke", "settings-smoke"], "planners": ["scripted"], "sessions": True}
    manager = await DeviceManager.discover([DeviceSpec("sim", "phone-1")])
    bare = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), None)
    assert bare.capabilities() == {"workflows": [], "planners": ["scripted"], "sessions": True}, "no folder: no workflow"
    runner = WorkflowRunner(tmp_path)
    folder = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), runner)
    assert folder.capabilities()["workflows"] == []
    (tmp_path / "late.json").write_text('{"name": "late", "steps": [{"action": "key", "key": "home"}]}')
    (tmp_path / "broken.json").write_text("{not json")
    assert folder.capabilities()["workflows"] == ["late"], "a file dropped in is listed; a bad one is not"
    (tmp_path / "late.json").unlink()
    assert folder.capabilities()["workflows"] == []


def _assignment(**payload: Any) -> Assignment:
    return Assignment.from_wire({"task_id": "t_1", "attempt": 1, "lease_id": "l_1", "lease_ttl_ms": 60000,
                                 "device_id": "d_cloud_1", **payload})


async def test_execute_a_goal_assignment() -> None:
    executor, manager = await _executor()
    published: list[Progress] = []
    outcome = await executor.run(_assignment(kind="goal", goal="Turn on airplane mode", max_steps=10),
                                 RunControl(published.append))
    assert outcome.status == "succeeded" and outcome.failure_reason is None
    assert manager.driver_for("d_cloud_1").toggles["Airplane mode"] is True
    assert published and all(len(p.summary) <= 200 for p in published)
    # the terminal status and failure reason of a goal the planner cannot do are captured too
    failed = await executor.run(_assignment(kind="goal", goal="Order a pizza"), RunControl())
    assert (failed.status, failed.failure_reason) == ("failed", "planner_cannot_plan")
    too_short = await executor.run(_assignment(kind="goal", goal="Write a note saying hi", max_steps=1),
                                   RunControl())
    assert (too_short.status, too_short.failure_reason) == ("failed", "max_steps_exceeded")


async def test_execute_a_workflow_assignment() -> None:
    executor, manager = await _executor()
    outcome = await executor.run(
        _assignment(kind="workflow", workflow={"name": "note-smoke", "params": {"text": "from a workflow"}}),
        RunControl(),
    )
    assert outcome.status == "succeeded"
    assert manager.driver_for("d_cloud_1").notes == ["from a workflow"]
    missing = await executor.run(_assignment(kind="workflow", workflow={"name": "nope", "params": {}}),
                                 RunControl())
    assert (missing.status, missing.failure_reason) == ("failed", "workflow_not_found")


async def test_assignment_for_a_device_this_host_lacks_is_left_to_the_run_to_report() -> None:
    # LeasedRun turns this into failed/device_not_found (test_host_loops), the one place that does.
    executor, _ = await _executor()
    with pytest.raises(DeviceNotFound) as caught:
        await executor.run(_assignment(kind="goal", goal="Turn on Wi-Fi", device_id="d_other"), RunControl())
    assert caught.value.device_id == "d_other"


async def test_task_on_an_unreachable_device_fails_as_device_unavailable(tmp_path: Path) -> None:
    adb = FakeAdb(tmp_path)
    adb.set(devices="List of devices attached\n\n")  # the configured phone is unplugged
    manager = await DeviceManager.discover(parse_device_specs("adb:emulator-5554"), adb_path=adb.path)
    manager.bind({"emulator-5554": "d_cloud_1"})
    executor = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), WorkflowRunner(EXAMPLE_WORKFLOWS_DIR))
    calls = len(adb.calls())
    outcome = await executor.run(_assignment(kind="goal", goal="Turn on Wi-Fi"), RunControl())
    # A reason that names the device, not the task, and no adb call wasted on a phone not there.
    assert (outcome.status, outcome.failure_reason, outcome.retryable) == ("failed", "device_unavailable", True)
    assert len(adb.calls()) == calls


ATTACHED = "List of devices attached\nemulator-5554 device model:Pixel_7\n\n"
DETACHED = "List of devices attached\n\n"


@pytest.mark.parametrize(
    ("spec", "adb_says", "listing_after", "expected"),
    [
        # adb itself says the device is gone, whatever the listing says after it
        ("adb:emulator-5554", "adb: device 'emulator-5554' not found", DETACHED, ("device_lost", True)),
        ("adb:emulator-5554", "error: device offline", ATTACHED, ("device_lost", True)),
        # an ordinary adb failure, then the listing shows why: unplugged (held: explicit serial)...
        ("adb:emulator-5554", "error: something odd", DETACHED, ("device_unavailable", True)),
        # ... or gone from this host (adb:* drops a phone that left the listing)
        ("adb:*", "error: something odd", DETACHED, ("device_gone", True)),
        # an ordinary failure on a device that is still there stays the task's failure
        ("adb:emulator-5554", "error: something odd", ATTACHED, ("driver_error", False)),
    ],
)
async def test_device_trouble_mid_run_is_retryable_and_other_failures_are_not(
    tmp_path: Path, spec: str, adb_says: str, listing_after: str, expected: tuple[str, bool]
) -> None:
    adb = FakeAdb(tmp_path)
    adb.set(devices=ATTACHED)
    manager = await DeviceManager.discover(parse_device_specs(spec), adb_path=adb.path)
    manager.bind({"emulator-5554": "d_cloud_1"})
    executor = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), WorkflowRunner(EXAMPLE_WORKFLOWS_DIR))
    # After the run was handed the device: its adb calls fail, and the listing taken after the
    # failure (which keeps the next heartbeat honest) shows the device as it is now.
    adb.set(fail_stderr=adb_says, devices=listing_after)
    outcome = await executor.run(_assignment(kind="workflow", workflow={"name": "home-smoke", "params": {}}),
                                 RunControl())
    assert (outcome.status, (outcome.failure_reason, outcome.retryable)) == ("failed", expected)
    if outcome.retryable:
        assert outcome.metadata["device_id"] == "d_cloud_1"
    assert adb.calls()[-1] == ["devices", "-l"]


async def test_reenroll_binds_the_cloud_ids_the_coordinator_answers_now() -> None:
    manager = await DeviceManager.discover(parse_device_specs("sim:phone-1,sim:phone-2"))
    manager.bind({"phone-1": "d_1", "phone-2": "d_2"})
    sent: list[list[str]] = []

    async def enroll(devices: list[DeviceRecord]) -> dict[str, str]:
        sent.append([device.local_id for device in devices])
        return {"phone-1": "d_1_new", "phone-2": "d_2"}  # phone-1 was forgotten: a new id

    executor = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), None, enroll=enroll)
    assert await executor.reenroll() == {"phone-1": "d_1_new"}
    assert sent == [["phone-1", "phone-2"]]  # every bound device, in one idempotent batch
    assert [(d.local_id, d.device_id) for d in executor.devices()] == [("phone-1", "d_1_new"), ("phone-2", "d_2")]
    assert manager.driver_for("d_1_new").local_id == "phone-1"
    with pytest.raises(DeviceNotFound):
        manager.driver_for("d_1")
    # An id already bound to another device, or a device this host does not hold, changes nothing.
    assert manager.rebind({"phone-1": "d_2", "phone-9": "d_9"}) == {}
    assert [d.device_id for d in manager.bound_devices()] == ["d_1_new", "d_2"]
