"""How each API document reads as text: the ``tether`` command's human output, in one place."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tether.tables import EMPTY, cell, clock, fields, pairs_text, short_time, table

Json = dict[str, Any]


# -- tasks -----------------------------------------------------------------------------------


def target(task: Json) -> str:
    selector = task.get("selector")
    if selector:
        labels = selector.get("labels") or {}
        return f"driver={selector.get('driver')}" + (f" {pairs_text(labels)}" if labels else "")
    return f"device={task.get('device_id')}" if task.get("device_id") else EMPTY


def work(task: Json) -> str:
    if task.get("kind") == "workflow":
        workflow = task.get("workflow") or {}
        params = workflow.get("params") or {}
        return f"workflow {workflow.get('name')}" + (f" {json.dumps(params)}" if params else "")
    return f"goal {json.dumps(task.get('goal'))}"


def attempts(task: Json) -> str:
    return f"{task.get('attempt')}/{task.get('max_attempts')}"


def why(task: Json) -> str | None:
    """The one word that explains a task's state: why it waits, or why it failed."""
    if task.get("status") == "queued":
        return task.get("waiting_reason")
    return task.get("failure_reason")


def candidates(counts: Json | None) -> str | None:
    """The counts, then each flag that holds (``truncated``, ``team_at_quota``) by its name."""
    if not counts:
        return None
    parts = [f"{name.replace('_', ' ')} {value}" for name, value in counts.items() if not isinstance(value, bool)]
    parts += [name.replace("_", " ") for name, value in counts.items() if value is True]
    return ", ".join(parts)


def progress(step: Json | None) -> str | None:
    if not step:
        return None
    return f"step {step.get('step_index')} {step.get('status')}: {step.get('summary')}"


def result(task: Json) -> str | None:
    outcome = task.get("result")
    if not outcome:
        return None
    text = str(outcome.get("status"))
    if outcome.get("failure_reason"):
        text += f" ({outcome['failure_reason']})"
    if outcome.get("metadata"):
        text += f"  {json.dumps(outcome['metadata'])}"
    return text


# ``tether tasks`` fits a terminal of this many columns, whatever the work's text or the ids.
TASKS_TABLE_WIDTH = 120  # 100 until TEAM and PRIORITY joined the table (issue 58)
_TEAM_SHOWN = 12  # a team's name in the table, clipped past this (whole in `tether task`)
_CLIPPED_MIN = 10  # the narrowest a clipped column gets


def named(name: Any, id_: Any) -> str | None:
    """A host or device as people know it: its name first, then its id (``lab-7 (h_abbd9d…)``);
    the id alone when the name is the id or unknown (an older coordinator sends none)."""
    if not id_:
        return None
    return f"{name} ({id_})" if name and name != id_ else str(id_)


def host_of(item: Json) -> str | None:
    return named(item.get("host_name"), item.get("host_id"))


def device_of(item: Json) -> str | None:
    return named(item.get("device_name"), item.get("device_id"))


# Enough of an operator token's id (``ot_`` and six hex digits) to tell apart the tokens of one name.
_ACTOR_ID_SHOWN = 9


def actor_of(event: Json) -> str | None:
    """Who caused an event: the operator token's name, its id short beside it (``ci (ot_3f2a9c…)``)
    since two live tokens may share a name; the name alone for the bootstrap admin (its id is its
    name) and from a coordinator that sends no id."""
    name, id_ = event.get("actor"), event.get("actor_id")
    if not name:
        return None
    if not id_ or id_ == name:
        return str(name)
    id_ = str(id_)
    return f"{name} ({id_[:_ACTOR_ID_SHOWN]}…)" if len(id_) > _ACTOR_ID_SHOWN else f"{name} ({id_})"


def where(task: Json) -> str:
    """Where a task runs or ran (its device: ids are unique across hosts), else what it waits for."""
    if task.get("host_id") and task.get("device_id"):
        return str(device_of(task))
    return target(task)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def tasks_table(tasks: Iterable[Json], width: int = TASKS_TABLE_WIDTH) -> str:
    """One line per task within ``width`` columns: the id, status, attempts, priority and reason
    whole (people copy and grep them), the team clipped past a dozen characters, the work and
    where it runs clipped to share what is left. The host and the times are in ``tether task
    ID`` (and every field in ``--json``)."""
    rows = [[cell(t["task_id"]), cell(t["status"]), attempts(t), clip(cell(t.get("team")), _TEAM_SHOWN),
             str(t.get("priority") or 0),
             cell(work(t)), cell(where(t)), cell(why(t))]
            for t in tasks]
    headers = ["TASK", "STATUS", "ATTEMPT", "TEAM", "PRIORITY", "WORK", "ON", "WHY"]
    natural = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]
    room = width - 2 * (len(headers) - 1) - sum(natural[:5]) - natural[7]
    # Half each; what one does not need, the other may use.
    on_width = min(natural[6], max(_CLIPPED_MIN, room // 2, room - natural[5]))
    work_width = min(natural[5], max(_CLIPPED_MIN, room - on_width))
    for row in rows:
        row[5], row[6] = clip(row[5], work_width), clip(row[6], on_width)
    return table(headers, rows)


def task_fields(task: Json) -> str:
    pairs: list[tuple[str, Any]] = [
        ("task", task["task_id"]),
        ("status", task["status"] + (" (cancel requested)" if task.get("cancel_requested") else "")),
        ("work", work(task)),
        ("target", target(task)),
        ("team", task.get("team")),
        ("priority", task.get("priority")),
    ]
    # Where the task belongs and what it replaced or was replaced by: ids the other commands take.
    if task.get("run_id"):
        pairs.append(("run", f"{task['run_id']}  (tether run {task['run_id']})"))
    if task.get("rerun_of"):
        pairs.append(("rerun of", f"{task['rerun_of']}  (tether task {task['rerun_of']})"))
    if task.get("replaced_by"):
        pairs.append(("rerun as", f"{task['replaced_by']}  (tether task {task['replaced_by']})"))
    pairs += [
        ("attempt", attempts(task)),
        ("host", host_of(task)),
        ("device", device_of(task)),
    ]
    if task["status"] == "queued":
        pairs += [("waiting", task.get("waiting_reason")), ("candidates", candidates(task.get("candidates"))),
                  ("queue deadline", short_time(task.get("queue_deadline")))]
    if task["status"] == "running":
        pairs.append(("progress", progress(task.get("progress"))))
    if task.get("result"):
        pairs.append(("result", result(task)))
    pairs += [("creator", task.get("created_by")),
              ("created", short_time(task.get("created_at"))), ("updated", short_time(task.get("updated_at")))]
    if task.get("finished_at"):
        pairs.append(("finished", short_time(task.get("finished_at"))))
    return fields(pairs)


def events_table(events: Iterable[Json]) -> str:
    # ACTOR: the operator token (by name, its id short) whose action caused the event; `-` for the
    # fleet's own.
    return table(["AT", "TYPE", "ATTEMPT", "HOST", "DEVICE", "STATUS", "REASON", "ACTOR"],
                 ([short_time(e.get("at")), e.get("type"), e.get("attempt"), host_of(e),
                   device_of(e), e.get("status"), e.get("reason"), actor_of(e)] for e in events))


# -- a live watch: one line per event --------------------------------------------------------


def task_line(task: Json) -> str:
    """The task as read: the first and the last line of a watch."""
    text = f"task {task['task_id']} attempt {attempts(task)}"
    where = _where(task)
    if where:
        text += f" on {where}"
    if task["status"] == "queued" and task.get("waiting_reason"):
        text += f", waiting: {task['waiting_reason']}"
        if task.get("candidates"):
            text += f" ({candidates(task['candidates'])})"
    if task["status"] == "running" and task.get("progress"):
        text += f", {progress(task['progress'])}"
    if task.get("failure_reason"):
        text += f": {task['failure_reason']}"
    return _line(task.get("updated_at"), task["status"], text)


def artifact_line(artifact: Json) -> str:
    """An artifact of the listing, as a watch shows an ``artifact`` event."""
    return _line(artifact.get("created_at"), "artifact", artifact_text(artifact))


def event_line(event: Json) -> str:
    """One feed event (a task's transition, or its progress)."""
    kind = str(event.get("type"))
    if kind == "progress":
        return _line(event.get("at"), kind, cell(progress(event)))
    if kind == "artifact":
        return _line(event.get("at"), kind, artifact_text(event))
    parts = [f"attempt {event['attempt']}"] if event.get("attempt") is not None else []
    where = _where(event)
    if where:
        parts.append(f"on {where}")
    status, reason = event.get("status"), event.get("reason")
    text = " ".join(parts)
    if kind == "result" and status:
        text += f": {status}"
    if reason:
        text += f" ({reason})"
    actor = actor_of(event)
    if actor:
        text += f" by {actor}"
    return _line(event.get("at"), kind, text.strip())


def _where(item: Json) -> str | None:
    """``emulator-5554 (d_e208…) at lab-7 (h_abbd…)``: the device, then its host."""
    host, device = host_of(item), device_of(item) if item.get("host_id") else None
    if host and device:
        return f"{device} at {host}"
    return host


def _line(at: Any, label: str, text: str) -> str:
    return f"{clock(at)}  {label:<16}  {text}".rstrip()


# -- artifacts -------------------------------------------------------------------------------


def size(n: int | None) -> str:
    """Bytes for people: ``812 B``, ``14.2 KiB``, ``3.1 MiB``."""
    if n is None:
        return EMPTY
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def artifact_text(artifact: Json) -> str:
    """``step-3.png (attempt 1, step 3, 14.2 KiB, image/png)``: a watch's line, an artifact event."""
    about = [f"attempt {artifact['attempt']}"] if artifact.get("attempt") is not None else []
    if artifact.get("step_index") is not None:
        about.append(f"step {artifact['step_index']}")
    about += [size(artifact.get("size")), str(artifact.get("content_type") or EMPTY)]
    return f"{cell(artifact.get('name'))} ({', '.join(about)})"


def artifacts_table(artifacts: Iterable[Json]) -> str:
    return table(["NAME", "ATTEMPT", "STEP", "SIZE", "TYPE", "CREATED"],
                 ([a["name"], a.get("attempt"), a.get("step_index"), size(a.get("size")), a.get("content_type"),
                   short_time(a.get("created_at"))] for a in artifacts))
