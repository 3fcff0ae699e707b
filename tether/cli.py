"""The ``tether`` command: argparse in front of ``tether.commands``.

Configured by ``TETHER_URL`` and ``TETHER_TOKEN`` (or ``--url`` and ``--token``, which win).
Exit codes: 0 success; 1 the call failed, or the watched task did not succeed; 2 bad usage
(argparse's own, no URL or token, or a task id prefix that starts several ids). A task id may
be given as a unique prefix of it, as git takes a commit's (``Client.resolve_task_id``). A
failure the operator can expect (unauthorized, not found, a conflict, the coordinator down, an
output file that cannot be written) is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata

import wire
from tether import artifacts_cmd, commands, runs_cmd, session_cmd, teams_cmd, webhooks_cmd
from tether.arg_types import label, positive_int
from tether.client import Client
from tether.errors import TetherError

_TASK_STATUSES = wire.values(wire.TaskStatus)
_DEVICE_STATUSES = wire.values(wire.DeviceStatus)
_OPERATOR_SCOPES = wire.values(wire.OperatorScope)
TASK_ID_HELP = "a task id, or a unique prefix of one (t_1caa8b9e)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    url = getattr(args, "url", None) or os.environ.get("TETHER_URL")
    token = getattr(args, "token", None) or os.environ.get("TETHER_TOKEN")
    if not url:
        parser.error("no coordinator URL: set TETHER_URL or pass --url")
    if not token:
        parser.error("no token: set TETHER_TOKEN or pass --token")
    try:
        client = Client(url, token)
    except ValueError as exc:
        parser.error(str(exc))  # a URL without its scheme, a token with a space: usage, exit 2
    out = commands.Output(as_json=getattr(args, "json", False))
    try:
        with client:
            status: int = args.run(client, args, out)
            return status
    except TetherError as exc:
        print(f"tether: {exc.message} ({exc.code})", file=sys.stderr)
        return 2 if exc.code == "ambiguous_id" else 1  # the operator's to fix, as bad usage is
    except commands.CannotWrite as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 1
    except commands.UsageError as exc:  # as argparse's own: the command's usage line, then why
        command = getattr(args, "parser", parser)
        if exc.usage:
            command.print_usage(sys.stderr)
        print(f"{command.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tether tasks | head`: the reader has what it wanted
        sys.stderr.close()  # nothing more to say, and Python's own flush would complain
        return 1


def _version() -> str:
    """The installed package's version (``pyproject.toml``), as ``pip show tether`` gives it."""
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    # The connection and output options are accepted before or after the command
    # (`tether --json tasks`, `tether tasks --json`): every parser has them, none gives a
    # default (so a subcommand's absent option cannot overwrite a given one; and the parsers
    # share these action objects, so no set_defaults either), and main() reads them with getattr.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help="coordinator URL (default: $TETHER_URL)")
    common.add_argument("--token", default=argparse.SUPPRESS, help="operator token (default: $TETHER_TOKEN)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the API's JSON instead of tables")

    parser = argparse.ArgumentParser(prog="tether", parents=[common],
                                     description="Operate a Tether coordinator: tasks, hosts, devices, tokens.")
    parser.add_argument("--version", action="version", version=f"tether {_version()}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def command(name: str, run: commands.Command, help: str, *, add_help: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help, add_help=add_help)
        p.set_defaults(run=run, parser=p)  # a command's UsageError prints this parser's usage
        return p

    p = command("submit", commands.submit, "create a task and print its id")
    work = p.add_mutually_exclusive_group(required=True)
    work.add_argument("--goal", metavar="TEXT", help="a natural-language goal for the GUI agent")
    work.add_argument("--workflow", metavar="NAME", help="a named workflow")
    p.add_argument("--param", metavar="K=V", action="append", type=_param,
                   help="a workflow parameter (repeatable); K:=JSON for a number, list or object")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--device", metavar="ID", help="run on this device")
    where.add_argument("--driver", metavar="D", help="run on any device of this driver (with --label)")
    p.add_argument("--label", metavar="K=V", action="append", type=label, help="device label to match (repeatable)")
    p.add_argument("--max-attempts", metavar="N", type=positive_int)
    p.add_argument("--queue-timeout", metavar="S", type=positive_int, help="fail it if not assigned within S seconds")
    p.add_argument("--priority", metavar="N", type=int, help="-100..100, higher first (default 0)")
    p.add_argument("--team", metavar="T", help="the team it belongs to (a token with a team sets its own)")
    p.add_argument("--wait", action="store_true", help="follow it like `watch` until it ends")

    p = command("tasks", commands.tasks, "list tasks, newest first")
    p.add_argument("--status", choices=_TASK_STATUSES)
    p.add_argument("--host", metavar="H")
    p.add_argument("--device", metavar="D")
    p.add_argument("--team", metavar="T", help="only this team's tasks")
    p.add_argument("--run", metavar="R", dest="run_id",
                   help="only this run's tasks (a run id, or a unique prefix of one)")
    p.add_argument("--priority-min", metavar="N", type=int, help="only tasks of priority N or higher")
    p.add_argument("--limit", metavar="N", type=positive_int, default=50, help="at most N tasks (default 50)")
    for name, run, what in (("task", commands.task, "show a task, with why it waits"),
                            ("events", commands.events, "a task's history"),
                            ("watch", commands.watch, "follow a task live until it ends; exit 0 if it succeeded"),
                            ("cancel", commands.cancel, "cancel a task")):
        command(name, run, what).add_argument("id", metavar="ID", help=TASK_ID_HELP)

    command("hosts", commands.hosts, "list hosts")
    command("host", commands.host, "show a host").add_argument("id", metavar="ID")
    command("drain", commands.drain, "give a host no new work").add_argument("id", metavar="HOST")
    command("undrain", commands.undrain, "give a drained host work again").add_argument("id", metavar="HOST")
    command("revoke", commands.revoke, "revoke a host's credential").add_argument("id", metavar="HOST")

    p = command("devices", commands.devices, "list the pooled devices")
    p.add_argument("--host", metavar="H", help="a host id, or a hostname")
    p.add_argument("--driver", metavar="D")
    p.add_argument("--status", choices=_DEVICE_STATUSES)
    p = command("history", commands.history, "who ran what on a device, newest first")
    p.add_argument("id", metavar="DEVICE")
    p.add_argument("--limit", metavar="N", type=positive_int, help="at most N runs (default 100; 1,000 are kept)")
    p = command("disable", commands.disable, "give a device no new work")
    p.add_argument("id", metavar="DEVICE")
    p.add_argument("--reason", metavar="TEXT", required=True)
    command("enable", commands.enable, "give a disabled device work again").add_argument("id", metavar="DEVICE")
    command("forget", commands.forget, "un-enroll a managed host's device").add_argument("id", metavar="DEVICE")
    command("workflows", commands.workflows, "what the fleet can run, and where")

    p = command("tokens", commands.tokens, "list enrollment tokens; create or revoke one")
    tokens = p.add_subparsers(title="token commands", metavar="COMMAND")
    t = tokens.add_parser("create", parents=[common], help="create an enrollment token (its secret shown once)")
    t.set_defaults(run=commands.tokens_create)
    t.add_argument("--uses", metavar="N", type=positive_int, help="how many hosts may enroll with it (default 1)")
    t.add_argument("--ttl", metavar="S", type=positive_int, help="seconds it stays valid (default 3600)")
    t.add_argument("--label", metavar="K=V", action="append", type=label,
                   help="a label for the hosts it enrolls (repeatable)")
    t = tokens.add_parser("revoke", parents=[common], help="revoke an enrollment token")
    t.set_defaults(run=commands.tokens_revoke)
    t.add_argument("id", metavar="ID")

    p = command("operator-tokens", commands.operator_tokens,
                "list operator tokens (admin only); create or revoke one")
    tokens = p.add_subparsers(title="operator token commands", metavar="COMMAND")
    t = tokens.add_parser("create", parents=[common], help="mint an operator token (its secret shown once)")
    t.set_defaults(run=commands.operator_tokens_create)
    t.add_argument("name", metavar="NAME", help="who or what holds it (wall-screen, ci, on-call-alice)")
    t.add_argument("--scope", metavar="S", action="append", required=True, choices=_OPERATOR_SCOPES,
                   help=f"what it may do (repeatable): {', '.join(_OPERATOR_SCOPES)}")
    t.add_argument("--ttl", metavar="S", type=positive_int, help="seconds it stays valid (default: the coordinator's)")
    t = tokens.add_parser("revoke", parents=[common], help="revoke an operator token")
    t.set_defaults(run=commands.operator_tokens_revoke)
    t.add_argument("id", metavar="ID")
    command("me", commands.me, "who this token is: its name, scopes and expiry")
    command("teams", teams_cmd.teams, "every team's share of the fleet")
    p = command("team", teams_cmd.team_set, "set a team's share (admin only)")
    team = p.add_subparsers(title="team commands", metavar="COMMAND", required=True)
    t = team.add_parser("set", parents=[common], help="set a team's weight or cap on devices")
    t.set_defaults(run=teams_cmd.team_set)
    teams_cmd.add_set_arguments(t)
    runs_cmd.add_runs_arguments(command("runs", runs_cmd.runs, "list runs, newest first"))
    runs_cmd.add_run_arguments(command(
        "run", runs_cmd.run, "a run: submit FILE [--wait], show ID, cancel ID, rerun-failed ID, "
                             "report ID [--junit FILE]", add_help=False))  # its -h knows each action
    webhooks_cmd.add_arguments(command("webhooks", webhooks_cmd.webhooks,
                                       "list webhooks (admin only); add or remove one, or see its deliveries"),
                               common)
    artifacts_cmd.add_arguments(command("artifacts", artifacts_cmd.artifacts,
                                        "list a task's artifacts (screenshots, log); save one with NAME"))
    session_cmd.add_arguments(command("session", session_cmd.session_start,
                                      "live sessions: start, do ACTION, end, log"), common)
    return parser


# -- argument types (a ValueError or ArgumentTypeError is argparse's usage error, exit 2) ------


def _param(text: str) -> tuple[str, object]:
    """``K=V`` (a string) or ``K:=JSON`` (a number, list, object...)."""
    import json

    key, sep, value = text.partition("=")
    if key.endswith(":"):
        try:
            return key[:-1], json.loads(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not JSON after {key}=: {value!r}") from None
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V or K:=JSON, got {text!r}")
    return key, value


if __name__ == "__main__":
    sys.exit(main())
