"""The agent's one seam into the execution runtime (``agent/runtime``).

``RuntimeExecutor`` implements ``agent.host.Executor``: it reports the bound devices for the
heartbeat and runs an assignment on the device it names — ``kind: goal`` through ``TaskRunner``
(the planner/executor loop), ``kind: workflow`` through ``WorkflowRunner``. It never raises for
a bad assignment: every ending is an ``Outcome``.
"""

from __future__ import annotations

import logging

from agent.client import Assignment
from agent.host import DeviceRecord
from agent.runtime import DeviceManager, Outcome, RunControl, Task, TaskRunner, WorkflowRunner

log = logging.getLogger("agent.executor")


class RuntimeExecutor:
    def __init__(
        self,
        manager: DeviceManager,
        task_runner: TaskRunner,
        workflow_runner: WorkflowRunner | None,
    ) -> None:
        self.manager = manager
        self.task_runner = task_runner
        self.workflow_runner = workflow_runner

    def devices(self) -> list[DeviceRecord]:
        return [
            DeviceRecord(device.device_id, device.driver, dict(device.attributes))
            for device in self.manager.bound_devices()
        ]

    async def run(self, assignment: Assignment, control: RunControl) -> Outcome:
        try:
            driver = self.manager.driver_for(assignment.device_id)
        except KeyError:
            return Outcome("failed", "device_not_found", {"device_id": assignment.device_id})
        if assignment.kind == "goal":
            try:
                task = (
                    Task(assignment.goal)  # type: ignore[arg-type]
                    if assignment.max_steps is None
                    else Task(assignment.goal, assignment.max_steps)  # type: ignore[arg-type]
                )
            except (TypeError, ValueError) as exc:
                return Outcome("failed", "invalid_assignment", {"error": str(exc)[:200]})
            return await self.task_runner.run(task, driver, control)
        if assignment.kind == "workflow":
            name = assignment.workflow_name
            if not isinstance(name, str) or not name:
                return Outcome("failed", "invalid_assignment", {"error": "workflow without a name"})
            if self.workflow_runner is None:
                return Outcome("failed", "workflow_not_found", {"workflow": name})
            return await self.workflow_runner.run(name, assignment.workflow_params, driver, control)
        return Outcome("failed", "unsupported_kind", {"kind": assignment.kind[:64]})
