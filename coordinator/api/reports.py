"""A run as the report CI systems read (GET /api/v1/runs/{run_id}/report, PROTOCOL.md "Runs"):
JUnit XML, or the same as JSON with each task's result.

One suite per work item (a workflow's name or a goal's text), in the order the run holds them;
one case per task of the run (the latest rerun in each place), named by its device, its time the
seconds its last attempt ran. A failed task is a ``failure``: its message the ``failure_reason`` and
the error the host reported with it, its text the step that failed and the last steps before it
(from the result's metadata: the stored progress may lag the failure, as the agent renews at most
once a second; that progress only when the result names no steps). A cancelled task is
``skipped``, one not ended yet ``skipped`` saying so; each case's
``system-out`` names its task and artifacts. The XML is valid against the JUnit schema Jenkins
reads (tests/coordinator/schemas/jenkins-junit.xsd), and well-formed whatever text it carries: text
is stored without what XML 1.0 forbids (bodies.clean_text), and what an earlier version stored
loses it here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree

import wire
from coordinator.api import shapes
from coordinator.api.bodies import clean_text
from coordinator.api.responses import run_state_view, task_result
from coordinator.state.records import RunCounts, RunRecord, TaskRecord
from wire import iso_ms

UNPLACED = "unplaced"  # the device of a selector's task that never had one


@dataclass(frozen=True)
class Case:
    """One task of the run, as its report names it."""

    task: TaskRecord
    artifacts: list[str]

    @property
    def device(self) -> str:
        return self.task.device_id or self.task.target_device or UNPLACED

    @property
    def seconds(self) -> float:
        """How long its last attempt ran: from its claim to its end (0 if it never ran or runs still)."""
        started, finished = self.task.started_at, self.task.finished_at
        if started is None or finished is None or finished < started:
            return 0.0
        return (finished - started) / 1000

    @property
    def last_step(self) -> str | None:
        step = self.task.last_step
        if not step:
            return None
        return _step_line(step)

    def failure(self) -> tuple[str, str]:
        """A failed task's JUnit ``failure``: its message (the reason, and the error the host
        gave), and its text (the step that failed, then the last steps the host reported)."""
        reason = self.task.failure_reason or "failed"
        result: Mapping[str, Any] = task_result(self.task) or {}
        metadata = result.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        error = metadata.get("error")
        message = f"{reason}: {error}" if isinstance(error, str) and error else reason
        steps = metadata.get("last_steps")
        steps = [step for step in steps if isinstance(step, dict)] if isinstance(steps, list) else []
        lines: list[str] = []
        failed_step = metadata.get("failed_step")
        if isinstance(failed_step, int):
            summary = next((step.get("summary") for step in reversed(steps) if step.get("step_index") == failed_step),
                           None)
            lines.append(f"failed at step {failed_step}" + (f": {summary}" if summary else ""))
        if steps:
            lines += ["last steps:", *(f"  {_step_line(step)}" for step in steps)]
        elif self.last_step:
            lines.append(f"last step reported: {self.last_step}")
        return message, "\n".join(lines) or reason


def _step_line(step: dict[str, Any]) -> str:
    return f"step {step.get('step_index')} ({step.get('status')}): {step.get('summary', '')}"


@dataclass(frozen=True)
class Suite:
    work: str
    cases: list[Case]

    def count(self, status: str) -> int:
        return sum(case.task.status == status for case in self.cases)

    @property
    def not_ended(self) -> int:
        return sum(case.task.status not in wire.TERMINAL_STATUSES for case in self.cases)

    @property
    def seconds(self) -> float:
        return sum(case.seconds for case in self.cases)


def suites(tasks: Iterable[TaskRecord], artifacts: dict[str, list[str]]) -> list[Suite]:
    """The run's tasks (in place order) grouped by work item, each work item where it first appears."""
    grouped: dict[str, list[Case]] = {}
    for task in tasks:
        work = task.run_work if task.run_work is not None else (task.goal or "")
        grouped.setdefault(work, []).append(Case(task, artifacts.get(task.id, [])))
    return [Suite(work, cases) for work, cases in grouped.items()]


def _case_json(case: Case) -> shapes.ReportCase:
    task = case.task
    return {
        "task_id": task.id,
        "device_id": task.device_id or task.target_device,
        "status": task.status,
        "time_s": case.seconds,
        "failure_reason": task.failure_reason if task.status in wire.TERMINAL_STATUSES else None,
        "last_step": task.last_step,
        "result": task_result(task),
        "artifacts": case.artifacts,
        "rerun_of": task.rerun_of,
    }


def report_json(run: RunRecord, counts: RunCounts, run_suites: list[Suite]) -> shapes.RunReport:
    return {
        "run": run_state_view(run, counts),
        "suites": [{
            "work": suite.work,
            "tests": len(suite.cases),
            "failures": suite.count(wire.TaskStatus.FAILED.value),
            "skipped": suite.count(wire.TaskStatus.CANCELLED.value) + suite.not_ended,
            "time_s": suite.seconds,
            "cases": [_case_json(case) for case in suite.cases],
        } for suite in run_suites],
    }


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _case_xml(parent: ElementTree.Element, suite: Suite, case: Case) -> None:
    task = case.task
    element = ElementTree.SubElement(parent, "testcase", name=case.device, classname=clean_text(suite.work),
                                     time=_seconds(case.seconds))
    if task.status == wire.TaskStatus.FAILED:
        message, text = case.failure()
        failure = ElementTree.SubElement(element, "failure", message=clean_text(message),
                                         type=clean_text(task.failure_reason or "failed"))
        failure.text = clean_text(text)
    elif task.status == wire.TaskStatus.CANCELLED:
        skipped = ElementTree.SubElement(element, "skipped", message="cancelled")
        skipped.text = clean_text(case.last_step or "cancelled")
    elif task.status not in wire.TERMINAL_STATUSES:
        ElementTree.SubElement(element, "skipped", message=f"not ended: {task.status}")
    out = ElementTree.SubElement(element, "system-out")
    out.text = f"task {task.id}; artifacts: {', '.join(case.artifacts) if case.artifacts else 'none'}\n"


def report_junit(run: RunRecord, run_suites: list[Suite]) -> bytes:
    failures = sum(suite.count(wire.TaskStatus.FAILED.value) for suite in run_suites)
    run_name = clean_text(run.name or run.id)
    root = ElementTree.Element("testsuites", name=run_name,
                               tests=str(sum(len(suite.cases) for suite in run_suites)),
                               failures=str(failures), errors="0",
                               time=_seconds(sum(suite.seconds for suite in run_suites)))
    timestamp = iso_ms(run.created_at) or ""
    for index, suite in enumerate(run_suites):
        element = ElementTree.SubElement(
            root, "testsuite", name=clean_text(suite.work), id=str(index), package=run_name,
            tests=str(len(suite.cases)), failures=str(suite.count(wire.TaskStatus.FAILED.value)), errors="0",
            skipped=str(suite.count(wire.TaskStatus.CANCELLED.value) + suite.not_ended),
            time=_seconds(suite.seconds), timestamp=timestamp)
        properties = ElementTree.SubElement(element, "properties")
        for name, value in (("run_id", run.id), ("run_status", run.status), ("team", run.team)):
            ElementTree.SubElement(properties, "property", name=name, value=value)
        for case in suite.cases:
            _case_xml(element, suite, case)
    document: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return document
