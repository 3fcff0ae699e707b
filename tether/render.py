"""How each API document reads as text: the ``tether`` command's human output, in one place."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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


# -- fleet -----------------------------------------------------------------------------------


def hosts_table(hosts: Iterable[Json], device_labels: Mapping[str, Json] | None = None) -> str:
    """One state column (``tether host ID`` shows each flag) keeps the table narrow. LABELS: the
    host's own, over those every one of its devices carries (``device_labels``, by host id: what
    ``HOST_AGENT_LABELS`` puts on each device)."""
    shared = device_labels or {}
    return table(["HOST", "HOSTNAME", "KIND", "STATE", "DEVICES", "LAST SEEN", "LABELS"],
                 ([h["host_id"], h.get("hostname"), h.get("kind"), _host_word(h), h.get("devices"),
                   short_time(h.get("last_seen")), {**shared.get(h["host_id"], {}), **(h.get("labels") or {})}]
                  for h in hosts))


def _host_word(host: Json) -> str:
    """The one state that matters most: revoked, offline, draining, else online."""
    if host.get("revoked"):
        return "revoked"
    if not host.get("online"):
        return "offline"
    return "draining" if host.get("draining") else "online"


def host_fields(host: Json) -> str:
    pairs = [
        ("host", host["host_id"]), ("kind", host.get("kind")), ("online", host.get("online")),
        ("devices", host.get("devices")), ("draining", host.get("draining")), ("revoked", host.get("revoked")),
        ("last seen", short_time(host.get("last_seen"))), ("hostname", host.get("hostname")),
        ("agent", host.get("agent_version")), ("labels", host.get("labels")),
        ("enrollment token", host.get("enrollment_token_id")), ("created", short_time(host.get("created_at"))),
    ]
    other = host.get("conflicting_agent")
    if isinstance(other, dict):  # two agents heartbeat as this host, replacing each other's devices
        where = f"instance {other.get('instance_id')} on {other.get('hostname') or '?'}"
        pairs.append(("second agent", f"{where}, last seen {short_time(other.get('last_seen'))}: stop one of them"))
    return fields(pairs)


def host_state(host: Json) -> str:
    """One line after drain, undrain or revoke: the state that matters."""
    states = ["revoked" if host.get("revoked") else "draining" if host.get("draining") else "accepting work",
              "online" if host.get("online") else "offline"]
    return f"host {host['host_id']}: {', '.join(states)}"


def devices_table(devices: Iterable[Json]) -> str:
    """``NAME`` is what people call the device (an enrolled one's serial); one status column says
    what keeps it from work, if anything (disabled, its host offline), else what it reports."""
    return table(["DEVICE", "NAME", "HOST", "DRIVER", "STATUS", "TASK", "LABELS"],
                 ([d["device_id"], d.get("name"), host_of(d), d.get("driver"), _device_word(d),
                   d.get("reserved_by"), d.get("labels")] for d in devices))


def _device_word(device: Json) -> str:
    if device.get("disabled"):
        return f"disabled ({device['disabled_reason']})" if device.get("disabled_reason") else "disabled"
    if device.get("host_online") is False:
        return "host offline"
    return str(device.get("status"))


def device_state(device: Json) -> str:
    state = f"disabled ({device['disabled_reason']})" if device.get("disabled_reason") else "disabled"
    return f"device {device['device_id']}: {state if device.get('disabled') else 'enabled'}"


def workflows_table(workflows: Iterable[Json]) -> str:
    return table(["WORKFLOW", "DEVICES", "HOSTS"],
                 ([w["name"], w.get("devices"), ", ".join(w.get("hosts") or [])] for w in workflows))


def runs_table(runs: Iterable[Json]) -> str:
    return table(["TASK", "ATTEMPT", "HOST", "STARTED", "ENDED", "OUTCOME"],
                 ([r.get("task_id"), r.get("attempt"), host_of(r), short_time(r.get("started_at")),
                   short_time(r.get("ended_at")), r.get("outcome") or "running"] for r in runs))


# -- enrollment tokens -----------------------------------------------------------------------


def token_state(token: Json) -> str:
    if token.get("revoked"):
        return "revoked"
    if token.get("expired"):
        return "expired"
    return "used up" if token.get("uses_left") == 0 else "active"


def tokens_table(tokens: Iterable[Json]) -> str:
    return table(["ID", "STATE", "USES", "EXPIRES", "CREATED", "LABELS"],
                 ([t["id"], token_state(t), f"{t.get('uses')}/{t.get('max_uses')}", short_time(t.get("expires_at")),
                   short_time(t.get("created_at")), t.get("labels")] for t in tokens))


def created_token(token: Json) -> str:
    return fields([
        ("token", token["token"]), ("id", token["id"]), ("expires", short_time(token.get("expires_at"))),
        ("uses", token.get("max_uses")), ("labels", token.get("labels")),
    ]) + "\nThe token is shown only now: give it to the host (HOST_AGENT_ENROLLMENT_TOKEN)."


# -- operator tokens, and who the caller is ----------------------------------------------------


def scopes(token: Json) -> str:
    return ",".join(str(s) for s in token.get("scopes") or [])


def me_fields(me: Json) -> str:
    return fields([("name", me.get("name")), ("scopes", scopes(me)),
                   ("expires", short_time(me.get("expires_at")) if me.get("expires_at") else "never"),
                   ("id", me.get("token_id") or "none (the bootstrap admin token)")])


def operator_token_state(token: Json) -> str:
    if token.get("revoked"):
        return "revoked"
    return "expired" if token.get("expired") else "active"


def operator_tokens_table(tokens: Iterable[Json]) -> str:
    return table(["ID", "NAME", "SCOPES", "STATE", "EXPIRES", "LAST USED", "CREATED", "CREATED BY"],
                 ([t["id"], t.get("name"), scopes(t), operator_token_state(t), short_time(t.get("expires_at")),
                   short_time(t.get("last_used_at")), short_time(t.get("created_at")), t.get("created_by")]
                  for t in tokens))


def created_operator_token(token: Json) -> str:
    return fields([
        ("token", token["token"]), ("id", token["id"]), ("name", token.get("name")), ("scopes", scopes(token)),
        ("expires", short_time(token.get("expires_at"))),
    ]) + "\nThe token is shown only now: give it to whoever it is for (TETHER_TOKEN, or the dashboard)."
