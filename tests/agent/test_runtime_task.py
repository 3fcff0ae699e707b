"""The planner/executor loop, with the scripted planner and with planners written for a test."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agent.runtime import (
    Action,
    Observation,
    Progress,
    RunControl,
    ScriptedPlanner,
    Task,
    TaskRunner,
    make_planner,
)
from agent.runtime.actions import MAX_SUMMARY_CHARS
from agent.runtime.errors import DeviceLost, DriverError, PlannerError
from agent.runtime.openai_planner import OpenAIPlanner
from agent.runtime.sim import SimDriver
from agent.runtime.task import StepRecord

pytestmark = pytest.mark.anyio


class Recorder:
    """A RunControl whose published progress is kept, for assertions."""

    def __init__(self) -> None:
        self.progress: list[Progress] = []
        self.control = RunControl(self.progress.append)


async def run_goal(goal: str, phone: SimDriver, max_steps: int = 20) -> tuple[object, list[Progress]]:
    recorder = Recorder()
    outcome = await TaskRunner(ScriptedPlanner()).run(Task(goal, max_steps), phone, recorder.control)
    return outcome, recorder.progress


def assert_bounded(progress: list[Progress]) -> None:
    for item in progress:
        assert set(vars(item)) == {"step_index", "status", "summary"}
        assert isinstance(item.summary, str) and len(item.summary) <= MAX_SUMMARY_CHARS
        assert "\n" not in item.summary and "PNG" not in item.summary and "children" not in item.summary


async def test_scripted_planner_turns_on_airplane_mode() -> None:
    phone = SimDriver("p1")
    outcome, progress = await run_goal("Turn on airplane mode", phone)
    assert outcome.status == "succeeded" and outcome.failure_reason is None
    assert outcome.metadata == {"steps": 2}
    assert phone.toggles["Airplane mode"] is True
    # "running" before each action, its result after it, then the verified "done".
    assert [(p.step_index, p.status, p.summary) for p in progress] == [
        (0, "running", "launch settings"),
        (0, "succeeded", "launch settings"),
        (1, "running", "tap 'Airplane mode'"),
        (1, "succeeded", "tap 'Airplane mode'"),
        (2, "succeeded", "done: Airplane mode is on"),
    ]
    assert_bounded(progress)


@pytest.mark.parametrize(
    ("goal", "label", "expected"),
    [
        ("Turn off Wi-Fi", "Wi-Fi", False),
        ("switch bluetooth on.", "Bluetooth", True),
        ("Enable flight mode", "Airplane mode", True),
        ("Turn the wifi off", "Wi-Fi", False),
    ],
)
async def test_scripted_planner_toggle_goals(goal: str, label: str, expected: bool) -> None:
    phone = SimDriver("p1")
    outcome, _ = await run_goal(goal, phone)
    assert outcome.status == "succeeded"
    assert phone.toggles[label] is expected


async def test_a_toggle_already_in_the_wanted_state_is_not_tapped() -> None:
    phone = SimDriver("p1")
    outcome, _ = await run_goal("Turn on Wi-Fi", phone)  # the sim starts with Wi-Fi on
    assert outcome.status == "succeeded" and outcome.metadata["steps"] == 1
    assert phone.actions == ["launch settings"] and phone.toggles["Wi-Fi"] is True


async def test_scripted_planner_writes_and_verifies_a_note() -> None:
    phone = SimDriver("p1")
    outcome, progress = await run_goal("Write a note saying hello world", phone)
    assert outcome.status == "succeeded", outcome
    assert phone.notes == ["hello world"]
    assert [p.summary for p in progress if p.status == "succeeded"] == [
        "launch notes",
        "tap 'notes:id/editor'",
        "type text (11 chars)",
        "tap 'Save'",
        "done: note saved",
    ]
    assert_bounded(progress)
    assert not any("hello" in p.summary for p in progress)  # typed text is never published

    # An identical note already on screen is not taken as this run's work.
    outcome, _ = await run_goal('Write a note saying "hello world".', phone)
    assert outcome.status == "succeeded"
    assert phone.notes == ["hello world", "hello world"]


async def test_unknown_goal_fails_without_touching_the_device() -> None:
    phone = SimDriver("p1")
    outcome, progress = await run_goal("Order a pizza", phone)
    assert outcome.status == "failed" and outcome.failure_reason == "planner_cannot_plan"
    assert phone.actions == []
    assert progress == [Progress(0, "failed", "fail: planner_cannot_plan")]


class TapForever:
    async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
        return Action("tap", x=540, y=1800)

    async def aclose(self) -> None:
        pass


async def test_max_steps_ends_the_run() -> None:
    phone = SimDriver("p1")
    recorder = Recorder()
    outcome = await TaskRunner(TapForever()).run(Task("loop", max_steps=4), phone, recorder.control)
    assert outcome.status == "failed" and outcome.failure_reason == "max_steps_exceeded"
    assert outcome.metadata["steps"] == 4
    assert len(phone.actions) == 4
    assert [p.step_index for p in recorder.progress if p.status == "succeeded"] == [0, 1, 2, 3]


class StopAfter:
    """Plans taps; on the turn numbered ``stop_at`` it stops the run (as the agent would on a
    lost lease) and still returns an action, which must then not be performed."""

    def __init__(self, control: RunControl, stop_at: int) -> None:
        self.control = control
        self.stop_at = stop_at

    async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
        if len(history) == self.stop_at:
            self.control.stop("lease_lost")
        return Action("tap", x=10, y=10)

    async def aclose(self) -> None:
        pass


async def test_stop_between_steps_cancels_and_performs_nothing_more() -> None:
    phone = SimDriver("p1")
    control = RunControl()
    outcome = await TaskRunner(StopAfter(control, 2)).run(Task("loop"), phone, control)
    assert outcome.status == "cancelled" and outcome.failure_reason == "lease_lost"
    assert outcome.metadata["steps"] == 2
    assert phone.actions == ["tap 10 10", "tap 10 10"]


async def test_stop_interrupts_a_wait() -> None:
    class WaitLong:
        async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
            return Action("wait", ms=600_000)

        async def aclose(self) -> None:
            pass

    def on_progress(progress: Progress) -> None:
        if progress.status == "running":  # the wait has started
            control.stop("cancel_requested")

    control = RunControl(on_progress)
    outcome = await asyncio.wait_for(TaskRunner(WaitLong()).run(Task("wait"), SimDriver("p1"), control), 5)
    assert outcome.status == "cancelled" and outcome.failure_reason == "cancel_requested"


async def test_stop_interrupts_a_planner_that_is_thinking() -> None:
    thinking = asyncio.Event()
    finished = False

    class Slow:
        async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
            nonlocal finished
            thinking.set()
            await asyncio.Event().wait()  # never answers
            finished = True
            return Action("done")

        async def aclose(self) -> None:
            pass

    control = RunControl()
    phone = SimDriver("p1")
    run = asyncio.ensure_future(TaskRunner(Slow()).run(Task("think"), phone, control))
    await thinking.wait()
    control.stop("shutdown")
    outcome = await asyncio.wait_for(run, 5)
    assert outcome.status == "cancelled" and outcome.failure_reason == "shutdown"
    assert not finished and phone.actions == []


class BrokenPhone(SimDriver):
    def __init__(self, fail_in: str, error: Exception) -> None:
        super().__init__("broken")
        self.fail_in = fail_in
        self.error = error

    async def observe(self, *, screenshot: bool = False) -> Observation:
        if self.fail_in == "observe":
            raise self.error
        return await super().observe(screenshot=screenshot)

    async def launch_app(self, app: str) -> None:
        if self.fail_in == "launch":
            raise self.error
        await super().launch_app(app)


@pytest.mark.parametrize(
    ("fail_in", "error"),
    [
        ("observe", DriverError("adb uiautomator dump timed out after 20s")),
        ("launch", DriverError("device offline")),
        ("launch", RuntimeError("a bug in a driver")),
    ],
)
async def test_driver_exceptions_are_failed_outcomes(fail_in: str, error: Exception) -> None:
    outcome, progress = await run_goal("Turn on airplane mode", BrokenPhone(fail_in, error))
    assert outcome.status == "failed" and outcome.failure_reason == "driver_error"
    assert outcome.retryable is False  # the task's own failure: another attempt would not help
    assert outcome.metadata["error"] == str(error)
    assert not any(p.status == "succeeded" for p in progress)


@pytest.mark.parametrize("fail_in", ["observe", "launch"])
async def test_a_lost_device_is_a_retryable_failure(fail_in: str) -> None:
    error = DeviceLost("adb input tap failed (exit 1): adb: device 'emulator-5554' not found")
    outcome, _ = await run_goal("Turn on airplane mode", BrokenPhone(fail_in, error))
    assert (outcome.status, outcome.failure_reason, outcome.retryable) == ("failed", "device_lost", True)
    assert outcome.metadata["error"] == str(error)


async def test_a_missing_element_is_a_failed_step_the_planner_sees() -> None:
    class Retry:
        async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
            if not history:
                return Action("tap", selector="Nonexistent")
            assert history[0].ok is False and "Nonexistent" in (history[0].error or "")
            return Action("done")

        async def aclose(self) -> None:
            pass

    recorder = Recorder()
    outcome = await TaskRunner(Retry()).run(Task("retry"), SimDriver("p1"), recorder.control)
    assert outcome.status == "succeeded" and outcome.metadata["steps"] == 1
    assert (recorder.progress[1].status, recorder.progress[1].summary) == ("failed", "tap 'Nonexistent'")


async def test_consecutive_planner_errors_end_the_run_and_a_good_turn_resets_the_count() -> None:
    replies: list[Action | Exception] = [
        PlannerError("bad reply"),
        PlannerError("bad reply"),
        Action("key", key="home"),
        PlannerError("bad reply"),
        ValueError("planner bug"),  # not a PlannerError: still a failed turn, not a crash
        PlannerError("bad reply"),
    ]

    class Flaky:
        async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
            reply = replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return reply

        async def aclose(self) -> None:
            pass

    recorder = Recorder()
    outcome = await TaskRunner(Flaky(), max_planner_errors=3).run(Task("flaky"), SimDriver("p1"), recorder.control)
    assert outcome.status == "failed" and outcome.failure_reason == "planner_error"
    assert outcome.metadata["steps"] == 6 and replies == []
    assert [p.status for p in recorder.progress if p.status != "running"] == [
        "failed",
        "failed",
        "succeeded",
        "failed",
        "failed",
        "failed",
    ]


def test_task_validation() -> None:
    with pytest.raises(ValueError):
        Task("  ")
    with pytest.raises(ValueError):
        Task("goal", max_steps=0)


async def test_make_planner() -> None:
    assert isinstance(make_planner("scripted"), ScriptedPlanner)
    planner = make_planner("openai", "http://127.0.0.1:9/v1", "model-x", "sk-test")
    assert isinstance(planner, OpenAIPlanner)
    await planner.aclose()
    with pytest.raises(ValueError, match="needs HOST_AGENT_LLM_BASE_URL"):
        make_planner("openai", None, "model-x", "sk-test")
    with pytest.raises(ValueError, match="unknown planner 'magic'"):
        make_planner("magic")


async def test_progress_and_outcome_never_carry_the_screen() -> None:
    marker = b"SCREENSHOT-BYTES-MARKER"

    class ScreenshottingPhone(SimDriver):
        """A driver that always attaches a screenshot, wanted or not."""

        async def observe(self, *, screenshot: bool = False) -> Observation:
            screen = await super().observe()
            return Observation(screen.tree, screen.text, marker)

    phone = ScreenshottingPhone("p1")
    outcome, progress = await run_goal("Turn off Wi-Fi", phone)
    assert outcome.status == "succeeded" and phone.toggles["Wi-Fi"] is False
    assert_bounded(progress)
    published = repr(progress) + repr(outcome)
    assert "MARKER" not in published and "Bluetooth" not in published  # no bytes, no screen text
