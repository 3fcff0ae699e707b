"""What each ``tether`` command does: call the client, then print the answer for people (the
``render`` module) or, with ``--json``, the API's JSON. Each returns the exit code."""

from __future__ import annotations

import json
import shutil
import sys
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import wire
from tether import render, render_fleet
from tether.client import Client
from tether.errors import TetherError
from tether.watch import follow, succeeded

Json = dict[str, Any]
Command = Callable[[Client, Namespace, "Output"], int]


class UsageError(Exception):
    """A command's words do not go together (``--wait`` without ``submit``): the operator's to
    fix, so the command's usage line, one line of why, and exit 2 (``cli.main``), as argparse's
    own usage errors. ``usage=False`` for a file the command was given that is no good (a run
    file that is not YAML): the one line of why (where in it, what) alone, exit 2."""

    def __init__(self, message: str, *, usage: bool = True) -> None:
        super().__init__(message)
        self.usage = usage


class CannotWrite(Exception):
    """A file the command was told to write could not be written (no such folder, a folder, no
    permission, a full disk): the operator's to fix, so one line and exit 1 (``cli.main``)."""


def save(path: str, data: bytes) -> Path:
    """Write ``data`` to the file at ``path``, the one way every command writes an output file."""
    target = Path(path)
    try:
        target.write_bytes(data)
    except OSError as exc:
        raise CannotWrite(f"cannot write {path}: {exc.strerror or exc}") from None
    return target


class Output:
    """Where results go: text for people, or the API's JSON for scripts (``--json``)."""

    def __init__(self, as_json: bool, stream: TextIO | None = None) -> None:
        self.as_json = as_json
        self._stream = stream

    def line(self, text: str) -> None:
        stream = self._stream or sys.stdout
        stream.write(text + "\n")
        stream.flush()  # a watch is read live, through pipes too

    def warn(self, text: str) -> None:
        """A warning for people, on stderr: it never mixes with the JSON or ids a script reads."""
        sys.stderr.write(f"warning: {text}\n")
        sys.stderr.flush()

    def show(self, document: Json, text: Callable[[Json], str]) -> int:
        self.line(json.dumps(document, indent=2) if self.as_json else text(document))
        return 0


# -- tasks -----------------------------------------------------------------------------------


def submit(client: Client, args: Namespace, out: Output) -> int:
    new_team = args.team is not None and not _team_known(client, args.team)
    selector = {"driver": args.driver, "labels": dict(args.label or [])} if args.driver else None
    task = client.create_task(goal=args.goal, workflow=args.workflow, params=dict(args.param or []),
                              device_id=args.device, selector=selector, max_attempts=args.max_attempts,
                              queue_timeout_s=args.queue_timeout, priority=args.priority, team=args.team)
    if new_team:  # a typo in --team would otherwise make a team without a word
        out.warn(f"team {args.team!r} is new: no task, token or setting named it before "
                 "(`tether teams` lists the teams)")
    warning = client.wait_warning(task)
    if warning is not None:  # a typo would otherwise wait a day (the queue timeout) without a word
        out.warn(warning)
    if not args.wait:
        return out.show(task, lambda t: t["task_id"])
    if not out.as_json:
        out.line(task["task_id"])  # the id first, as without --wait; the watch's JSON lines carry it
    return _watch(client, task["task_id"], out)


def _team_known(client: Client, team: str) -> bool:
    try:
        return client.team_exists(team)
    except TetherError as exc:
        if exc.code == "insufficient_scope":
            return True  # a token that may not read teams cannot tell: no warning
        raise


def tasks(client: Client, args: Namespace, out: Output) -> int:
    run_id = client.resolve_run_id(args.run_id) if args.run_id else None
    if args.priority_min is None:
        page = _collect(lambda limit, cursor: client.list_tasks(status=args.status, host_id=args.host,
                                                                device_id=args.device, team=args.team, run_id=run_id,
                                                                limit=limit, cursor=cursor),
                        "tasks", args.limit)
    else:  # the API has no priority filter: the pages are read until enough tasks pass
        chosen: list[Json] = []
        for item in client.iter_tasks(status=args.status, host_id=args.host, device_id=args.device, team=args.team,
                                      run_id=run_id, page_size=min(500, max(args.limit, 50))):
            if (item.get("priority") or 0) >= args.priority_min:
                chosen.append(item)
                if len(chosen) >= args.limit:
                    break
        page = {"tasks": chosen, "next_cursor": None}
    # At least TASKS_TABLE_WIDTH columns; a wider terminal shows more of the work and the device.
    width = max(render.TASKS_TABLE_WIDTH, shutil.get_terminal_size((render.TASKS_TABLE_WIDTH, 24)).columns)
    return out.show(page, lambda p: render.tasks_table(p["tasks"], width))


def task(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.get_task(client.resolve_task_id(args.id)), render.task_fields)


def events(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.task_events(client.resolve_task_id(args.id)), lambda e: render.events_table(e["events"]))


def watch(client: Client, args: Namespace, out: Output) -> int:
    return _watch(client, client.resolve_task_id(args.id), out)


def _watch(client: Client, task_id: str, out: Output) -> int:
    final = follow(client, task_id, out.line, as_json=out.as_json)
    return 0 if succeeded(final) else 1


def cancel(client: Client, args: Namespace, out: Output) -> int:
    def text(t: Json) -> str:
        if t["status"] == "running" and t.get("cancel_requested"):
            return f"task {t['task_id']}: cancel requested (it is running; it stops at its next step)"
        return f"task {t['task_id']}: {t['status']}"

    return out.show(client.cancel_task(client.resolve_task_id(args.id)), text)


# -- hosts -----------------------------------------------------------------------------------


def hosts(client: Client, args: Namespace, out: Output) -> int:
    page = _collect(lambda limit, cursor: client.list_hosts(limit=limit, cursor=cursor), "hosts")
    labels = {} if out.as_json else _labels_of_devices(client)  # the JSON is the API's own
    return out.show(page, lambda p: render_fleet.hosts_table(p["hosts"], labels))


def _labels_of_devices(client: Client) -> dict[str, Json]:
    """Host id -> the labels every one of its devices carries: what an agent's HOST_AGENT_LABELS
    put on each device it reports, shown as the host's."""
    common: dict[str, Json] = {}
    for device in client.iter_devices():
        labels = device.get("labels") or {}
        host_id = str(device.get("host_id"))
        if host_id not in common:
            common[host_id] = dict(labels)
        else:
            common[host_id] = {k: v for k, v in common[host_id].items() if labels.get(k) == v}
    return common


def host(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.get_host(args.id), render_fleet.host_fields)


def drain(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.drain_host(args.id), render_fleet.host_state)


def undrain(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.undrain_host(args.id), render_fleet.host_state)


def revoke(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.revoke_host(args.id), render_fleet.host_state)


# -- devices ---------------------------------------------------------------------------------


def devices(client: Client, args: Namespace, out: Output) -> int:
    def of_host(host_id: str | None) -> Json:
        return _collect(lambda limit, cursor: client.list_devices(host_id=host_id, driver=args.driver,
                                                                  status=args.status, limit=limit, cursor=cursor),
                        "devices")

    pages = [of_host(host_id) for host_id in (_host_ids(client, args.host) if args.host else [None])]
    page = pages[0] if len(pages) == 1 else {"devices": [d for p in pages for d in p["devices"]], "next_cursor": None}
    return out.show(page, lambda p: render_fleet.devices_table(p["devices"]))


def _host_ids(client: Client, host: str) -> list[str]:
    """``--host``: a host id, or else the hostname of one or more hosts (their ids). A name that
    is neither is passed on as an id: the coordinator answers no devices for it."""
    if wire.is_valid_id(host):
        try:
            return [client.get_host(host)["host_id"]]
        except TetherError as exc:
            if exc.code != "not_found":
                raise
    return [h["host_id"] for h in client.iter_hosts() if h.get("hostname") == host] or [host]


# -- what the fleet can run ------------------------------------------------------------------


def workflows(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.list_workflows(), lambda w: render_fleet.workflows_table(w["workflows"]))


def history(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.device_history(args.id, limit=args.limit), lambda h: render_fleet.runs_table(h["runs"]))


def disable(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.disable_device(args.id, args.reason), render_fleet.device_state)


def enable(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.enable_device(args.id), render_fleet.device_state)


def forget(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.forget_device(args.id), lambda d: f"device {d.get('device_id', args.id)}: forgotten")


# -- enrollment tokens -----------------------------------------------------------------------


def tokens(client: Client, args: Namespace, out: Output) -> int:
    page = _collect(lambda limit, cursor: client.list_enrollment_tokens(limit=limit, cursor=cursor),
                    "enrollment_tokens")
    return out.show(page, lambda p: render_fleet.tokens_table(p["enrollment_tokens"]))


def tokens_create(client: Client, args: Namespace, out: Output) -> int:
    token = client.create_enrollment_token(ttl_s=args.ttl, max_uses=args.uses,
                                           labels=dict(args.label) if args.label else None)
    return out.show(token, render_fleet.created_token)


def tokens_revoke(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.revoke_enrollment_token(args.id),
                    lambda t: f"token {t['id']}: {render_fleet.token_state(t)}")


# -- operator tokens, and who the caller is ----------------------------------------------------


def me(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.me(), render_fleet.me_fields)


def operator_tokens(client: Client, args: Namespace, out: Output) -> int:
    page = _collect(lambda limit, cursor: client.list_operator_tokens(limit=limit, cursor=cursor),
                    "operator_tokens")
    return out.show(page, lambda p: render_fleet.operator_tokens_table(p["operator_tokens"]))


def operator_tokens_create(client: Client, args: Namespace, out: Output) -> int:
    token = client.create_operator_token(args.name, list(dict.fromkeys(args.scope)), ttl_s=args.ttl)
    return out.show(token, render_fleet.created_operator_token)


def operator_tokens_revoke(client: Client, args: Namespace, out: Output) -> int:
    return out.show(client.revoke_operator_token(args.id),
                    lambda t: f"operator token {t['id']} ({t.get('name')}): {render_fleet.operator_token_state(t)}")


# -- paging ----------------------------------------------------------------------------------


def _collect(fetch: Callable[[int | None, str | None], Json], key: str, limit: int | None = None) -> Json:
    """Pages followed until ``limit`` items (or the end), in the API's own shape: ``{key: [...],
    "next_cursor": ...}``, the cursor being where a further call would go on (null at the end).
    Each page asks for only what is still missing, so that cursor is exact."""
    items: list[Json] = []
    cursor: str | None = None
    while True:
        page = fetch(None if limit is None else limit - len(items), cursor)
        items += page[key]
        next_cursor = page.get("next_cursor")
        cursor = None if next_cursor in (None, "") else str(next_cursor)
        if cursor is None or (limit is not None and len(items) >= limit):
            return {key: items, "next_cursor": cursor}
