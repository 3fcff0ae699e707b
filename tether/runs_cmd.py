"""Runs from the command line (PROTOCOL.md, "Runs" and the CLI rows): ``tether run submit FILE
[--wait]``, ``tether runs``, ``tether run ID``, ``tether run cancel ID``, ``tether run
rerun-failed ID``, ``tether run report ID [--junit FILE]``.

``run`` takes its action as its first word (or a run id, to show it), so ``tether run ID`` and
``tether run cancel ID`` read as the contract writes them. A run file is the body of ``POST
/api/v1/runs``, as JSON, or as YAML when its name ends ``.yaml`` or ``.yml`` (``-`` reads JSON
from stdin).

``--wait`` follows the run race-free, as ``tether watch`` follows a task: the feed (filtered to the
run) is opened first, then the run is read, and read again after each of its events, a line each
time its counts move; it exits 0 only if the run succeeded.
"""

from __future__ import annotations

import argparse
import json
import sys
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wire
from tether.arg_types import positive_int
from tether.client import Client
from tether.commands import Output, UsageError, save
from tether.errors import TetherError
from tether.run_files import RunFileError, parse_run_file
from tether.tables import fields, short_time, table

Json = dict[str, Any]
ACTIONS = ("submit", "cancel", "rerun-failed", "report")
_RUN_STATUSES = wire.values(wire.RunStatus)


# Each action's own help (`tether run submit --help`): its operand and what it does.
_ACTIONS_HELP = {
    "submit": ("FILE", ("create a run from FILE, the body of POST /api/v1/runs as JSON (YAML when its name "
                        "ends .yaml or .yml; '-' reads JSON from stdin), and print its id"), ["--wait"]),
    "cancel": ("ID", "cancel every task of the run not yet ended", []),
    "rerun-failed": ("ID", "one new task in the run for each task that failed", ["--wait"]),
    "report": ("ID", "the run's report: a table, the API's JSON with --json, or JUnit XML with --junit", ["--junit"]),
}
_OPTIONS_HELP = {
    "--wait": "follow the run's counts until it ends; exit 0 if it succeeded",
    "--junit": "write the JUnit XML to FILE ('-': stdout) and say what was written",
}


def action_help(action: str) -> str:
    """The help of ``tether run ACTION``."""
    operand, what, options = _ACTIONS_HELP[action]
    usage = " ".join([f"usage: tether run {action} {operand}", *(f"[{o}{' FILE' if o == '--junit' else ''}]"
                                                               for o in options)])
    lines = [usage, "", what[0].upper() + what[1:] + ".", ""]
    lines += ["options:", *(f"  {o:<10} {_OPTIONS_HELP[o]}" for o in options)] if options else []
    lines += ["  --url, --token, --json  as for every command"]
    return "\n".join(lines) + "\n"


class _Help(argparse.Action):
    """``-h``: an action's own help when one is named before it (`run submit --help`), else run's."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show this help and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: Namespace, values: Any,
                 option_string: str | None = None) -> None:
        words = getattr(namespace, "words", None) or []
        sys.stdout.write(action_help(words[0]) if words and words[0] in _ACTIONS_HELP else parser.format_help())
        parser.exit()


def add_run_arguments(command: argparse.ArgumentParser) -> None:
    """``run``'s words and options, on its parser (made in cli.py like every other command's,
    without argparse's -h: its own names each action's help)."""
    command.add_argument("-h", "--help", action=_Help)
    command.add_argument("words", metavar="ACTION|ID", nargs="+",
                         help="submit FILE | cancel ID | rerun-failed ID | report ID | ID (show the run)")
    command.add_argument("--wait", action="store_true",
                         help="submit, rerun-failed: follow the run's counts until it ends; exit 0 if it succeeded")
    command.add_argument("--junit", metavar="FILE", help="report: write the JUnit XML to FILE ('-': stdout)")


def add_runs_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--status", choices=_RUN_STATUSES)
    command.add_argument("--team", metavar="T")
    command.add_argument("--limit", metavar="N", type=positive_int, default=50, help="at most N runs (default 50)")


def counts_text(counts: Json) -> str:
    """``3 succeeded, 1 failed, 2 running``: the statuses that have tasks, in lifecycle order."""
    parts = [f"{counts[status]} {status}" for status in wire.values(wire.TaskStatus) if counts.get(status)]
    return ", ".join(parts) or "no tasks"


def run_line(run: Json) -> str:
    return f"{run['run_id']}  {run['status']}  {counts_text(run['counts'])}"


def runs_table(runs: list[Json]) -> str:
    return table(["RUN", "NAME", "STATUS", "TEAM", "TASKS", "COUNTS", "CREATED", "ENDED"],
                 ([r["run_id"], r.get("name"), r["status"], r.get("team"), r.get("tasks"), counts_text(r["counts"]),
                   short_time(r.get("created_at")), short_time(r.get("ended_at"))] for r in runs))


def run_text(run: Json) -> str:
    head = fields([("run", run["run_id"]), ("name", run.get("name")), ("status", run["status"]),
                   ("counts", counts_text(run["counts"])), ("team", run.get("team")),
                   ("priority", run.get("priority")), ("created", short_time(run.get("created_at"))),
                   ("ended", short_time(run.get("ended_at"))), ("by", run.get("created_by"))])
    breakdown = run.get("breakdown") or {}
    work = table(["WORK", "COUNTS"], ([row["work"], counts_text(row["counts"])] for row in breakdown.get("work", [])))
    devices = table(["DEVICE", "COUNTS"], ([row["device_id"] or "(not placed)", counts_text(row["counts"])]
                                          for row in breakdown.get("devices", [])))
    return f"{head}\n\n{work}\n\n{devices}"


def report_text(report: Json) -> str:
    rows = ([suite["work"], case["device_id"], case["status"], f"{case['time_s']:.1f}s",
             case.get("failure_reason"), ", ".join(case.get("artifacts") or [])]
            for suite in report["suites"] for case in suite["cases"])
    return table(["WORK", "DEVICE", "STATUS", "TIME", "FAILURE", "ARTIFACTS"], rows)


def runs(client: Client, args: Namespace, out: Output) -> int:
    page = client.list_runs(status=args.status, team=args.team, limit=args.limit)
    return out.show(page, lambda p: runs_table(p["runs"]))


def run(client: Client, args: Namespace, out: Output) -> int:
    words: list[str] = args.words
    action = words[0] if words[0] in ACTIONS else None
    operands = words[1:] if action else words
    if len(operands) != 1:
        raise UsageError(f"`run {action or 'ID'}` takes one {'FILE' if action == 'submit' else 'ID'}")
    if args.wait and action not in ("submit", "rerun-failed"):
        raise UsageError("--wait goes with `run submit` and `run rerun-failed`")
    if args.junit is not None and action != "report":
        raise UsageError("--junit goes with `run report`")
    operand = operands[0]
    if action == "submit":
        return _submit(client, operand, args.wait, out)
    operand = client.resolve_run_id(operand)  # a unique prefix does, as for tasks
    if action == "cancel":
        return out.show(client.cancel_run(operand), run_line)
    if action == "rerun-failed":
        rerun = client.rerun_failed(operand)
        status = out.show(rerun, lambda r: f"{r['created']} rerun: {run_line(r['run'])}")
        if not args.wait:
            return status
        final = follow_run(client, operand, out.line, as_json=out.as_json)
        return 0 if final["status"] == wire.RunStatus.SUCCEEDED.value else 1
    if action == "report":
        if args.junit is None:
            return out.show(client.run_report(operand), report_text)
        xml = client.run_report_junit(operand)
        if args.junit == "-":
            sys.stdout.buffer.write(xml)
            return 0
        path = save(args.junit, xml)
        written = {"run_id": operand, "format": "junit", "size": len(xml), "path": str(path)}
        return out.show(written, lambda w: f"JUnit report of {w['run_id']} ({w['size']} bytes) written to {w['path']}")
    return out.show(client.get_run(operand), run_text)


_WHAT_A_RUN_FILE_IS = "a run file is the body of POST /api/v1/runs"


def _submit(client: Client, path: str, wait: bool, out: Output) -> int:
    as_yaml = path.endswith((".yaml", ".yml"))
    kind = "YAML" if as_yaml else "JSON"
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        body = parse_run_file(text, as_yaml=as_yaml)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", usage=False) from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not {kind}: not UTF-8 text; {_WHAT_A_RUN_FILE_IS}", usage=False) from None
    except RunFileError as exc:
        raise UsageError(f"{path} is not {kind}: {exc}; {_WHAT_A_RUN_FILE_IS}", usage=False) from None
    if not isinstance(body, dict):
        raise UsageError(f"{path} holds no {kind} object; {_WHAT_A_RUN_FILE_IS}", usage=False)
    created = client.create_run(body)
    if not wait:
        return out.show(created, lambda r: r["run_id"])
    if not out.as_json:
        out.line(created["run_id"])
    final = follow_run(client, created["run_id"], out.line, as_json=out.as_json)
    return 0 if final["status"] == wire.RunStatus.SUCCEEDED.value else 1


def follow_run(client: Client, run_id: str, emit: Callable[[str], None], *, as_json: bool = False) -> Json:
    """Print the run's counts, then again each time an event of it moves them, until it ends;
    return its final document."""
    shown: list[Any] = []

    def show(current: Json) -> None:
        state = (current["status"], current["counts"])
        if state != (shown[-1] if shown else None):
            shown.append(state)
            emit(json.dumps(current) if as_json else run_line(current))

    with client.feed(run_id=run_id) as feed:
        current = client.get_run(run_id)
        show(current)
        if current["status"] != wire.RunStatus.RUNNING.value:
            return current
        for event in feed:
            if event.get("type") == "progress":
                continue  # a step's progress moves no count
            current = client.get_run(run_id)
            show(current)
            if current["status"] != wire.RunStatus.RUNNING.value:
                return current
    raise TetherError("feed_ended", "the event feed ended")  # a Feed reconnects for ever
