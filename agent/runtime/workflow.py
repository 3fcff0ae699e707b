"""Named workflows: JSON files of fixed steps, run with ``${param}`` substitution.

A file in ``HOST_AGENT_WORKFLOWS_DIR``::

    {"name": "note-smoke", "steps": [{"action": "launch", "app": "notes"},
                                     {"action": "type", "text": "${text}"}, ...]}

Files are read at run time, so a workflow dropped into the folder is available to the next
assignment without a restart. Every step is substituted and validated before the first one
runs: a workflow with a missing parameter or a bad step does nothing to the device.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wire import ResultStatus

from .actions import DEVICE_ACTIONS, Action, clip, parse_action, perform, summarize
from .base import DEVICE_LOST, Outcome, Progress, RunControl
from .driver import Driver
from .errors import ActionError, AssertionFailed, DeviceLost, ElementNotFound

logger = logging.getLogger(__name__)

_PARAM = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: tuple[Mapping[str, Any], ...]
    path: Path


class MissingParam(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def validate_workflows_dir(path: Path | str) -> Path:
    """For start-up: refuse a ``HOST_AGENT_WORKFLOWS_DIR`` that is not a folder."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"workflows directory {str(folder)!r} does not exist or is not a directory")
    return folder


def load_workflow(path: Path) -> Workflow:
    """``ValueError`` when the file is not a workflow."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path.name}: not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: a workflow is a JSON object")
    name, steps = data.get("name"), data.get("steps")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{path.name}: 'name' must be a non-empty string")
    if not isinstance(steps, list) or not all(isinstance(step, dict) for step in steps):
        raise ValueError(f"{path.name}: 'steps' must be a list of objects")
    return Workflow(name=name, steps=tuple(steps), path=path)


def substitute(value: Any, params: Mapping[str, Any]) -> Any:
    """Replace ``${name}`` in every string inside ``value``. A string that is exactly one
    ``${name}`` takes the parameter's own value, so ``"x": "${x}"`` can be a number."""
    if isinstance(value, str):
        whole = _PARAM.fullmatch(value)
        if whole:
            return _param(params, whole[1])
        return _PARAM.sub(lambda match: str(_param(params, match[1])), value)
    if isinstance(value, list):
        return [substitute(item, params) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, params) for key, item in value.items()}
    return value


def _param(params: Mapping[str, Any], name: str) -> Any:
    if name not in params:
        raise MissingParam(name)
    return params[name]


class WorkflowRunner:
    def __init__(self, workflows_dir: Path | str) -> None:
        self.workflows_dir = Path(workflows_dir)
        # The names last read, and the folder's listing (file, size, mtime) they were read from:
        # the heartbeat asks every interval, and the files are read again only when they changed.
        self._names: tuple[str, ...] = ()
        self._listing: tuple[tuple[str, int, int], ...] | None = None

    def names(self) -> list[str]:
        """The names of the valid workflows now in the folder, sorted: what this host can run
        (the heartbeat's ``capabilities.workflows``)."""
        try:
            paths = sorted(self.workflows_dir.glob("*.json")) if self.workflows_dir.is_dir() else []
            listing = tuple((p.name, st.st_size, st.st_mtime_ns) for p in paths for st in [p.stat()])
        except OSError:
            listing = None  # a file went away while listing: read the folder the slow way
        if listing is None or listing != self._listing:
            self._names = tuple(sorted(self.workflows()))
            self._listing = listing
        return list(self._names)

    def workflows(self) -> dict[str, Workflow]:
        """Every valid workflow by name, read now. Bad files are logged and skipped, so one typo
        does not take the other workflows down; the first file (by file name) wins a name."""
        found: dict[str, Workflow] = {}
        if not self.workflows_dir.is_dir():
            return found
        for path in sorted(self.workflows_dir.glob("*.json")):
            try:
                workflow = load_workflow(path)
            except ValueError as exc:
                logger.warning("skipping workflow file %s", exc)
                continue
            if workflow.name in found:
                logger.warning("workflow %r in %s is already defined; ignoring it", workflow.name, path.name)
                continue
            found[workflow.name] = workflow
        return found

    def find(self, name: str) -> Workflow | None:
        return self.workflows().get(name)

    async def run(self, name: str, params: Mapping[str, Any] | None, driver: Driver, control: RunControl) -> Outcome:
        """Never raises for device trouble: every ending is an ``Outcome``."""
        workflow = self.find(name)
        if workflow is None:
            return Outcome(ResultStatus.FAILED, "workflow_not_found", {"workflow": name})
        meta: dict[str, Any] = {"workflow": name}
        try:
            actions = self._prepare(workflow, params or {})
        except MissingParam as exc:
            return Outcome(ResultStatus.FAILED, "missing_param", {**meta, "param": exc.name, "steps": 0})
        except ActionError as exc:
            return Outcome(ResultStatus.FAILED, "workflow_invalid", {**meta, "error": clip(str(exc)), "steps": 0})

        for index, action in enumerate(actions):
            if control.stopped:
                return Outcome(ResultStatus.CANCELLED, control.stop_reason, {**meta, "steps": index})
            summary = summarize(action)
            control.publish(Progress(index, "running", summary))
            reason: str | None = None
            error = ""
            retryable = False
            try:
                stopped = await perform(driver, action, control)
            except AssertionFailed as exc:
                reason, error = "assertion_failed", str(exc)
            except ElementNotFound as exc:
                reason, error = "element_not_found", str(exc)
            except Exception as exc:  # noqa: BLE001 - whatever else the driver raises fails the step
                if control.stopped:
                    return Outcome(ResultStatus.CANCELLED, control.stop_reason, {**meta, "steps": index})
                logger.warning("workflow %s step %d: device failed: %s", name, index, exc)
                reason, error = "driver_error", str(exc) or type(exc).__name__
                if isinstance(exc, DeviceLost):  # the device went away: not the workflow's fault
                    reason, retryable = DEVICE_LOST, True
            if reason is not None:
                control.publish(Progress(index, "failed", summary))
                if not retryable:  # a lost device has no screen to take
                    await control.after_step(index, driver)
                failure = {**meta, "steps": index, "failed_step": index, "error": clip(error)}
                return Outcome(ResultStatus.FAILED, reason, failure, retryable=retryable)
            if stopped:
                return Outcome(ResultStatus.CANCELLED, control.stop_reason, {**meta, "steps": index})
            control.publish(Progress(index, "succeeded", summary))
            await control.after_step(index, driver)
        return Outcome(ResultStatus.SUCCEEDED, None, {**meta, "steps": len(actions)})

    @staticmethod
    def _prepare(workflow: Workflow, params: Mapping[str, Any]) -> list[Action]:
        actions = []
        for index, step in enumerate(workflow.steps):
            try:
                actions.append(parse_action(substitute(step, params), allowed=DEVICE_ACTIONS))
            except ActionError as exc:
                raise ActionError(f"step {index}: {exc}") from None
        return actions
