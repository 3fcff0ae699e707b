"""The agent's one seam into the execution runtime (``agent/runtime``).

``RuntimeExecutor`` implements ``agent.runtime.Executor``: it reports the bound devices (with
whether each is reachable) for the heartbeat, keeps them current (``refresh``: the runtime
re-reads device state, and devices found since start-up get their cloud ids through ``enroll``
before they are ever reported), and runs an assignment on the device it names — ``kind: goal``
through ``TaskRunner`` (the planner/executor loop), ``kind: workflow`` through
``WorkflowRunner``. It never raises for a bad assignment: every ending is an ``Outcome``, except
a device this host does not have (``DeviceNotFound``), which ``LeasedRun`` reports.

A run that fails because of its device rather than its task is a *retryable* failure: the device
is unreachable when the run starts (``device_unavailable``), adb lost it during a command
(``device_lost``), or a driver error turns out, on a fresh look at the devices, to be the device
gone (``device_gone``: dropped) or unreachable (``device_unavailable``). ``reenroll`` gives the
bound devices their cloud ids again when the coordinator has forgotten one (a managed host's
device un-enrolled by an operator).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from agent.answers import Assignment, MalformedAnswer, Rejected, TransientError, Unauthorized
from agent.runtime import (
    DEVICE_GONE,
    DEVICE_LOST,
    DEVICE_UNAVAILABLE,
    DeviceManager,
    DeviceRecord,
    Driver,
    Outcome,
    RunControl,
    Task,
    TaskRunner,
    WorkflowRunner,
)
from wire import ResultStatus, TaskKind

log = logging.getLogger("agent.executor")

# Runner failures that may be the device going away: the devices are looked at again after them.
_DRIVER_ERROR = "driver_error"

# Local devices -> {local id: cloud id}; raises the client's errors (see ``agent/identity.py``).
Enroll = Callable[[list[DeviceRecord]], Awaitable[dict[str, str]]]


class RuntimeExecutor:
    def __init__(
        self,
        manager: DeviceManager,
        task_runner: TaskRunner,
        workflow_runner: WorkflowRunner | None,
        *,
        enroll: Enroll | None = None,
    ) -> None:
        """``enroll`` gives devices found after start-up their cloud ids; without it they are
        never bound, so never reported or served."""
        self.manager = manager
        self.task_runner = task_runner
        self.workflow_runner = workflow_runner
        self._enroll = enroll
        # Local ids the coordinator refused (409 device_limit, driver_conflict, ...): asking again
        # every refresh would only repeat the refusal. Forgotten once the device leaves.
        self._refused: set[str] = set()

    def devices(self) -> list[DeviceRecord]:
        return self.manager.bound_devices()

    def capabilities(self) -> dict[str, Any]:
        """The workflows loaded now (none without a workflows folder), the planner goals run
        with, and ``sessions``: every driver runs a live session's commands. The coordinator
        places a workflow task only on a host that lists it, a session only on one that says
        ``"sessions": true``."""
        workflows = self.workflow_runner.names() if self.workflow_runner is not None else []
        # A planner class names itself (``name``); one that does not is not reported.
        planner = getattr(self.task_runner.planner, "name", None)
        return {"workflows": workflows, "planners": [planner] if isinstance(planner, str) else [], "sessions": True}

    def driver_for(self, device_id: str) -> Driver:
        """The driver of a bound device (a live session drives it command by command);
        ``DeviceNotFound`` when this host does not have it."""
        return self.manager.driver_for(device_id)

    async def refresh(self) -> None:
        """Re-read device state, then enroll devices found since the last refresh. A failed
        enrollment leaves them unreported (a transient failure is tried again next refresh);
        ``Unauthorized`` is raised: the host credential is gone."""
        await self.manager.refresh()
        unbound = self.manager.unbound_devices()
        self._refused &= {device.local_id for device in unbound}
        new = [device for device in unbound if device.local_id not in self._refused]
        if not new or self._enroll is None:
            return
        names = ", ".join(device.local_id for device in new)
        try:
            id_map = await self._enroll(new)
        except Unauthorized:
            raise
        except TransientError as exc:
            log.warning("enrolling new device(s) %s failed (%s); trying again at the next refresh", names, exc)
            return
        except (Rejected, MalformedAnswer) as exc:
            log.error("the coordinator refused new device(s) %s (%s); not using them", names, exc)
            self._refused.update(device.local_id for device in new)
            return
        self.manager.bind_new(id_map)
        log.info("new device(s) in service: %s", ", ".join(f"{k}→{v}" for k, v in id_map.items()))

    async def reenroll(self) -> dict[str, str]:
        """Enroll every bound device again and bind the ids the coordinator answers (persisted
        by ``enroll`` before they are used); ``{local id: new cloud id}`` of those that changed."""
        bound = self.manager.bound_devices()
        if not bound or self._enroll is None:
            return {}
        before = {device.local_id: device.device_id for device in bound}
        changed = self.manager.rebind(await self._enroll(bound))
        for local_id, device_id in changed.items():
            log.info("device %s enrolled again: cloud id %s → %s", local_id, before[local_id], device_id)
        return changed

    async def run(self, assignment: Assignment, control: RunControl) -> Outcome:
        driver = self.manager.driver_for(assignment.device_id)  # DeviceNotFound: the caller's to report
        if not driver.online:
            # Assigned before the coordinator saw it ``unavailable``: fail fast, and say why.
            log.warning("task %s: device %s is not reachable", assignment.task_id, assignment.device_id)
            return Outcome.retryable_failure(DEVICE_UNAVAILABLE, {"device_id": assignment.device_id})
        outcome = await self._checked(assignment, driver, control)
        await control.after_run(outcome, driver)
        return outcome

    async def _checked(self, assignment: Assignment, driver: Driver, control: RunControl) -> Outcome:
        """The run's outcome, a driver failure looked at again: the device's fault or the task's."""
        outcome = await self._run(assignment, driver, control)
        if outcome.status == ResultStatus.FAILED and outcome.failure_reason in (_DRIVER_ERROR, DEVICE_LOST):
            # The device may have gone away mid-run: ask once more (one listing for adb), so the
            # next heartbeat reports it as it is, and an unplugged phone reads as the device's
            # fault rather than the task's.
            await self.manager.refresh()
            metadata = {**outcome.metadata, "device_id": assignment.device_id}
            if outcome.failure_reason == DEVICE_LOST:
                return Outcome.retryable_failure(DEVICE_LOST, metadata)  # adb said so: that is the reason
            if not any(device.local_id == driver.local_id for device in self.manager.local_devices()):
                return Outcome.retryable_failure(DEVICE_GONE, metadata)  # dropped by the device manager
            if not driver.online:
                return Outcome.retryable_failure(DEVICE_UNAVAILABLE, metadata)
        return outcome

    async def _run(self, assignment: Assignment, driver: Driver, control: RunControl) -> Outcome:
        if assignment.kind == TaskKind.GOAL:
            goal = assignment.goal or ""  # no goal fails Task's own check, as an empty one does
            try:
                task = Task(goal) if assignment.max_steps is None else Task(goal, assignment.max_steps)
            except (TypeError, ValueError) as exc:
                return Outcome(ResultStatus.FAILED, "invalid_assignment", {"error": str(exc)[:200]})
            return await self.task_runner.run(task, driver, control)
        if assignment.kind == TaskKind.WORKFLOW:
            name = assignment.workflow_name
            if not isinstance(name, str) or not name:
                return Outcome(ResultStatus.FAILED, "invalid_assignment", {"error": "workflow without a name"})
            if self.workflow_runner is None:
                return Outcome(ResultStatus.FAILED, "workflow_not_found", {"workflow": name})
            return await self.workflow_runner.run(name, assignment.workflow_params, driver, control)
        return Outcome(ResultStatus.FAILED, "unsupported_kind", {"kind": assignment.kind[:64]})
