"""``tether.Client``: the operator API (PROTOCOL.md, "Operator API") as plain method calls.

Every method returns the coordinator's JSON answer as a plain dict, exactly as the contract
shapes it, and raises ``TetherError`` for anything else. ``iter_*`` methods follow
``next_cursor`` through every page (a filtered page may hold fewer items than asked for and
still have a cursor, so stopping at a short page would be wrong). ``feed`` is the live event
stream. Plain ``httpx``, synchronous: a script, the ``tether`` command, or a notebook.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

import wire
from tether.errors import TetherError
from tether.feed import Feed
from tether.sessions import SessionMethods
from tether.waiting import describe, unplaceable_reason

DEFAULT_TIMEOUT_S = 10.0
Json = dict[str, Any]
# An ambiguous prefix names at most this many of its matches (and says there are more).
AMBIGUOUS_MATCHES_SHOWN = 10
# The largest page the tasks listing gives (coordinator/api/limits.py): a prefix's search reads
# as few pages as it can.
_PREFIX_PAGE_SIZE = 500
# The largest page of the devices listing: what a warning reads to name the pool's drivers.
_DRIVERS_PAGE_SIZE = 1000


class Client(SessionMethods):
    """``Client("http://coordinator:8000", token)``; use it as a context manager, or ``close()``.
    Live sessions (``start_session`` and the session routes) are ``tether.sessions``'.

    ``transport`` is httpx's: tests may hand an ``httpx.MockTransport`` or ``ASGITransport``.
    """

    def __init__(self, url: str, token: str, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None, feed_read_timeout_s: float = 45.0) -> None:
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            # httpx would put an illegal header value, token included, into its exception text.
            raise ValueError("the token must be printable ASCII without spaces")
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme not in ("http", "https"):
            # httpx would take "coordinator:8000" as a scheme of its own, or send nothing at all.
            raise ValueError(f"the coordinator URL needs its scheme: http://{url} or https://{url}"
                             if not scheme else f"the coordinator URL must be http:// or https://, not {scheme}://")
        self.url = url.rstrip("/")
        self._feed_read_timeout_s = feed_read_timeout_s
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "tether-client"},
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

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
        return self._call("PUT", f"/api/v1/teams/{_id(team, 'team')}", json=body)

    def get_task(self, task_id: str) -> Json:
        return self._call("GET", f"/api/v1/tasks/{_id(task_id, 'task id')}")

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
        matches = _matches(prefix, ids())
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
        return self._call("GET", f"/api/v1/tasks/{_id(task_id, 'task id')}/events")

    def cancel_task(self, task_id: str) -> Json:
        return self._call("POST", f"/api/v1/tasks/{_id(task_id, 'task id')}/cancel")

    # -- runs: many tasks as one (PROTOCOL.md, "Runs") -------------------------------------------

    def create_run(self, body: Mapping[str, Any]) -> Json:
        """A run, from the body of ``POST /api/v1/runs`` as given: ``{"name", "tasks": [task
        bodies]}`` or ``{"name", "matrix": {"work": [...], "devices": {"driver", "labels"}}}``,
        with ``priority``, ``team``, ``idempotency_key``. All its tasks are created, or none."""
        return self._call("POST", "/api/v1/runs", json=dict(body))

    def get_run(self, run_id: str) -> Json:
        """The run: ``status``, ``counts`` by task status, ``breakdown`` by device and work item."""
        return self._call("GET", f"/api/v1/runs/{_id(run_id, 'run id')}")

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
        return self._call("POST", f"/api/v1/runs/{_id(run_id, 'run id')}/cancel")

    def rerun_failed(self, run_id: str) -> Json:
        """A new task for each failed one, in its place: ``{"run_id", "created", "run"}``."""
        return self._call("POST", f"/api/v1/runs/{_id(run_id, 'run id')}/rerun-failed")

    def run_report(self, run_id: str) -> Json:
        """The run's report as JSON: ``{"run", "suites": [{"work", "cases": [...]}]}``."""
        return self._call("GET", f"/api/v1/runs/{_id(run_id, 'run id')}/report", params={"format": "json"})

    def run_report_junit(self, run_id: str) -> bytes:
        """The run's report as JUnit XML, as CI systems read it."""
        return self._send("GET", f"/api/v1/runs/{_id(run_id, 'run id')}/report", params={"format": "junit"}).content

    # -- artifacts (a run's screenshots, log, final screen) ----------------------------------

    def list_artifacts(self, task_id: str) -> Json:
        """Every attempt's artifacts, by attempt: ``{"artifacts": [{"name", "attempt",
        "step_index", "size", "sha256", "content_type", "created_at"}]}``."""
        return self._call("GET", f"/api/v1/tasks/{_id(task_id, 'task id')}/artifacts")

    def get_artifact(self, task_id: str, name: str, *, attempt: int | None = None) -> bytes:
        """One artifact's bytes: of ``attempt``, or of the latest attempt that has ``name``."""
        path = f"/api/v1/tasks/{_id(task_id, 'task id')}/artifacts/{_artifact_name(name)}"
        response = self._send("GET", path, params={"attempt": attempt})
        return response.content

    # -- devices -------------------------------------------------------------------------------

    def list_devices(self, *, host_id: str | None = None, driver: str | None = None, status: str | None = None,
                     limit: int | None = None, cursor: str | None = None) -> Json:
        return self._call("GET", "/api/v1/devices", params={
            "host_id": host_id, "driver": driver, "status": status, "limit": limit, "cursor": cursor})

    def iter_devices(self, *, host_id: str | None = None, driver: str | None = None,
                     status: str | None = None, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_devices, "devices", host_id=host_id, driver=driver, status=status,
                           limit=page_size)

    def get_device(self, device_id: str) -> Json:
        return self._call("GET", f"/api/v1/devices/{_id(device_id, 'device id')}")

    def device_history(self, device_id: str, *, limit: int | None = None) -> Json:
        """Who ran what on it, newest first: ``{"runs": [...]}``."""
        return self._call("GET", f"/api/v1/devices/{_id(device_id, 'device id')}/history",
                          params={"limit": limit})

    def disable_device(self, device_id: str, reason: str = "") -> Json:
        return self._call("POST", f"/api/v1/devices/{_id(device_id, 'device id')}/disable",
                          json={"reason": reason})

    def enable_device(self, device_id: str) -> Json:
        return self._call("POST", f"/api/v1/devices/{_id(device_id, 'device id')}/enable")

    def forget_device(self, device_id: str) -> Json:
        """Un-enroll a managed host's device (``DELETE``); ``device_busy`` while it holds a task."""
        return self._call("DELETE", f"/api/v1/devices/{_id(device_id, 'device id')}")

    # -- what the fleet can run ----------------------------------------------------------------

    def list_workflows(self) -> Json:
        """``{"workflows": [{"name", "hosts", "devices"}]}``: each workflow an online host lists,
        with those hosts' ids and how many pooled devices they have."""
        return self._call("GET", "/api/v1/workflows")

    # -- hosts ---------------------------------------------------------------------------------

    def list_hosts(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        return self._call("GET", "/api/v1/hosts", params={"limit": limit, "cursor": cursor})

    def iter_hosts(self, *, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_hosts, "hosts", limit=page_size)

    def get_host(self, host_id: str) -> Json:
        return self._call("GET", f"/api/v1/hosts/{_id(host_id, 'host id')}")

    def drain_host(self, host_id: str) -> Json:
        return self._call("POST", f"/api/v1/hosts/{_id(host_id, 'host id')}/drain")

    def undrain_host(self, host_id: str) -> Json:
        return self._call("POST", f"/api/v1/hosts/{_id(host_id, 'host id')}/undrain")

    def revoke_host(self, host_id: str) -> Json:
        return self._call("POST", f"/api/v1/hosts/{_id(host_id, 'host id')}/revoke")

    # -- enrollment tokens ---------------------------------------------------------------------

    def create_enrollment_token(self, *, ttl_s: int | None = None, max_uses: int | None = None,
                                labels: Mapping[str, str] | None = None) -> Json:
        """``{"id", "token", "expires_at", ...}``: the secret ``token`` is in this answer only."""
        body = {"ttl_s": ttl_s, "max_uses": max_uses, "labels": dict(labels) if labels is not None else None}
        return self._call("POST", "/api/v1/enrollment-tokens", json={k: v for k, v in body.items() if v is not None})

    def list_enrollment_tokens(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        """``{"enrollment_tokens": [...], "next_cursor": ...}``, never the secrets."""
        return self._call("GET", "/api/v1/enrollment-tokens", params={"limit": limit, "cursor": cursor})

    def iter_enrollment_tokens(self, *, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_enrollment_tokens, "enrollment_tokens", limit=page_size)

    def revoke_enrollment_token(self, token_id: str) -> Json:
        return self._call("DELETE", f"/api/v1/enrollment-tokens/{_id(token_id, 'token id')}")

    # -- operator tokens -----------------------------------------------------------------------

    def me(self) -> Json:
        """Who this client's token is: ``{"name", "scopes", "expires_at"}`` (any valid token)."""
        return self._call("GET", "/api/v1/me")

    def create_operator_token(self, name: str, scopes: Sequence[str], *, ttl_s: int | None = None) -> Json:
        """``{"id", "name", "scopes", "token", "expires_at"}`` (admin only): the secret ``token``
        is in this answer only."""
        body: Json = {"name": name, "scopes": list(scopes)}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return self._call("POST", "/api/v1/operator-tokens", json=body)

    def list_operator_tokens(self, *, limit: int | None = None, cursor: str | None = None) -> Json:
        """``{"operator_tokens": [...], "next_cursor": ...}`` (admin only), never the secrets."""
        return self._call("GET", "/api/v1/operator-tokens", params={"limit": limit, "cursor": cursor})

    def iter_operator_tokens(self, *, page_size: int | None = None) -> Iterator[Json]:
        return self._items(self.list_operator_tokens, "operator_tokens", limit=page_size)

    def revoke_operator_token(self, token_id: str) -> Json:
        """Revoke (admin only): the token is refused ``401`` on every process from the next request."""
        return self._call("DELETE", f"/api/v1/operator-tokens/{_id(token_id, 'token id')}")

    # -- webhooks ------------------------------------------------------------------------------

    def list_webhooks(self) -> Json:
        """``{"webhooks": [{"id", "url", "events", "team", ...}]}`` (admin only; never a secret)."""
        return self._call("GET", "/api/v1/webhooks")

    def create_webhook(self, url: str, events: Sequence[str], *, team: str | None = None) -> Json:
        """``{"id", "url", "events", "team", "secret"}`` (admin only): the signing ``secret`` is in
        this answer only."""
        body: Json = {"url": url, "events": list(events)}
        if team is not None:
            body["team"] = team
        return self._call("POST", "/api/v1/webhooks", json=body)

    def resolve_webhook_id(self, prefix: str) -> str:
        """The id of the one webhook whose id is ``prefix`` or starts with it, as
        ``resolve_task_id`` (the listing is short: every webhook in one page)."""
        ids = [str(w["id"]) for w in self.list_webhooks()["webhooks"]]
        if prefix in ids:
            return prefix
        matches = _matches(prefix, ids)
        if not matches:
            raise TetherError("not_found", f"no webhook {prefix!r}")
        if len(matches) > 1:
            raise TetherError.ambiguous("webhook", prefix, matches, more=len(matches) > AMBIGUOUS_MATCHES_SHOWN)
        return matches[0]

    def delete_webhook(self, webhook_id: str) -> Json:
        return self._call("DELETE", f"/api/v1/webhooks/{_id(webhook_id, 'webhook id')}")

    def webhook_deliveries(self, webhook_id: str, *, limit: int | None = None) -> Json:
        """``{"deliveries": [...]}``, newest first: each with ``attempts``, ``last_status``,
        ``next_attempt_at`` and ``state`` (pending, delivered, failed)."""
        params = {} if limit is None else {"limit": limit}
        return self._call("GET", f"/api/v1/webhooks/{_id(webhook_id, 'webhook id')}/deliveries", params=params)

    # -- the live feed -------------------------------------------------------------------------

    def feed(self, *, task_id: str | None = None, host_id: str | None = None, run_id: str | None = None,
             last_event_id: str | None = None) -> Feed:
        """The live feed, optionally only the events naming one task, host or run; it starts at
        "now" unless ``last_event_id`` resumes it. See ``tether.feed.Feed``."""
        params = {"task_id": task_id and _id(task_id, "task id"), "host_id": host_id and _id(host_id, "host id"),
                  "run_id": run_id and _id(run_id, "run id")}
        return Feed(self._http, "/api/v1/events", {k: v for k, v in params.items() if v},
                    last_event_id=last_event_id, read_timeout_s=self._feed_read_timeout_s)

    # -- plumbing ------------------------------------------------------------------------------

    def _send(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              json: Any = None, timeout: float | None = None) -> httpx.Response:
        """The answer of one call that succeeded (2xx or 3xx); ``TetherError`` otherwise.
        ``timeout`` (seconds) replaces the client's for a call that waits at the server."""
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            if timeout is None:
                response = self._http.request(method, path, params=query, json=json)
            else:
                response = self._http.request(method, path, params=query, json=json, timeout=timeout)
        except httpx.TransportError as exc:
            raise TetherError.unreachable(self.url, exc) from exc
        if response.status_code >= 400:
            raise TetherError.from_response(response)
        return response

    def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              json: Any = None, timeout: float | None = None) -> Json:
        response = self._send(method, path, params=params, json=json, timeout=timeout)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise TetherError("invalid_response", f"{method} {path} answered {response.status_code} without a "
                              "JSON object", status=response.status_code)
        return answer

    @staticmethod
    def _items(list_page: Callable[..., Json], key: str, **filters: Any) -> Iterator[Json]:
        cursor = None
        while True:
            page = list_page(**filters, cursor=cursor)
            yield from page[key]
            cursor = page.get("next_cursor")
            if cursor is None or cursor == "":
                return


def _matches(prefix: str, ids: Iterable[str]) -> list[str]:
    """The ids starting with ``prefix``, in the listing's order; once there are more than can be
    shown the search stops: it is ambiguous whatever follows."""
    found: list[str] = []
    for candidate in ids:
        if candidate.startswith(prefix):
            found.append(candidate)
            if len(found) > AMBIGUOUS_MATCHES_SHOWN:
                break
    return found


def _id(value: str, what: str) -> str:
    """A path segment: refused here when it is outside the contract's id grammar, so it can
    never turn into another path."""
    if not wire.is_valid_id(value):
        raise TetherError("invalid_request", f"not a valid {what}: {value!r}")
    return quote(value, safe="")


_ARTIFACT_NAME = re.compile(wire.ARTIFACT_NAME_PATTERN)


def _artifact_name(name: str) -> str:
    """An artifact's name as a path segment: refused here unless it is in the contract's grammar
    (which needs no quoting, and has no ``/`` to turn it into another path)."""
    if not isinstance(name, str) or not _ARTIFACT_NAME.fullmatch(name) or name in (".", ".."):
        raise TetherError("invalid_request", f"not a valid artifact name: {name!r}")
    return name
