"""``tether artifacts TASK`` lists a task's artifacts (every attempt's); ``tether artifacts TASK
NAME [-o FILE] [--attempt N]`` saves one artifact's bytes: to FILE, or to stdout (a pipe or a
redirection; ``-o -`` too). Bytes that are not text are never written to a terminal, where they
would garble it: that is refused (exit 2) with a hint to use ``-o``. The bytes are read whole
before FILE is opened (an artifact is at most 10 MiB), so a failed read leaves no partial file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from argparse import Namespace
from typing import BinaryIO

from tether import render
from tether.arg_types import positive_int
from tether.client import Client
from tether.commands import Output, save

_STDOUT = "-"
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def add_arguments(command: argparse.ArgumentParser) -> None:
    """The command's arguments, on its parser (made in cli.py like every other command's)."""
    command.add_argument("task", metavar="TASK",
                         help="the task whose artifacts to list (its id, or a unique prefix of it)")
    command.add_argument("name", metavar="NAME", nargs="?", help="save this artifact's bytes")
    command.add_argument("-o", "--output", metavar="FILE",
                         help="where NAME's bytes go (default: stdout, unless it is a terminal)")
    command.add_argument("--attempt", metavar="N", type=positive_int,
                         help="NAME of this attempt (default: the latest attempt that has it)")


def artifacts(client: Client, args: Namespace, out: Output) -> int:
    args.task = client.resolve_task_id(args.task)
    if args.name is None:
        if args.output is not None or args.attempt is not None:
            return _usage("-o and --attempt go with NAME: tether artifacts TASK NAME -o FILE")
        return out.show(client.list_artifacts(args.task), lambda a: render.artifacts_table(a["artifacts"]))
    return _save(client, args, out)


def _save(client: Client, args: Namespace, out: Output) -> int:
    to_stdout = args.output in (None, _STDOUT)
    stdout = sys.stdout.buffer
    data = client.get_artifact(args.task, args.name, attempt=args.attempt)
    if to_stdout:
        if stdout.isatty() and not _is_text(data):
            return _usage(f"{args.name} is not text and stdout is a terminal: give -o FILE, or redirect")
        _write(stdout, data)
        return 0
    path = save(args.output, data)
    saved = {"task_id": args.task, "name": args.name, "attempt": args.attempt, "size": len(data),
             "path": str(path)}
    if out.as_json:
        out.line(json.dumps(saved))
    else:
        out.line(f"{args.name}: {render.size(len(data))} saved to {path}")
    return 0


def _write(stream: BinaryIO, data: bytes) -> None:
    sys.stdout.flush()  # nothing printed before may come after the bytes
    stream.write(data)
    stream.flush()


def _is_text(data: bytes) -> bool:
    """UTF-8 without control characters other than tab, line feed and carriage return: safe to
    show on a terminal as it is."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(data) is None


def _usage(message: str) -> int:
    print(f"tether artifacts: {message}", file=sys.stderr)
    return 2
