"""The tools of /mcp (PROTOCOL.md, "MCP: sessions for agents"), each a thin call into what the
operator API already does: ``fleet.device_page``, ``tasks.submit_task`` and ``tasks.task_of``,
and the sessions' ``send_command`` and ``end_session``. Nothing here places, authorizes or
records anything itself: each tool names the operator route whose scope it needs (``Tool.route``:
the route table says which, ``server.py`` checks it), and the function it calls checks the rest
(a session's owner, a token's team) as it does for the route.

A tool's arguments are a pydantic model of the operator API's kind (unknown fields refused,
values strict), read with the API's own translator of errors, so a bad argument is the
``invalid_request`` the route would answer. Descriptions are written for a model: what the tool
does, what it answers, and its errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from mcp_types import CallToolResult
from pydantic import Field, StringConstraints

import wire
from coordinator.api import fleet, sessions, shapes, tasks
from coordinator.api.auth import Operator
from coordinator.api.bodies import Id, Labels, OperatorBody, TaskCreate
from coordinator.api.context import Context
from coordinator.api.validation import validate
from coordinator.errors import InvalidRequest
from coordinator.feed import Entry
from coordinator.mcp import screens
from coordinator.mcp.answers import answer, json_text, observation_content, text

# How long start_session waits for placement, and a command for the host's answer, by default
# and at most (a command's bound is the operator API's: PROTOCOL, "Live sessions").
START_WAIT_S = (30, 120)
COMMAND_WAIT_S = 30.0
LIST_LIMIT = (50, 200)
_SESSION = wire.TaskKind.SESSION.value
_RUNNING = wire.TaskStatus.RUNNING.value
_ENDED = frozenset(wire.TERMINAL_STATUSES)
_IDLE_S = wire.SESSION_IDLE_TIMEOUT_S
# A task's events after which start_session stops waiting: it runs, or it never will.
_STARTED_OR_ENDED = frozenset(e.value for e in (wire.EventType.CLAIMED, wire.EventType.RESULT,
                                                 wire.EventType.CANCELLED, wire.EventType.QUEUE_TIMEOUT,
                                                 wire.EventType.LEASE_EXPIRED))


@dataclass(frozen=True)
class Call:
    """What a tool is handed beside its arguments: the process's context, the operator calling."""

    ctx: Context
    operator: Operator


# -- arguments -----------------------------------------------------------------------------

SessionId = Annotated[Id, Field(description="the session's id, as start_session answered it (t_…)")]
# The values of an action are judged by the operator API's own action models (bodies/actions.py), once.
Coordinate = int


class ListDevices(OperatorBody):
    driver: Id | None = Field(default=None, description="only devices of this driver (sim, adb, …)")
    labels: Labels | None = Field(default=None, description="only devices carrying every one of these labels")
    free_only: bool = Field(default=False, description="only devices a new session could take now")
    limit: Annotated[int, Field(ge=1, le=LIST_LIMIT[1])] = LIST_LIMIT[0]
    cursor: Annotated[str, StringConstraints(min_length=1, max_length=300)] | None = Field(
        default=None, description="next_cursor of the previous answer, for the next page")


class StartSession(OperatorBody):
    device_id: Id | None = Field(default=None, description="this device; or give labels (and driver) instead")
    driver: Id | None = Field(default=None, description="with labels: the driver of the device wanted")
    labels: Labels | None = Field(default=None, description="any device carrying every one of these labels")
    team: Id | None = Field(default=None, description="the team the session counts against (a team token's own)")
    idle_timeout_s: Annotated[int, Field(ge=_IDLE_S[0], le=_IDLE_S[1])] | None = Field(
        default=None, description=f"no command for this long ends the session (default {_IDLE_S[2]})")
    wait_s: Annotated[int, Field(ge=0, le=START_WAIT_S[1])] = Field(
        default=START_WAIT_S[0], description="how long to wait for the session to start")


class Session(OperatorBody):
    session_id: SessionId


class Tap(Session):
    x: Coordinate | None = Field(default=None, description="with y: the point, in the device's pixels")
    y: Coordinate | None = None
    element: Annotated[int, Field(ge=0, lt=screens.MAX_ELEMENTS)] | None = Field(
        default=None, description="the [index] of an element of the last screen: tapped at its centre")
    text: str | None = Field(default=None, description="the element showing this text, as the device finds it now")
    id: str | None = Field(default=None, description="the element of this resource id (settings:id/wifi)")


class TypeText(Session):
    text: str = Field(description="typed into the focused field (tap the field first)")


class Swipe(Session):
    x1: Coordinate
    y1: Coordinate
    x2: Coordinate
    y2: Coordinate
    duration_ms: int = 300


class PressKey(Session):
    key: str = Field(description="home, back, enter, …")


class LaunchApp(Session):
    app: str = Field(description="the app's name or package (settings, notes, com.android.settings)")


class GetTask(OperatorBody):
    task_id: Id


# -- the tools -----------------------------------------------------------------------------


async def list_devices(call: Call, args: ListDevices) -> CallToolResult:
    page = await fleet.device_page(call.ctx, host_id=None, driver=args.driver, status=None, limit=args.limit,
                                   cursor=args.cursor)
    wanted = args.labels or {}
    lines, chosen = [], []
    for device in page["devices"]:
        labels = device.get("labels") or {}
        if any(labels.get(k) != v for k, v in wanted.items()):
            continue
        free = _free(device)
        if args.free_only and not free:
            continue
        chosen.append({**device, "free": free})
        lines.append(f"{device['device_id']} driver={device['driver']} host={device['host_id']} "
                     f"status={device['status']}{' free' if free else ''}"
                     f"{' disabled' if device.get('disabled') else ''}"
                     f"{'' if device.get('host_online') else ' host_offline'} labels={json_text(labels)} "
                     f"attributes={json_text(device.get('attributes') or {})}")
    body = "\n".join(lines) if lines else "no device on this page matches"
    if page["next_cursor"] is not None:
        body += f"\nmore devices: call list_devices again with cursor={page['next_cursor']!r}"
    return CallToolResult(content=[text(body)],
                          structured_content={"devices": chosen, "next_cursor": page["next_cursor"]})


def _free(device: Mapping[str, Any]) -> bool:
    """What a new session could take now: available, unreserved, enabled, its host online."""
    return (device.get("status") == wire.DeviceStatus.AVAILABLE.value and device.get("reserved_by") is None
            and not device.get("disabled") and bool(device.get("host_online")))


async def start_session(call: Call, args: StartSession) -> CallToolResult:
    body: dict[str, Any] = {"kind": _SESSION}
    if args.device_id is not None:
        body["device_id"] = args.device_id
    if args.labels is not None or args.driver is not None:
        selector: dict[str, Any] = {"labels": args.labels or {}}
        if args.driver is not None:
            selector["driver"] = args.driver
        body["selector"] = selector
    for name in ("team", "idle_timeout_s"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    since = await call.ctx.feed.latest_id()
    _, task = await tasks.submit_task(call.ctx, call.operator, body)
    if task["status"] not in _ENDED and task["status"] != _RUNNING and args.wait_s > 0:
        task = await _until_started(call.ctx, task["task_id"], since, args.wait_s)
    return answer([text(_session_line(task))], task)


async def _until_started(ctx: Context, task_id: str, since: str, wait_s: float) -> shapes.Task:
    """The task once it runs or ended, or as it is after ``wait_s``: woken by its events on the
    process's feed (one reader per process, whichever process placed it), not by polling Redis."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait_s), contextlib.aclosing(
                ctx.feed.follow(since, match={"task_id": task_id})) as events:
            async for item in events:
                if isinstance(item, Entry) and orjson.loads(item.data).get("type") in _STARTED_OR_ENDED:
                    break
    return await tasks.task_of(ctx, task_id)


def _session_line(task: Mapping[str, Any]) -> str:
    task_id, status = task["task_id"], task["status"]
    if status == _RUNNING:
        return (f"session {task_id} is running on device {task.get('device_id')} (host {task.get('host_id')}); "
                f"pass session_id={task_id!r} to observe, tap, type_text, swipe, press_key, launch_app, and "
                "end_session when done")
    if status in _ENDED:
        result = task.get("result") or {}
        return (f"session {task_id} ended {status}"
                f"{': ' + str(result.get('failure_reason')) if result.get('failure_reason') else ''}")
    if status == wire.TaskStatus.ASSIGNED.value:
        return (f"session {task_id} has device {task.get('device_id')}, and waits for its host (host "
                f"{task.get('host_id')}) to take it: call get_task with task_id={task_id!r} to see it run")
    waiting = task.get("waiting_reason")
    return (f"session {task_id} is {status}, not running yet"
            f"{f': waiting_reason={waiting}' if waiting else ''}"
            f"{' candidates=' + json_text(task['candidates']) if task.get('candidates') else ''}. It starts when a "
            f"device frees: call get_task with task_id={task_id!r} to see, or end_session to give up")


async def _command(call: Call, session_id: str, action: dict[str, Any]) -> CallToolResult:
    status, reply = await sessions.send_command(call.ctx, call.operator, session_id, action, COMMAND_WAIT_S)
    if status == 202:
        return answer([text(f"command {reply.get('command_id')} is still pending after {COMMAND_WAIT_S:g} s: the "
                            "device has not answered yet; call observe to see the screen once it has")], reply)
    return await observation_content(call.ctx, session_id, reply)


async def observe(call: Call, args: Session) -> CallToolResult:
    return await _command(call, args.session_id, {"action": "observe"})


async def tap(call: Call, args: Tap) -> CallToolResult:
    point = args.x is not None or args.y is not None
    given = sum((point, args.element is not None, args.text is not None, args.id is not None))
    if given != 1 or (point and (args.x is None or args.y is None)):
        raise InvalidRequest("give exactly one of: x and y, element, text, id")
    if args.text is not None:
        return await _command(call, args.session_id, {"action": "tap", "text": args.text})
    if args.id is not None:
        return await _command(call, args.session_id, {"action": "tap", "id": args.id})
    if args.element is not None:
        x, y = await _element_point(call, args.session_id, args.element)
        return await _command(call, args.session_id, {"action": "tap", "x": x, "y": y})
    return await _command(call, args.session_id, {"action": "tap", "x": args.x, "y": args.y})


async def _element_point(call: Call, session_id: str, index: int) -> tuple[int, int]:
    """The centre of element ``index`` of the screen as it is now: one observe first, so the
    index means what the model saw however many processes served the session meanwhile (the
    screen it saw is the device's until the next action, and nothing is kept between calls)."""
    status, answer = await sessions.send_command(call.ctx, call.operator, session_id, {"action": "observe"},
                                                 COMMAND_WAIT_S)
    observation = answer.get("observation") if status == 200 else None
    elements = observation.get("elements") if isinstance(observation, Mapping) else None
    if not isinstance(elements, list):
        raise InvalidRequest("the device did not show its elements in time; tap by x and y, or by text")
    if index >= len(elements) or not isinstance(elements[index], Mapping):
        raise InvalidRequest(f"element {index} is not on the screen, which has {len(elements)} elements")
    point = screens.element_centre(elements[index])
    if point is None:
        raise InvalidRequest(f"element {index} has no bounds to tap")
    return point


async def type_text(call: Call, args: TypeText) -> CallToolResult:
    return await _command(call, args.session_id, {"action": "type", "text": args.text})


async def swipe(call: Call, args: Swipe) -> CallToolResult:
    return await _command(call, args.session_id, {"action": "swipe", "x1": args.x1, "y1": args.y1, "x2": args.x2,
                                                  "y2": args.y2, "duration_ms": args.duration_ms})


async def press_key(call: Call, args: PressKey) -> CallToolResult:
    return await _command(call, args.session_id, {"action": "key", "key": args.key})


async def launch_app(call: Call, args: LaunchApp) -> CallToolResult:
    return await _command(call, args.session_id, {"action": "launch", "app": args.app})


async def end_session(call: Call, args: Session) -> CallToolResult:
    task = await sessions.end_session(call.ctx, call.operator, args.session_id)
    return answer([text(f"session {args.session_id} ended ({task.get('status')}); its recording stays in the "
                        "task's commands")], task)


async def submit_task(call: Call, args: TaskCreate) -> CallToolResult:
    if args.kind.value == _SESSION:
        raise InvalidRequest("a session is started with start_session, not submit_task")
    status, task = await tasks.submit_task(call.ctx, call.operator,
                                           args.model_dump(mode="json", exclude_unset=True))
    created = "created" if status == 201 else "already created with this idempotency_key"
    return answer([text(f"task {task['task_id']} {created}: {task['status']}")], task)


async def get_task(call: Call, args: GetTask) -> CallToolResult:
    task = await tasks.task_of(call.ctx, args.task_id)
    return answer([text(_session_line(task) if task.get("kind") == _SESSION else
                        f"task {task['task_id']} is {task['status']}")], task)


# -- the table -----------------------------------------------------------------------------

Run = Callable[[Call, Any], Awaitable[CallToolResult]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[OperatorBody]
    route: tuple[str, str]  # (method, path) of the operator route whose scope the tool needs
    run: Run

    def parse(self, arguments: Mapping[str, Any] | None) -> Any:
        return validate(self.arguments, dict(arguments or {}))


_SCREEN = ("Answers with the screen after the action as an image (scaled so its long side is at most 1280 px; "
           "the scale is stated, and coordinates you send are the device's) and the screen's elements, one a "
           "line: [index] \"text\" id=… bounds=x1,y1,x2,y2 flags. ")
_SESSION_ERRORS = ("Errors (the tool result says its code): session_ended (the session is over: the idle "
                   "timeout, the device's host went away, or end_session), session_not_running, not_a_session, "
                   "insufficient_scope (only the token that started the session may drive it), not_found.")
_COMMANDS = ("POST", "/api/v1/tasks/{task_id}/commands")

TOOLS: tuple[Tool, ...] = (
    Tool("list_devices",
         "List the pooled devices (phones) of the fleet, one a line: id, driver, host, status, whether it is free "
         "(a new session could take it now), labels and attributes. Filters: driver, labels (every one must "
         "match), free_only. Paged: pass next_cursor back as cursor. Needs the read scope.",
         ListDevices, ("GET", "/api/v1/devices"), list_devices),
    Tool("start_session",
         "Start a live session on a device: name device_id, or labels (and driver) for any matching device. The "
         "session holds the device for you until end_session, or until no command came for idle_timeout_s. "
         "Waits up to wait_s seconds for a device; answers the session_id once it runs, or why it still waits "
         "(waiting_reason: matching_devices_busy, no_matching_device, team_at_quota, ...). Counts against the "
         "token's team. Needs the submit scope. Errors: invalid_request, insufficient_scope.",
         StartSession, ("POST", "/api/v1/tasks"), start_session),
    Tool("observe", "Look at the session's device without acting. " + _SCREEN + _SESSION_ERRORS,
         Session, _COMMANDS, observe),
    Tool("tap",
         "Tap the session's device: at a point (x and y, the device's pixels), on an element of the screen by "
         "its [index] (element), on the element showing a text (text), or of a resource id (id). "
         + _SCREEN + _SESSION_ERRORS,
         Tap, _COMMANDS, tap),
    Tool("type_text", "Type text into the focused field of the session's device (tap the field first). "
         + _SCREEN + _SESSION_ERRORS, TypeText, _COMMANDS, type_text),
    Tool("swipe", "Swipe on the session's device from (x1, y1) to (x2, y2), the device's pixels, over "
         "duration_ms. " + _SCREEN + _SESSION_ERRORS, Swipe, _COMMANDS, swipe),
    Tool("press_key", "Press a key on the session's device: home, back, enter. " + _SCREEN + _SESSION_ERRORS,
         PressKey, _COMMANDS, press_key),
    Tool("launch_app", "Open an app on the session's device by name or package. " + _SCREEN + _SESSION_ERRORS,
         LaunchApp, _COMMANDS, launch_app),
    Tool("end_session",
         "End a session and free its device (idempotent). The session's recording (every command and its "
         "answer) stays readable. Errors: not_a_session, insufficient_scope, not_found.",
         Session, ("POST", "/api/v1/tasks/{task_id}/end"), end_session),
    Tool("submit_task",
         "Submit a goal task (kind goal, goal: what to do, in words, for the device's own agent) or a workflow "
         "task (kind workflow, workflow: {name, params}) on device_id or on any device a selector "
         "({driver, labels}) matches, as POST /api/v1/tasks takes it; answers the task (its task_id, status, "
         "and while queued its waiting_reason). Needs the submit scope. Errors: invalid_request, "
         "insufficient_scope, idempotency_conflict.",
         TaskCreate, ("POST", "/api/v1/tasks"), submit_task),
    Tool("get_task",
         "Read a task or session by id: status (queued, assigned, running, succeeded, failed, cancelled), "
         "device, progress, result, and while queued why it waits (waiting_reason, candidates). Needs the read "
         "scope. Errors: not_found.",
         GetTask, ("GET", "/api/v1/tasks/{task_id}"), get_task),
)
