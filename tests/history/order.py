"""(f) ``order_inverted``: placement kept PROTOCOL's order ("Sharing the fleet"), as far as a
history shows it.

The coordinator places a task inside one script, so no answer to an agent says when: a claim comes
when its host polls, and claims race legitimately. The task's own history does say it
(``GET /api/v1/tasks/{id}/events``: each event's ``at`` is the placing script's clock, one clock
for every process, and its ``status`` the task's status after it). From the latest answered read
of each task's history the checker knows when the task waited in the queue (from an event leaving
it ``queued`` to the next that does not) and when it was placed (``assigned``). Two tasks are
compared only when their creates asked for the same placement (the same selector, device, kind and
workflow), so any device one of them was given, the other could have run. Then, for each
placement of task B at time t, every such task A waiting strictly before and strictly after t
(ties, one script's millisecond, are undecided) must not rank before B:

- a higher priority ranks before, when A's team has no quota (a team named with ``max_devices``
  in an answered ``PUT /api/v1/teams/{team}`` of the history is taken as capped throughout: quota
  aside is the contract's word);
- within one team and one priority, the older create ranks before (FIFO; older: its ``created``
  event's ``at`` strictly earlier, so its sequence number is lower).

Fair share between teams of one priority needs each team's running count at t, which no answer
carries; the model-based test and the fair-share property test prove that rule.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.history.records import Op

DEFAULT_TEAM = "default"


@dataclass
class _Task:
    task_id: str
    create: int  # the index of its acknowledged create
    team: str
    priority: int
    placement: str  # what it asked for: tasks compared only within one
    created_at: float | None = None
    waits: list[tuple[float, float]] | None = None  # intervals queued
    placed: list[float] | None = None  # when each assignment was made


def _ms(at: Any) -> float | None:
    if not isinstance(at, str):
        return None
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000


def _capped_teams(ops: Sequence[Op]) -> set[str]:
    capped = set()
    for op in ops:
        parts = op.path.strip("/").split("/")
        if (op.method == "PUT" and op.ok and len(parts) == 4 and parts[:3] == ["api", "v1", "teams"]
                and isinstance(op.request, dict) and op.request.get("max_devices") is not None):
            capped.add(parts[3])
    return capped


def _tasks(ops: Sequence[Op]) -> dict[str, _Task]:
    tasks = {}
    for op in ops:
        if op.method == "POST" and op.path.rstrip("/") == "/api/v1/tasks" and op.ok and isinstance(op.body, dict):
            body = op.request if isinstance(op.request, dict) else {}
            placement = json.dumps([body.get("selector"), body.get("device_id"), body.get("kind"),
                                    (body.get("workflow") or {}).get("name")], sort_keys=True)
            task_id = op.body.get("task_id")
            if isinstance(task_id, str) and task_id not in tasks:
                tasks[task_id] = _Task(task_id, op.index, body.get("team") or DEFAULT_TEAM,
                                       int(body.get("priority") or 0), placement)
    return tasks


def _read_histories(ops: Sequence[Op], tasks: dict[str, _Task]) -> None:
    latest: dict[str, Op] = {}
    for op in ops:
        parts = op.path.strip("/").split("/")
        if (op.method == "GET" and op.status == 200 and len(parts) == 5 and parts[:3] == ["api", "v1", "tasks"]
                and parts[4] == "events" and parts[3] in tasks):
            latest[parts[3]] = op  # ops are in invocation order: the last one read the most
    for task_id, op in latest.items():
        task = tasks[task_id]
        task.waits, task.placed = [], []
        since = None
        for event in _field_list(op.body, "events"):
            at = _ms(event.get("at"))
            if at is None:
                continue
            if event.get("type") == "created":
                task.created_at = at
            if event.get("type") == "assigned":
                task.placed.append(at)
            if event.get("status") == "queued" and since is None:
                since = at
            elif event.get("status") != "queued" and since is not None:
                task.waits.append((since, at))
                since = None
        if since is not None:
            task.waits.append((since, float("inf")))


def _field_list(body: Any, name: str) -> list[dict[str, Any]]:
    value = body.get(name) if isinstance(body, dict) else None
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _ranks_before(a: _Task, b: _Task, capped: set[str]) -> str | None:
    """Why ``a``, waiting, should have been placed before ``b``; None when it need not."""
    if a.priority > b.priority and (a.team == b.team or a.team not in capped):
        return f"priority {a.priority} waited while priority {b.priority} was placed"
    if (a.team == b.team and a.priority == b.priority and a.created_at is not None and b.created_at is not None
            and a.created_at < b.created_at):
        return f"the older task of team {a.team} waited while a newer one was placed (FIFO)"
    return None


def check_order(ops: Sequence[Op]) -> tuple[list[tuple[str, tuple[int, ...]]], dict[str, int]]:
    """The order's violations (message, the creates' indexes), and what was checked: the
    placements, and the times a task waited while another of its kind was placed."""
    tasks = _tasks(ops)
    _read_histories(ops, tasks)
    capped = _capped_teams(ops)
    groups: dict[str, list[_Task]] = defaultdict(list)
    for task in tasks.values():
        if task.waits is not None:
            groups[task.placement].append(task)
    found: list[tuple[str, tuple[int, ...]]] = []
    checked = compared = 0
    for group in groups.values():
        for b in group:
            for t in b.placed or ():
                checked += 1
                for a in group:
                    if a is b or not any(start < t < end for start, end in a.waits or ()):
                        continue
                    compared += 1
                    why = _ranks_before(a, b, capped)
                    if why:
                        found.append((f"task {a.task_id}: {why} ({b.task_id} at {t:.0f} ms)", (a.create, b.create)))
    return found, {"placements_ordered": checked, "placed_past_a_waiting_task": compared}
