"""Spec scenarios "Execute a goal assignment" and "Execute a workflow assignment": the agent runs
claimed work through the runtime's TaskRunner and WorkflowRunner on its own DeviceManager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.client import Assignment
from agent.executor import RuntimeExecutor
from agent.runtime import (
    EXAMPLE_WORKFLOWS_DIR,
    DeviceManager,
    DeviceNotFound,
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


def _assignment(**payload: Any) -> Assignment:
    return Assignment.from_wire({"task_id": "t_1", "attempt": 1, "lease_id": "l_1", "lease_ttl_ms": 60000,
                                 "device_id": "d_cloud_1", **payload})


async def test_execute_a_goal_assignment() -> None:
    executor, manager = await _executor()
    published: list[Progress] = []
    outcome = await executor.run(_assignment(kind="goal", goal="Turn on airplane mode", max_steps=10),
                                 RunControl(published.append))
    assert outcome.status == "succeeded" and outcome.failure_reason is None
    assert manager.driver_for("d_cloud_1").toggles["Airplane mode"] is True  # type: ignore[attr-defined]
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
    assert manager.driver_for("d_cloud_1").notes == ["from a workflow"]  # type: ignore[attr-defined]
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
    assert (outcome.status, outcome.failure_reason) == ("failed", "device_unavailable")
    assert len(adb.calls()) == calls


async def test_device_lost_mid_run_fails_as_device_unavailable(tmp_path: Path) -> None:
    adb = FakeAdb(tmp_path)
    manager = await DeviceManager.discover(parse_device_specs("adb:emulator-5554"), adb_path=adb.path)
    manager.bind({"emulator-5554": "d_cloud_1"})
    executor = RuntimeExecutor(manager, TaskRunner(ScriptedPlanner()), WorkflowRunner(EXAMPLE_WORKFLOWS_DIR))
    # Unplugged after the run was handed the device: its adb calls fail, and the listing
    # taken after the failure no longer has it.
    adb.set(missing_serials=["emulator-5554"], devices="List of devices attached\n\n")
    outcome = await executor.run(_assignment(kind="workflow", workflow={"name": "home-smoke", "params": {}}),
                                 RunControl())
    assert (outcome.status, outcome.failure_reason) == ("failed", "device_unavailable")
    # A driver error on a device that is still there stays a driver error.
    adb.set(missing_serials=[], dump_status="ERROR: null root node returned by UiTestAutomationBridge.")
    adb.set(devices="List of devices attached\nemulator-5554 device model:Pixel_7\n\n")
    await manager.refresh()
    outcome = await executor.run(_assignment(kind="goal", goal="Turn on Wi-Fi"), RunControl())
    assert (outcome.status, outcome.failure_reason) == ("failed", "driver_error")
