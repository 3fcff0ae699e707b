"""The command line as a newcomer met it (issue 58), against a real coordinator: tasks by team, run
and priority with those columns; `tether task` naming its team, priority and run; a new team
warned of; usage errors as argparse's (exit 2 with the usage line, never "warning:"); `run
submit --help` its own; `history --limit`; a URL without its scheme; a refused connection
in words; webhook ids by prefix; bad YAML in one line with its line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import CoordinatorProcess
from tests.tether.conftest import Result, tether, tether_here
from tests.webhook_receiver import ALLOW_RECEIVERS_ENV
from tether.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def coordinator_settings() -> dict[str, str]:
    return dict(ALLOW_RECEIVERS_ENV)


def test_tasks_by_team_run_and_priority_and_a_task_names_its_team_priority_and_run(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.call("PUT", "/api/v1/teams/cli-alpha", json={"weight": 1})
    low = coordinator.create_task(goal="Low", selector={"driver": "adb"}, team="cli-alpha", priority=5,
                                  queue_timeout_s=600)
    high = coordinator.create_task(goal="High", selector={"driver": "adb"}, team="cli-alpha", priority=50,
                                   queue_timeout_s=600)
    run = coordinator.call("POST", "/api/v1/runs", json={"name": "cli", "team": "cli-beta", "tasks": [
        {"kind": "goal", "goal": "In a run", "selector": {"driver": "adb"}, "queue_timeout_s": 600}]})

    listed = tether_here(coordinator, capsys, "tasks", "--team", "cli-alpha")
    assert listed.code == 0, listed.err
    header, *rows = listed.out.splitlines()
    assert header.split()[:5] == ["TASK", "STATUS", "ATTEMPT", "TEAM", "PRIORITY"]
    assert [row.split()[0] for row in rows] == [high["task_id"], low["task_id"]]
    assert [row.split()[3:5] for row in rows] == [["cli-alpha", "50"], ["cli-alpha", "5"]]
    above = tether_here(coordinator, capsys, "--json", "tasks", "--team", "cli-alpha", "--priority-min", "10")
    assert [t["task_id"] for t in above.json()["tasks"]] == [high["task_id"]]
    in_run = tether_here(coordinator, capsys, "--json", "tasks", "--run", run["run_id"][:8])
    [task] = in_run.json()["tasks"]
    assert task["run_id"] == run["run_id"] and task["team"] == "cli-beta"

    shown = tether_here(coordinator, capsys, "task", task["task_id"])
    fields = {line[:16].strip(): line[16:] for line in shown.out.splitlines()}
    assert (fields["team"], fields["priority"]) == ("cli-beta", "0")
    assert fields["run"].startswith(run["run_id"]) and f"tether run {run['run_id']}" in fields["run"]


def test_submit_warns_of_a_new_team_and_not_of_a_known_one(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.call("PUT", "/api/v1/teams/cli-known", json={"weight": 2})
    base = ("submit", "--goal", "x", "--driver", "adb", "--queue-timeout", "600")
    typo = tether_here(coordinator, capsys, *base, "--team", "cli-knwon")
    assert typo.code == 0 and "team 'cli-knwon' is new" in typo.err
    known = tether_here(coordinator, capsys, *base, "--team", "cli-known")
    assert known.code == 0 and "is new" not in known.err


def usage_error(result: Result, command: str) -> None:
    assert result.code == 2, result
    assert result.err.startswith(f"usage: tether {command}"), result.err
    assert f"tether {command}: error: " in result.err and "warning:" not in result.err, result.err


def test_usage_errors_are_exit_2_with_the_command_s_usage_line(coordinator: CoordinatorProcess,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    usage_error(tether_here(coordinator, capsys, "run", "cancel", "r_1", "--wait"), "run")
    usage_error(tether_here(coordinator, capsys, "run", "report"), "run")
    usage_error(tether_here(coordinator, capsys, "team", "set", "cli-alpha"), "team")
    with pytest.raises(SystemExit) as exited:  # argparse's own, for comparison: the same shape
        main(["--url", coordinator.url, "--token", "t", "history", "phone-1", "--limit", "0"])
    assert exited.value.code == 2

    helped = tether(coordinator, "run", "submit", "--help")
    assert helped.code == 0 and helped.out.startswith("usage: tether run submit FILE [--wait]"), helped
    assert "--junit" not in helped.out


def test_a_bad_yaml_run_file_is_one_line_with_its_line_and_column(
        coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "run.yaml"
    bad.write_text("name: nightly\ntasks:\n  - kind: goal\n   goal: [unclosed\n")
    result = tether_here(coordinator, capsys, "run", "submit", str(bad))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result
    assert "line 4, column 4" in result.err and "Traceback" not in result.err


def test_connection_problems_are_said_in_words(coordinator: CoordinatorProcess,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--url", "127.0.0.1:8000", "--token", "t", "hosts"])
    assert exited.value.code == 2 and "http://127.0.0.1:8000" in capsys.readouterr().err
    refused = main(["--url", "http://127.0.0.1:9", "--token", "t", "hosts"])
    err = capsys.readouterr().err
    assert refused == 1 and "connection refused" in err and "ConnectError" not in err, err


def test_history_limit_and_webhook_ids_by_prefix(coordinator: CoordinatorProcess,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.heartbeat("fleet-1", ["cli-phone"])
    for _ in range(3):
        task = coordinator.create_task(goal="x", device_id="cli-phone")
        lease = coordinator.claim("fleet-1")
        assert lease["task_id"] == task["task_id"]
        coordinator.api.post("/internal/v1/hosts/fleet-1/results", headers=coordinator.host_headers("fleet-1"),
                             json={"task_id": task["task_id"], "attempt": 1, "lease_id": lease["lease_id"],
                                   "status": "succeeded", "failure_reason": None, "metadata": {}})
    limited = tether_here(coordinator, capsys, "--json", "history", "cli-phone", "--limit", "2")
    assert limited.code == 0 and len(limited.json()["runs"]) == 2, limited

    hook = coordinator.call("POST", "/api/v1/webhooks", json={"url": "http://127.0.0.1:9/hook",
                                                              "events": ["task.ended"]})
    deliveries = tether_here(coordinator, capsys, "webhooks", "deliveries", hook["id"][:10])
    assert deliveries.code == 0, deliveries
    removed = tether_here(coordinator, capsys, "webhooks", "remove", hook["id"][:10])
    assert removed.code == 0 and hook["id"] in removed.out, removed


def test_labels_an_agent_puts_on_every_device_show_as_its_host_s(coordinator: CoordinatorProcess,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # HOST_AGENT_LABELS labels every device the agent reports: `tether hosts` shows them on the host.
    coordinator.heartbeat("drain-1", [{"device_id": f"lab-{n}", "labels": {"site": "berlin", "slot": str(n)}}
                                      for n in range(2)])
    row = next(line for line in tether_here(coordinator, capsys, "hosts").out.splitlines()
               if line.startswith("drain-1 "))
    assert "site=berlin" in row and "slot" not in row, row
