"""Every ``tether`` command that writes a file it is given (an option whose value is a FILE) meets
a path it cannot write as a person would: one line naming the path and why, exit 1, no traceback
and no file. The commands are found from the parser, so a new one that writes a file is covered
here or fails the test."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ADMIN, CoordinatorProcess, Process
from tests.tether.conftest import RUNNER_DEVICES, Host, tether
from tether import Client
from tether.cli import build_parser

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def coordinator_settings() -> dict[str, str]:
    return {"COORDINATOR_LEASE_TTL_S": "30"}  # the test is the host: a lease that outlasts its calls


def _writing_options(parser: argparse.ArgumentParser, command: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """(command words..., option) of every option whose value is a file the command writes."""
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk of its parsers
        subcommands = action.choices if isinstance(action.choices, dict) else {}
        if subcommands and all(isinstance(sub, argparse.ArgumentParser) for sub in subcommands.values()):
            for name, sub in subcommands.items():
                yield from _writing_options(sub, (*command, name))
        elif action.option_strings and action.metavar == "FILE":
            yield (*command, action.option_strings[0])


@pytest.fixture(scope="module")
def outputs(coordinator: CoordinatorProcess, runner: Process) -> Iterator[dict[tuple[str, ...], list[str]]]:
    """Each file-writing command, ready to run but for its FILE: an artifact there to save, a run
    there to report, a live session on one of the runner's phones to take a screen of."""
    with contextlib.closing(Host(coordinator, "out-1")) as host:
        lease = host.run_task()
        host.upload(lease, "log.txt", b"step 0: home\n", "text/plain")
        host.succeed(lease)
    run = coordinator.api.post("/api/v1/runs", json={"name": "outputs", "tasks": [
        {"kind": "goal", "goal": "x", "device_id": "out-1"}]})
    assert run.status_code == 201, run.text
    with Client(coordinator.url, ADMIN) as client, client.start_session(device_id=RUNNER_DEVICES[0]) as session:
        yield {
            ("artifacts", "-o"): ["artifacts", lease["task_id"], "log.txt", "-o"],
            ("run", "--junit"): ["run", "report", run.json()["run_id"], "--junit"],
            ("session", "do", "-o"): ["session", "do", session.task_id, "observe", "-o"],
        }


def test_every_command_that_writes_a_file_is_covered_here(outputs: dict[tuple[str, ...], Any]) -> None:
    assert set(_writing_options(build_parser())) == set(outputs)


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_a_path_that_cannot_be_written_is_one_line_and_exit_1(coordinator: CoordinatorProcess, tmp_path: Path,
                                                              outputs: dict[tuple[str, ...], list[str]],
                                                              where: str) -> None:
    path = tmp_path / "nonexistent" / "x.out" if where == "missing folder" else tmp_path
    for command, args in outputs.items():
        result = tether(coordinator, *args, str(path))
        assert result.code == 1, (command, result)
        assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, (command, result.err)
        assert result.err.startswith(f"tether: cannot write {path}: "), (command, result.err)
        assert result.out == "", (command, result.out)
    assert not (tmp_path / "nonexistent").exists()
