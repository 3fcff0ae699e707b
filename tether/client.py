"""``tether.Client``: the operator API (PROTOCOL.md, "Operator API") as plain method calls.

Every method returns the coordinator's JSON answer as a plain dict, exactly as the contract
shapes it, and raises ``TetherError`` for anything else. ``iter_*`` methods follow
``next_cursor`` through every page (a filtered page may hold fewer items than asked for and
still have a cursor, so stopping at a short page would be wrong). ``feed`` is the live event
stream. Plain ``httpx``, synchronous: a script, the ``tether`` command, or a notebook.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import wire
from tether.admin import AdminMethods
from tether.calls import AMBIGUOUS_MATCHES_SHOWN, segment, starting_with
from tether.errors import TetherError
from tether.feed import Feed
from tether.sessions import SessionMethods
from tether.waiting import describe, unplaceable_reason

Json = dict[str, Any]
# The largest page the tasks listing gives (coordinator/api/limits.py): a prefix's search reads
# as few pages as it can.
_PREFIX_PAGE_SIZE = 500
# The largest page of the devices listing: what a warning reads to name the pool's drivers.
_DRIVERS_PAGE_SIZE = 1000


class Client(SessionMethods, AdminMethods):
    """``Client("http://coordinator:8000", token)``; use it as a context manager, or ``close()``.
    Live sessions (``start_session`` and the session routes) are ``tether.sessions``'; devices,
    hosts, tokens and webhooks ``tether.admin``'; the connection ``tether.calls``'.

    ``transport`` is httpx's: tests may hand an ``httpx.MockTransport`` or ``ASGITransport``.
    """

    # -- tasks ---------------------------------------------------------------------------------

    def create_task(self, *, goal: str | None = None, workflow: str | None = None,
                    params: Mapping[str, Any] | None = None, device_id: str | None = None,
                    selector: Mapping[str, Any] | None = None, max_attempts: int | None = None,
                    max_steps: int | None = None, queue_timeout_s: int | None = None,
                    idempotency_key: str | None = None, priority: int | None = None,
                    team: str | None = None) -> Json:
        """A goal task (``goal=``) or a workflow task (``workflow=`` name, ``params=``), for one
        device (``device_id=``) or any matching ``selector={"driver": ..., "labels": {...}}``."""
        if (goal is None) == (workflow is None):
            raise ValueError("give exactly one of goal and workflow")
        body: Json = {"kind": "goal", "goal": goal} if goal is not None else {
            "kind": "workflow", "workflow": {"name": workflow, "params": dict(params or {})}}
        optional = {"device_id": device_id, "selector": dict(selector) if selector is not None else None,
                    "max_attempts": max_attempts, "max_steps": max_steps, "queue_timeout_s": queue_timeout_s,
                    "idempotency_key": idempotency_key, "priority": priority, "team": team}
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._call("POST", "/api/v1/tasks", json=body)

    def wait_warning(self, task: Json) -> str | None:
        """Why ``task`` (as ``create_task`` or ``get_task`` answer it) may wait until its queue
        deadline: a sentence naming its ``waiting_reason`` and what the fleet has instead, when
        that reason is ``no_matching_device`` (a misspelled driver, label or device) or
        ``no_capable_host`` (a misspelled workflow); else None (placed, or waiting for a busy
        device). What the fleet has is read with this token; one that may not read it gets the
        sentence without it."""
        reason = unplaceable_reason(task)
        if reason is None:
            return None
        workflows: list[str] | None = None
        drivers: list[str] | None = None
        try:
            if reason == wire.WaitingReason.NO_CAPABLE_HOST.value:
                workflows = [str(w["name"]) for w in self.list_workflows()["workflows"]]
            else:  # the drivers of one page of the pool (drivers are few, devices may be many)
                devices = self.list_devices(limit=_DRIVERS_PAGE_SIZE)["devices"]
                drivers = sorted({str(d["driver"]) for d in devices})
        except TetherError:
            pass  # the task is created: the warning goes out without the inventory
        return describe(task, workflows=workflows, drivers=drivers)

    # -- teams ---------------------------------------------------------------------------------

    def list_teams(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        """One page of teams, by name, with their share of the fleet: ``{"teams": [{"team",
        "weight", "max_devices", "running", "queued", "device_seconds_1h"}], "next_cursor": ...}``."""
        return self._call("GET", "/api/v1/teams", params={"limit": limit, "cursor": cursor})

    def iter_teams(self, *, page_size: int | None = None) -> Iterator[Json]:
        """Every team (work kept, a setting or a token), page after page."""
        return self._items(self.list_teams, "teams", limit=page_size)

    def set_team(self, team: str, *, weight: int | None = None, max_devices: int | None = None,
                 no_max: bool = False) -> Json:
        """Set a team's weight and/or cap (``no_max=True`` lifts the cap); admin only."""
        body: Json = {} if weight is None else {"weight": weight}
        if no_max:
            body["max_devices"] = None
        elif max_devices is not None:
            body["max_devices"] = max_devices
        return self._call("PUT", f"/api/v1/teams/{segment(team, 'team')}", json=body)

    def get_task(self, task_id: str) -> Json:
        return self._call("GET", f"/api/v1/tasks/{segment(task_id, 'task id')}")

    def resolve_task_id(self, prefix: str) -> str:
        """The id of the one task whose id is ``prefix`` or starts with it, as git takes a unique
        prefix of a commit (the demo prints ``t_1caa8b9e``). An exact id wins without a listing;
        else the listing is read (newest first) for ids starting with ``prefix``. None:
        ``not_found``; several: ``ambiguous_id``, naming them in the message and in
        ``details["matches"]`` (at most ``AMBIGUOUS_MATCHES_SHOWN`` of them: a short prefix stops
        the listing there rather than reading every task). A token that may not read tasks gets
        ``prefix`` back as it is, to be used as a whole id."""
        return self._resolve("task", prefix, lambda: self.get_task(prefix)["task_id"],
                             lambda: (str(t["task_id"]) for t in self.iter_tasks(page_size=_PREFIX_PAGE_SIZE)))

    def resolve_run_id(self, prefix: str) -> str:
        """The id of the one run whose id is ``prefix`` or starts with it, as ``resolve_task_id``."""
        return self._resolve("run", prefix, lambda: self.get_run(prefix)["run_id"],
                             lambda: (str(r["run_id"]) for r in self.iter_runs(page_size=_PREFIX_PAGE_SIZE)))

    @staticmethod
    def _resolve(kind: str, prefix: str, exact: Callable[[], Any], ids: Callable[[], Iterable[str]]) -> str:
        try:
            return str(exact())
        except TetherError as exc:
            if exc.code == "insufficient_scope":
                return prefix  # a submit-only token reads no task: it may still cancel its own by id
            if exc.code != "not_found":
                raise
            not_found = exc
        matches = starting_with(prefix, ids())
        if not matches:
            raise not_found
        if len(matches) > 1:
            raise TetherError.ambiguous(kind, prefix, matches, more=len(matches) > AMBIGUOUS_MATCHES_SHOWN)
        return matches[0]

    def list_tasks(self, *, status: str | None = None, host_id: str | None = None,
                   device_id: str | None = None, limit: int | None = None, cursor: str | None = None,
                   run_id: str | None = None, team: str | None = None) -> Json:
        """One page, newest first: ``{"tasks": [...], "next_cursor": ...}``, filtered as the API
        filters (status, host, device, team, run)."""
        return self._call("GET", "/api/v1/tasks", params={
            "status": status, "host_id": host_id, "device_id": device_id, "limit": limit, "cursor": cursor,
            "run_id": run_id, "team": team})

    def iter_tasks(self, *, status: str | None = None, host_id: str | None = None,
                   device_id: str | None = None, page_size: int | None = None,
                   run_id: str | None = None, team: str | None = None) -> Iterator[Json]:
        return self._items(self.list_tasks, "tasks", status=status, host_id=host_id, device_id=device_id,
                           limit=page_size, run_id=run_id, team=team)

    def team_exists(self, team: str) -> bool:
        """Whether the coordinator knows ``team`` (work in the retention window, a setting or a
        token): a create naming a new team makes it, so ``submit`` warns before a typo does."""
        return any(t.get("team") == team for t in self.iter_teams())

    def task_events(self, task_id: str) -> Json:
        """The task's history, oldest first: ``{"events": [...]}``."""
        return self._call("GET", f"/api/v1/tasks/{segment(task_id, 'task id')}/events")

    def cancel_task(self, task_id: str) -> Json:
        return self._call("POST", f"/api/v1/tasks/{segment(task_id, 'task id')}/cancel")

    # -- runs: many tasks as one (PROTOCOL.md, "Runs") -------------------------------------------

    def create_run(self, body: Mapping[str, Any]) -> Json:
        """A run, from the body of ``POST /api/v1/runs`` as given: ``{"name", "tasks": [task
        bodies]}`` or ``{"name", "matrix": {"work": [...], "devices": {"driver", "labels"}}}``,
        with ``priority``, ``team``, ``idempotency_key``. All its tasks are created, or none."""
        return self._call("POST", "/api/v1/runs", json=dict(body))

    def get_run(self, run_id: str) -> Json:
        """The run: ``status``, ``counts`` by task status, ``breakdown`` by device and work item."""
        return self._call("GET", f"/api/v1/runs/{segment(run_id, 'run id')}")

    def list_runs(self, *, status: str | None = None, team: str | None = None, limit: int | None = None,
                  cursor: str | None = None) -> Json:
        """One page, newest first: ``{"runs": [...], "next_cursor": ...}``."""
        return self._call("GET", "/api/v1/runs", params={"status": status, "team": team, "limit": limit,
                                                          "cursor": cursor})

    def iter_runs(self, *, status: str | None = None, team: str | None = None,
                  page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_runs, "runs", status=status, team=team, limit=page_size)

    def cancel_run(self, run_id: str) -> Json:
        """Cancel every task of the run not yet ended; the run after it."""
        return self._call("POST", f"/api/v1/runs/{segment(run_id, 'run id')}/cancel")

    def rerun_failed(self, run_id: str) -> Json:
        """A new task for each failed one, in its place: ``{"run_id", "created", "run"}``."""
        return self._call("POST", f"/api/v1/runs/{segment(run_id, 'run id')}/rerun-failed")

    def run_report(self, run_id: str) -> Json:
        """The run's report as JSON: ``{"run", "suites": [{"work", "cases": [...]}]}``."""
        return self._call("GET", f"/api/v1/runs/{segment(run_id, 'run id')}/report", params={"format": "json"})

    def run_report_junit(self, run_id: str) -> bytes:
        """The run's report as JUnit XML, as CI systems read it."""
        return self._send("GET", f"/api/v1/runs/{segment(run_id, 'run id')}/report", params={"format": "junit"}).content

    # -- artifacts (a run's screenshots, log, final screen) ----------------------------------

    def list_artifacts(self, task_id: str) -> Json:
        """Every attempt's artifacts, by attempt: ``{"artifacts": [{"name", "attempt",
        "step_index", "size", "sha256", "content_type", "created_at"}]}``."""
        return self._call("GET", f"/api/v1/tasks/{segment(task_id, 'task id')}/artifacts")

    def get_artifact(self, task_id: str, name: str, *, attempt: int | None = None) -> bytes:
        """One artifact's bytes: of ``attempt``, or of the latest attempt that has ``name``."""
        path = f"/api/v1/tasks/{segment(task_id, 'task id')}/artifacts/{_artifact_name(name)}"
        response = self._send("GET", path, params={"attempt": attempt})
        return response.content

    # -- the live feed -------------------------------------------------------------------------

    def feed(self, *, task_id: str | None = None, host_id: str | None = None, run_id: str | None = None,
             last_event_id: str | None = None) -> Feed:
        """The live feed, optionally only the events naming one task, host or run; it starts at
        "now" unless ``last_event_id`` resumes it. See ``tether.feed.Feed``."""
        params = {"task_id": task_id and segment(task_id, "task id"),
                  "host_id": host_id and segment(host_id, "host id"), "run_id": run_id and segment(run_id, "run id")}
        return Feed(self._http, "/api/v1/events", {k: v for k, v in params.items() if v},
                    last_event_id=last_event_id, read_timeout_s=self._feed_read_timeout_s)


_ARTIFACT_NAME = re.compile(wire.ARTIFACT_NAME_PATTERN)


def _artifact_name(name: str) -> str:
    """An artifact's name as a path segment: refused here unless it is in the contract's grammar
    (which needs no quoting, and has no ``/`` to turn it into another path)."""
    if not isinstance(name, str) or not _ARTIFACT_NAME.fullmatch(name) or name in (".", ".."):
        raise TetherError("invalid_request", f"not a valid artifact name: {name!r}")
    return name
