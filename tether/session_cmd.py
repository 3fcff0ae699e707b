"""``tether session start | do | end | log``: a live session from the command line (PROTOCOL.md,
"Live sessions", and its CLI table).

- ``start (--device ID | --driver D [--label K=V]…) [--team T] [--idle-timeout S]`` waits until
  the session runs and prints its id and device;
- ``do ID ACTION [ARGS…] [-o screen.png]`` (``tap X Y``, ``tap --text T``, ``type TEXT``,
  ``swipe X1 Y1 X2 Y2``, ``key NAME``, ``launch APP``, ``wait MS``, ``observe``) prints the answer
  and the elements, and saves the screen with ``-o``; exit 1 when the action failed;
- ``end ID`` ends it; ``log ID`` prints the recording.
"""

from __future__ import annotations

import argparse
from argparse import Namespace
from collections.abc import Callable
from typing import Any

from tether.arg_types import label
from tether.client import Client, Json
from tether.commands import Output, save
from tether.sessions import CommandAnswer
from tether.tables import cell, fields, short_time, table

# Each action's positional arguments after ACTION, and how each becomes the action's fields.
_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "tap": ("x", "y"),
    "type": ("text",),
    "swipe": ("x1", "y1", "x2", "y2"),
    "key": ("key",),
    "launch": ("app",),
    "wait": ("ms",),
    "observe": (),
}
_NUMBERS = {"x", "y", "x1", "y1", "x2", "y2", "ms"}


class _Usage(ValueError):
    """``do``'s arguments do not make an action: exit 2, as argparse's own usage errors."""


def add_arguments(session: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``session``'s subcommands, on its parser (made in cli.py like every other command's)."""
    sub = session.add_subparsers(title="session commands", metavar="COMMAND", required=True)
    start = sub.add_parser("start", parents=[common], help="start a session; prints its id once it runs")
    start.set_defaults(run=session_start)
    where = start.add_mutually_exclusive_group(required=True)
    where.add_argument("--device", metavar="ID", help="this device")
    where.add_argument("--driver", metavar="D", help="any free device of this driver (with --label)")
    start.add_argument("--label", metavar="K=V", action="append", type=label, help="device label (repeatable)")
    start.add_argument("--team", metavar="T", help="the team it belongs to")
    start.add_argument("--idle-timeout", metavar="S", type=int, help="end it after S seconds without a command")
    start.add_argument("--wait", metavar="S", type=float, default=120.0,
                       help="give up (and cancel it) if it is not running within S seconds (default 120)")
    do = sub.add_parser("do", parents=[common], help="one command: " + ", ".join(_ARGUMENTS))
    do.set_defaults(run=session_do)
    do.add_argument("id", metavar="ID", help="the session's task id, or a unique prefix of it")
    do.add_argument("action", metavar="ACTION", choices=tuple(_ARGUMENTS), help=", ".join(_ARGUMENTS))
    do.add_argument("args", metavar="ARGS", nargs="*", help="tap X Y, type TEXT, swipe X1 Y1 X2 Y2, key NAME, ...")
    do.add_argument("--text", metavar="T", help="tap the element with this text")
    do.add_argument("--id", dest="element_id", metavar="RID", help="tap the element with this resource id")
    do.add_argument("-o", "--output", metavar="FILE", help="save the screen after it (PNG)")
    do.add_argument("--no-observe", action="store_true", help="no screen after it")
    for name, run, what in (("end", session_end, "end a session"),
                            ("log", session_log, "a session's recording: each command, who sent it, its answer")):
        p = sub.add_parser(name, parents=[common], help=what)
        p.set_defaults(run=run)
        p.add_argument("id", metavar="ID", help="the session's task id, or a unique prefix of it")


def action_of(args: Namespace) -> dict[str, Any]:
    """The action ``do``'s arguments name; ``_Usage`` says what is wrong."""
    kind: str = args.action
    if kind == "tap" and (args.text is not None or args.element_id is not None):
        if args.args:
            raise _Usage("tap takes X Y or --text/--id, not both")
        return {"action": "tap", "text": args.text} if args.text is not None else {"action": "tap",
                                                                                 "id": args.element_id}
    names = _ARGUMENTS[kind]
    values = list(args.args)
    if kind == "type" and len(values) > 1:
        values = [" ".join(values)]  # `type hello world` types "hello world"
    if len(values) != len(names):
        wanted = " ".join(name.upper() for name in names) or "nothing"
        raise _Usage(f"{kind} takes {wanted}" + (" (or --text T / --id RID)" if kind == "tap" else ""))
    action: dict[str, Any] = {"action": kind}
    for name, value in zip(names, values, strict=True):
        if name in _NUMBERS:
            try:
                action[name] = int(value)
            except ValueError:
                raise _Usage(f"{name.upper()} is a whole number, not {value!r}") from None
        else:
            action[name] = value
    return action


def session_start(client: Client, args: Namespace, out: Output) -> int:
    session = client.start_session(device_id=args.device, driver=args.driver, labels=dict(args.label or []),
                                   team=args.team, idle_timeout_s=args.idle_timeout, wait_s=args.wait)
    return out.show(session.task, lambda t: fields([("session", t["task_id"]), ("device", t.get("device_id")),
                                                    ("host", t.get("host_id"))]))


def session_do(client: Client, args: Namespace, out: Output) -> int:
    try:
        action = action_of(args)
    except _Usage as exc:
        out.warn(str(exc))
        return 2
    if args.no_observe:
        action["observe"] = False
    task_id = client.resolve_task_id(args.id)
    answer = client.send_command(task_id, action)
    while answer.get("status") == "pending":
        answer = client.get_command(task_id, str(answer["command_id"]))
    result = CommandAnswer.from_json(client, answer)
    if args.output and not result.screen_url:
        out.show(answer, answer_text)
        out.warn(f"command {result.command_id} has no screen to save")
        return 1
    if args.output:
        png = result.screen()
        path = save(args.output, png)
        # Said where the answer is: a line for people, a field for scripts.
        answer = {**answer, "saved": {"path": str(path), "size": len(png)}}
    out.show(answer, answer_text)
    return 0 if result.ok else 1


def answer_text(answer: Json) -> str:
    observation = answer.get("observation") or {}
    head = fields([("command", answer.get("command_id")), ("status", answer.get("status")),
                   ("error", answer.get("error")), ("duration", _ms(answer.get("duration_ms"))),
                   ("round trip", _ms(answer.get("round_trip_ms"))),
                   ("screen", f"{observation.get('width')}x{observation.get('height')}" if observation else None)])
    saved = answer.get("saved")
    if saved:
        head += f"\nsaved   screen ({saved['size']} bytes) to {saved['path']}"
    elements = observation.get("elements") or []
    if not elements:
        return head
    rows = [(e.get("text"), e.get("id"), ",".join(str(v) for v in e.get("bounds") or []),
             "yes" if e.get("clickable") else "") for e in elements]
    return head + "\n\n" + table(("TEXT", "ID", "BOUNDS", "TAP"), rows)


def _ms(value: Any) -> str | None:
    return None if value is None else f"{value} ms"


def session_end(client: Client, args: Namespace, out: Output) -> int:
    task_id = client.resolve_task_id(args.id)
    return out.show(client.end_session(task_id), lambda t: f"ended {task_id}")


def session_log(client: Client, args: Namespace, out: Output) -> int:
    task_id = client.resolve_task_id(args.id)
    commands = list(client.iter_session_log(task_id))
    return out.show({"commands": commands, "next_cursor": None}, log_table)


def _what(command: Json) -> str:
    action = command.get("action") or {}
    kind = str(action.get("action", "?"))
    describe: Callable[[Json], str] = _DESCRIPTIONS.get(kind, lambda a: "")
    return f"{kind} {describe(action)}".strip()


_DESCRIPTIONS: dict[str, Callable[[Json], str]] = {
    "tap": lambda a: str(a.get("text") or a.get("id") or f"{a.get('x')} {a.get('y')}"),
    "type": lambda a: f"({len(str(a.get('text') or ''))} chars)",  # typed text may be a password
    "swipe": lambda a: f"{a.get('x1')} {a.get('y1')} -> {a.get('x2')} {a.get('y2')}",
    "key": lambda a: str(a.get("key")),
    "launch": lambda a: str(a.get("app")),
    "wait": lambda a: f"{a.get('ms')} ms",
}


def log_table(document: Json) -> str:
    rows = []
    for command in document["commands"]:
        answer = command.get("answer") or command
        observation = answer.get("observation") or {}
        rows.append((short_time(command.get("created_at") or command.get("sent_at")), command.get("actor"),
                     _what(command), answer.get("status"), cell(answer.get("error")),
                     observation.get("screen") or observation.get("screen_url")))
    return table(("SENT", "BY", "ACTION", "STATUS", "ERROR", "SCREEN"), rows)
