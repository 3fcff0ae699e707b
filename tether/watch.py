"""Following one task to its end: ``tether watch`` and ``tether submit --wait``.

Race-free start: the feed (filtered to the task) is opened first, which fixes its position, and
only then is the task read; so every event after that read is in the feed, and a task that was
already over is reported from the read alone, with its artifacts (before the watch ends, every
artifact no line showed live gets one: those uploaded before it began). The task is read again
after every event that may have ended it (a ``result`` may be followed by a retry), and its final
document decides.

The feed's events name hosts and devices by id; the lines name them as people know them, with
the names the task's own reads carry (read again when an attempt is claimed on a device the
watch has not seen yet).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import wire
from tether import render
from tether.client import Client
from tether.errors import TetherError

Json = dict[str, Any]

# Events after which the task may have reached a terminal status.
_MAY_END = frozenset({"result", "cancelled", "queue_timeout", "lease_expired"})


def follow(client: Client, task_id: str, emit: Callable[[str], None], *, as_json: bool = False) -> Json:
    """Print the task, then each of its events (progress included) as it happens, then the
    artifacts no event showed, then the task again once it has ended (only once, after its
    artifacts, when it had ended already); return its final document. ``as_json`` prints JSON lines instead:
    the task, the feed's events as the coordinator sent them, the final task."""

    names: dict[str, str] = {}  # ids -> names, learned from the task's reads (the feed has ids only)
    shown: set[tuple[Any, Any]] = set()  # the artifacts (attempt, name) a line has shown

    def show_task(task: Json) -> None:
        _learn(names, task)
        emit(json.dumps(task) if as_json else render.task_line(task))

    def end(task: Json) -> Json:
        if not as_json:
            _show_unseen_artifacts(client, task_id, shown, emit)
        show_task(task)
        return task

    with client.feed(task_id=task_id) as feed:
        task = client.get_task(task_id)
        if task["status"] in wire.TERMINAL_STATUSES:  # over already: its story is its artifacts
            return end(task)
        show_task(task)
        for event in feed:
            if not as_json and event.get("type") == "claimed" and event.get("device_id") not in names:
                _learn(names, client.get_task(task_id))  # a new device: its name, for this line on
            if event.get("type") == "artifact":
                shown.add((event.get("attempt"), event.get("name")))
            emit(json.dumps(event) if as_json else render.event_line(_named(event, names)))
            if event.get("type") in _MAY_END:
                task = client.get_task(task_id)
                if task["status"] in wire.TERMINAL_STATUSES:
                    return end(task)
    raise AssertionError("the feed ended")  # a Feed reconnects for ever; it never ends by itself


def _show_unseen_artifacts(client: Client, task_id: str, shown: set[tuple[Any, Any]],
                           emit: Callable[[str], None]) -> None:
    """A line for each artifact of the task no line has shown yet: all of them when the watch
    began after the task ended, those uploaded before the watch began otherwise. A token that may
    not read them gets none (the watch itself needs only the task and the feed)."""
    try:
        artifacts = client.list_artifacts(task_id)["artifacts"]
    except TetherError:
        return
    for artifact in artifacts:
        if (artifact.get("attempt"), artifact.get("name")) not in shown:
            emit(render.artifact_line(artifact))


def _learn(names: dict[str, str], document: Json) -> None:
    for kind in ("host", "device"):
        id_, name = document.get(f"{kind}_id"), document.get(f"{kind}_name")
        if id_ and name:
            names[id_] = name


def _named(event: Json, names: dict[str, str]) -> Json:
    """``event`` with the names of its host and device, where the watch has learned them."""
    filled = dict(event)
    for kind in ("host", "device"):
        id_ = event.get(f"{kind}_id")
        if id_ and not event.get(f"{kind}_name") and id_ in names:
            filled[f"{kind}_name"] = names[id_]
    return filled


def succeeded(task: Json) -> bool:
    return task.get("status") == wire.TaskStatus.SUCCEEDED.value
