"""A goal run on one device by the planner/executor loop.

observe -> ``planner.next_action(goal, observation, history)`` -> perform -> repeat, until the
planner says ``done`` or ``fail``, ``max_steps`` actions were taken, the planner failed too many
times in a row, the device failed, or the ``RunControl`` was stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from wire import ResultStatus

from .actions import Action, clip, perform, summarize
from .base import DEVICE_LOST, Outcome, Progress, RunControl
from .driver import Driver, Observation
from .errors import (
    AssertionFailed,
    DeviceLost,
    DriverError,
    ElementNotFound,
    PlannerError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Task:
    goal: str
    max_steps: int = 20  # device actions (and failed planner turns); done/fail are free

    def __post_init__(self) -> None:
        if not isinstance(self.goal, str) or not self.goal.strip():
            raise ValueError("a task needs a non-empty goal")
        if not 1 <= self.max_steps <= 1000:
            raise ValueError("max_steps is between 1 and 1000")


@dataclass(frozen=True)
class StepRecord:
    """One step as the planner sees it in ``history``."""

    index: int
    action: Action | None  # None when the planner produced no action
    summary: str
    ok: bool
    error: str | None = None


class Planner(Protocol):
    async def next_action(self, goal: str, observation: Observation, history: Sequence[StepRecord]) -> Action:
        """The next action (including ``done``/``fail``); ``PlannerError`` for a failed turn."""
        ...

    async def aclose(self) -> None: ...


class _Stopped:
    """Marks an awaitable that was abandoned because the run was stopped."""


_STOPPED = _Stopped()


class TaskRunner:
    def __init__(self, planner: Planner, *, max_planner_errors: int = 3) -> None:
        self.planner = planner
        self.max_planner_errors = max_planner_errors

    async def run(self, task: Task, driver: Driver, control: RunControl) -> Outcome:
        """Never raises for device or planner trouble: every ending is an ``Outcome``."""
        history: list[StepRecord] = []
        planner_errors = 0

        def record(action: Action | None, summary: str, ok: bool, error: str | None = None) -> None:
            step = StepRecord(len(history), action, summary, ok, error)
            history.append(step)
            control.publish(Progress(step.index, "succeeded" if ok else "failed", summary))

        def finish(
            status: ResultStatus, reason: str | None = None, *, retryable: bool = False, **extra: Any
        ) -> Outcome:
            return Outcome(status, reason, {"steps": len(history), **extra}, retryable=retryable)

        def cancelled() -> Outcome:
            return finish(ResultStatus.CANCELLED, control.stop_reason)

        while True:
            if control.stopped:
                return cancelled()
            try:
                observation = await _unless_stopped(driver.observe(), control)
            except Exception as exc:  # noqa: BLE001 - whatever the driver raises ends the run as its failure
                return cancelled() if control.stopped else _driver_failure(exc, finish)
            if isinstance(observation, _Stopped):
                return cancelled()

            try:
                action = await _unless_stopped(
                    self.planner.next_action(task.goal, observation, tuple(history)), control
                )
            except Exception as exc:
                if control.stopped:
                    return cancelled()
                if not isinstance(exc, PlannerError):
                    logger.exception("planner crashed")
                planner_errors += 1
                record(None, clip(f"planner error: {exc}"), False, str(exc)[:200])
                if planner_errors >= self.max_planner_errors:
                    return finish(ResultStatus.FAILED, "planner_error", error=str(exc)[:200])
                if len(history) >= task.max_steps:
                    return finish(ResultStatus.FAILED, "max_steps_exceeded")
                continue
            if isinstance(action, _Stopped):
                return cancelled()
            planner_errors = 0

            summary = summarize(action)
            if action.kind == "done":
                control.publish(Progress(len(history), "succeeded", summary))
                return finish(ResultStatus.SUCCEEDED)
            if action.kind == "fail":
                control.publish(Progress(len(history), "failed", summary))
                return finish(ResultStatus.FAILED, clip(action.reason or "planner_gave_up", 120))
            if len(history) >= task.max_steps:
                return finish(ResultStatus.FAILED, "max_steps_exceeded")
            if control.stopped:
                return cancelled()

            # "running" first, so a renewal during a long step (a wait) shows what is happening.
            control.publish(Progress(len(history), "running", summary))
            try:
                stopped = await perform(driver, action, control)
            except (ElementNotFound, AssertionFailed) as exc:
                # The planner aimed at something that is not there: it sees this in history.
                record(action, summary, False, str(exc))
                await control.after_step(history[-1].index, driver)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever the driver raises ends the run as its failure
                return cancelled() if control.stopped else _driver_failure(exc, finish)
            if stopped:
                return cancelled()
            record(action, summary, True)
            await control.after_step(history[-1].index, driver)


def _driver_failure(exc: Exception, finish: Callable[..., Outcome]) -> Outcome:
    error = clip(str(exc) or type(exc).__name__)
    if isinstance(exc, DeviceLost):  # the device went away: not the task's fault, so retryable
        logger.warning("device lost: %s", exc)
        return finish(ResultStatus.FAILED, DEVICE_LOST, retryable=True, error=error)
    # A DriverError is the device talking; anything else is a bug in a driver, worth a traceback.
    logger.warning("device failed: %s", exc, exc_info=None if isinstance(exc, DriverError) else exc)
    return finish(ResultStatus.FAILED, "driver_error", error=error)


async def _unless_stopped(awaitable: Awaitable[T], control: RunControl) -> T | _Stopped:
    """Await ``awaitable`` unless the run is stopped first (then cancel it): a slow planner
    call or device read must not hold a cancelled run."""
    work = asyncio.ensure_future(awaitable)
    stop = asyncio.ensure_future(control.wait_stopped())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in (work, stop):
            future.cancel()
        # Reap both so nothing is left pending for the loop to warn about.
        await asyncio.gather(work, stop, return_exceptions=True)
    if work.cancelled():
        return _STOPPED
    return work.result()
