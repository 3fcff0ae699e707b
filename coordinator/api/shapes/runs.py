"""What the operator API answers of runs: a run, its breakdown, a page, a rerun, a report."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

import wire
from coordinator.api.shapes.common import Count, Id, Priority, RunStatus, StatusCounts, TaskStatus, Time, one_of
from coordinator.api.shapes.tasks import TaskResult


class Run(TypedDict):
    """A run's summary: its status and counts, never its breakdown (RunDetail)."""

    run_id: Id
    name: str | None
    status: RunStatus
    counts: StatusCounts
    tasks: Count
    created_at: Time
    ended_at: Time | None
    team: Id
    priority: Priority
    created_by: str | None
    cancel_requested: bool
    idempotency_key: str | None


class Excluded(TypedDict):
    device_id: Id
    reason: Annotated[str, one_of("host_offline", "disabled", "host_draining", "unavailable", "host_stalled",
                                   "no_workflow")]
    work: NotRequired[str]


class RunCreated(Run):
    """A run as its create answers it: a matrix's answer names the matching devices left out (the
    first wire.RUN_EXCLUDED_LISTED, lua/createRun-1.lua) and how many were."""

    excluded: NotRequired[list[Excluded]]
    excluded_count: NotRequired[Count]


class DeviceCounts(TypedDict):
    device_id: Id | None  # null: a selector's tasks not placed yet
    counts: StatusCounts


class WorkCounts(TypedDict):
    work: Annotated[str, Field(description=f"the work item: its text, or past {wire.RUN_WORK_LABEL_MAX_BYTES} "
                                           "bytes its start, an ellipsis and 8 hex digits of its SHA-1")]
    counts: StatusCounts


class Breakdown(TypedDict):
    devices: list[DeviceCounts]
    work: list[WorkCounts]


class RunDetail(Run):
    """One run (GET /api/v1/runs/{id}): its summary and the breakdown, which listings leave out."""

    breakdown: Breakdown


class RunPage(TypedDict):
    runs: list[Run]
    next_cursor: str | None


class RunRerun(TypedDict):
    run_id: Id
    created: Count
    run: Run


class ReportCase(TypedDict):
    task_id: Id
    device_id: Id | None
    status: TaskStatus
    time_s: float
    failure_reason: str | None
    last_step: dict[str, Any] | None
    result: TaskResult | None
    artifacts: list[str]
    rerun_of: Id | None


class ReportSuite(TypedDict):
    work: str
    tests: Count
    failures: Count
    skipped: Count
    time_s: float
    cases: list[ReportCase]


class RunReport(TypedDict):
    """A run's report as JSON (``?format=junit``: the same as JUnit XML)."""

    run: Run
    suites: list[ReportSuite]
