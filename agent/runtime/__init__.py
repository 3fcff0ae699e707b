"""The host agent's execution runtime: devices, drivers, the task runner and the workflow runner.

The agent uses only the names exported here.
"""

from __future__ import annotations

from pathlib import Path

from .actions import Action, parse_action
from .base import (
    DEVICE_GONE,
    DEVICE_LOST,
    DEVICE_UNAVAILABLE,
    SHUTDOWN,
    DeviceRecord,
    DeviceSpec,
    Executor,
    Outcome,
    Progress,
    RunControl,
    RunEvidence,
)
from .devices import DeviceManager, DeviceNotFound, parse_device_specs
from .driver import Driver, Observation
from .errors import DeviceLost, DriverError, PlannerError
from .openai_planner import OpenAIPlanner
from .planners import ScriptedPlanner, make_planner
from .session import CommandAnswer, perform_command
from .task import Planner, Task, TaskRunner
from .workflow import WorkflowRunner, validate_workflows_dir

EXAMPLE_WORKFLOWS_DIR = Path(__file__).parent / "example_workflows"

__all__ = [
    "DEVICE_GONE",
    "DEVICE_LOST",
    "DEVICE_UNAVAILABLE",
    "EXAMPLE_WORKFLOWS_DIR",
    "SHUTDOWN",
    "Action",
    "CommandAnswer",
    "DeviceLost",
    "DeviceManager",
    "DeviceNotFound",
    "DeviceRecord",
    "DeviceSpec",
    "Driver",
    "DriverError",
    "Executor",
    "Observation",
    "OpenAIPlanner",
    "Outcome",
    "Planner",
    "PlannerError",
    "Progress",
    "RunControl",
    "RunEvidence",
    "ScriptedPlanner",
    "Task",
    "TaskRunner",
    "WorkflowRunner",
    "make_planner",
    "parse_action",
    "parse_device_specs",
    "perform_command",
    "validate_workflows_dir",
]
