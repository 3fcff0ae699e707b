"""Exceptions raised inside the execution runtime.

Runners turn every one of them into an ``Outcome`` (a driver never crashes the agent)::

    RuntimeFailure
     +-- DriverError          the device could not do what was asked (adb failed or timed out,
     |    |                   unknown key or app); a run ends ``failed`` / ``driver_error``
     |    +-- ElementNotFound no node matches a tap selector; a failed step for the task runner
     |    |                   (the planner may try something else), ``element_not_found`` for workflows
     |    +-- DeviceLost      adb lost the device mid-command (not found, offline, connection
     |                        closed): the device's fault, not the task's; a run ends ``failed`` /
     |                        ``device_lost``, retryable
     +-- ActionError          an action or workflow step is malformed (also a ``ValueError``)
     +-- AssertionFailed      an ``assert_text`` step did not find its text on the screen
     +-- PlannerError         the planner produced no usable action this step (bad reply, HTTP error)

``DeviceNotFound`` (``devices.py``) is not a run failure but a lookup miss: the assignment names a
device this host does not have (or no longer has). ``agent/lease_run.py`` is the one place that
turns it into the ``failed`` / ``device_gone`` outcome (retryable).
"""

from __future__ import annotations


class RuntimeFailure(Exception):
    pass


class DriverError(RuntimeFailure):
    pass


class ElementNotFound(DriverError):
    def __init__(self, selector: str) -> None:
        super().__init__(f"no element matches {selector[:60]!r}")
        self.selector = selector


class DeviceLost(DriverError):
    pass


class ActionError(RuntimeFailure, ValueError):
    pass


class AssertionFailed(RuntimeFailure):
    pass


class PlannerError(RuntimeFailure):
    pass
