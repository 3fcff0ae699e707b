"""Named JSON workflows on the sim phone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.runtime import (
    EXAMPLE_WORKFLOWS_DIR,
    Progress,
    RunControl,
    WorkflowRunner,
    validate_workflows_dir,
)
from agent.runtime.actions import MAX_SUMMARY_CHARS
from agent.runtime.errors import DeviceLost
from agent.runtime.sim import SimDriver

pytestmark = pytest.mark.anyio


def write(folder: Path, filename: str, name: str, steps: list[dict[str, Any]]) -> None:
    (folder / filename).write_text(json.dumps({"name": name, "steps": steps}))


async def run(
    runner: WorkflowRunner, name: str, params: dict[str, Any] | None, phone: SimDriver
) -> tuple[Any, list[Progress]]:
    progress: list[Progress] = []
    outcome = await runner.run(name, params, phone, RunControl(progress.append))
    return outcome, progress


async def test_example_workflows_run_on_the_sim_and_publish_every_step() -> None:
    runner = WorkflowRunner(EXAMPLE_WORKFLOWS_DIR)
    assert sorted(runner.workflows()) == ["home-smoke", "note-smoke", "settings-smoke"]
    phone = SimDriver("p1")
    for name, params in [
        ("settings-smoke", None),
        ("note-smoke", {"text": "hello from tether"}),
        ("home-smoke", {}),
        ("settings-smoke", None),  # repeatable: it leaves the phone as it found it
        ("note-smoke", {"text": "hello from tether"}),
    ]:
        outcome, progress = await run(runner, name, params, phone)
        assert outcome.status == "succeeded", (name, outcome)
        steps = len(runner.workflows()[name].steps)
        assert outcome.metadata == {"workflow": name, "steps": steps}
        # "running" then "succeeded" for every step, in order.
        assert [(p.step_index, p.status) for p in progress] == [
            (i, status) for i in range(steps) for status in ("running", "succeeded")
        ]
        for item in progress:
            assert len(item.summary) <= MAX_SUMMARY_CHARS and "\n" not in item.summary
    assert phone.notes == ["hello from tether", "hello from tether"]
    assert phone.toggles["Airplane mode"] is False and phone.screen == "home"
    assert any(a.startswith("swipe ") for a in phone.actions)


async def test_params_are_substituted_whole_and_inside_text(tmp_path: Path) -> None:
    write(
        tmp_path,
        "greet.json",
        "greet",
        [
            {"action": "launch", "app": "${app}"},
            {"action": "tap", "x": "${x}", "y": "${y}"},  # whole-string params keep their type
            {"action": "type", "text": "${greeting}, ${who}!"},
            {"action": "tap", "text": "Save"},
            {"action": "assert_text", "text": "${greeting}, ${who}!"},
        ],
    )
    phone = SimDriver("p1")
    params = {"app": "notes", "x": 540, "y": 370, "greeting": "Hello", "who": "world"}
    outcome, progress = await run(WorkflowRunner(tmp_path), "greet", params, phone)
    assert outcome.status == "succeeded", outcome
    assert phone.notes == ["Hello, world!"]
    assert "tap (540, 370)" in [p.summary for p in progress]


async def test_missing_param_fails_before_touching_the_device(tmp_path: Path) -> None:
    write(tmp_path, "w.json", "w", [{"action": "launch", "app": "notes"}, {"action": "type", "text": "${text}"}])
    phone = SimDriver("p1")
    outcome, progress = await run(WorkflowRunner(tmp_path), "w", {"other": "x"}, phone)
    assert (outcome.status, outcome.failure_reason) == ("failed", "missing_param")
    assert outcome.metadata["param"] == "text"
    assert phone.actions == [] and progress == []


async def test_invalid_step_fails_before_touching_the_device(tmp_path: Path) -> None:
    write(tmp_path, "w.json", "w", [{"action": "launch", "app": "notes"}, {"action": "fly"}])
    phone = SimDriver("p1")
    outcome, _ = await run(WorkflowRunner(tmp_path), "w", None, phone)
    assert (outcome.status, outcome.failure_reason) == ("failed", "workflow_invalid")
    assert "step 1" in outcome.metadata["error"]
    assert phone.actions == []


async def test_unknown_workflow_and_files_added_later(tmp_path: Path) -> None:
    runner = WorkflowRunner(tmp_path)
    phone = SimDriver("p1")
    outcome, _ = await run(runner, "late", None, phone)
    assert (outcome.status, outcome.failure_reason) == ("failed", "workflow_not_found")

    (tmp_path / "broken.json").write_text("{not json")  # one bad file must not hide the others
    (tmp_path / "notes.txt").write_text("not a workflow")
    write(tmp_path, "any-file-name.json", "late", [{"action": "key", "key": "home"}])
    outcome, _ = await run(runner, "late", None, phone)
    assert outcome.status == "succeeded"
    assert phone.actions == ["key home"]


async def test_assertion_failure_stops_the_workflow(tmp_path: Path) -> None:
    write(
        tmp_path,
        "w.json",
        "w",
        [
            {"action": "launch", "app": "settings"},
            {"action": "assert_text", "text": "Airplane mode\nOn"},
            {"action": "tap", "text": "Airplane mode"},
        ],
    )
    phone = SimDriver("p1")
    outcome, progress = await run(WorkflowRunner(tmp_path), "w", None, phone)
    assert (outcome.status, outcome.failure_reason) == ("failed", "assertion_failed")
    assert outcome.metadata["failed_step"] == 1
    assert progress[-1] == Progress(1, "failed", "assert text 'Airplane mode On'")
    assert phone.actions == ["launch settings"] and phone.toggles["Airplane mode"] is False


async def test_missing_element_and_driver_errors_are_failed_outcomes(tmp_path: Path) -> None:
    write(tmp_path, "a.json", "tap-missing", [{"action": "tap", "text": "Nope"}])
    write(tmp_path, "b.json", "bad-app", [{"action": "launch", "app": "camera"}])
    runner = WorkflowRunner(tmp_path)
    outcome, _ = await run(runner, "tap-missing", None, SimDriver("p1"))
    assert outcome.failure_reason == "element_not_found"
    outcome, _ = await run(runner, "bad-app", None, SimDriver("p1"))
    assert outcome.failure_reason == "driver_error" and "not installed" in outcome.metadata["error"]
    assert outcome.retryable is False


async def test_a_lost_device_is_a_retryable_failure(tmp_path: Path) -> None:
    class Unplugged(SimDriver):
        async def launch_app(self, app: str) -> None:
            raise DeviceLost("adb monkey failed (exit 1): error: device offline")

    write(tmp_path, "a.json", "launch", [{"action": "launch", "app": "settings"}])
    outcome, progress = await run(WorkflowRunner(tmp_path), "launch", None, Unplugged("p1"))
    assert (outcome.status, outcome.failure_reason, outcome.retryable) == ("failed", "device_lost", True)
    assert outcome.metadata["failed_step"] == 0 and "device offline" in outcome.metadata["error"]
    assert progress[-1].status == "failed"


async def test_stop_interrupts_a_wait_and_cancels(tmp_path: Path) -> None:
    write(
        tmp_path,
        "w.json",
        "w",
        [{"action": "key", "key": "home"}, {"action": "wait", "ms": 600000}, {"action": "launch", "app": "notes"}],
    )

    def on_progress(progress: Progress) -> None:
        if progress.step_index == 1 and progress.status == "running":
            control.stop("cancel_requested")

    control = RunControl(on_progress)
    phone = SimDriver("p1")
    outcome = await asyncio.wait_for(WorkflowRunner(tmp_path).run("w", None, phone, control), 5)
    assert (outcome.status, outcome.failure_reason) == ("cancelled", "cancel_requested")
    assert phone.actions == ["key home"]

    stopped = RunControl()
    stopped.stop("lease_lost")
    outcome = await WorkflowRunner(tmp_path).run("w", None, phone, stopped)
    assert (outcome.status, outcome.failure_reason) == ("cancelled", "lease_lost")
    assert phone.actions == ["key home"]


def test_validate_workflows_dir(tmp_path: Path) -> None:
    assert validate_workflows_dir(str(tmp_path)) == tmp_path
    with pytest.raises(ValueError, match="does not exist"):
        validate_workflows_dir(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        validate_workflows_dir(tmp_path / "file")
