"""Runs from the command line, against a real coordinator and a real agent: ``tether run submit FILE
--wait`` (exit 0 only if the run succeeded), ``tether runs``, ``tether run ID``, ``tether run
cancel``, ``tether run rerun-failed`` and ``tether run report --junit``, as a CI job uses them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from junitparser import Failure, JUnitXml

from tests.support import CoordinatorProcess, Process
from tests.tether.conftest import tether, tether_here

pytestmark = pytest.mark.e2e


def _run_file(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_a_matrix_submitted_and_waited_for_exits_0_when_every_task_succeeded(
        coordinator: CoordinatorProcess, runner: Process, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    body = {"name": "smoke", "matrix": {"work": [{"kind": "workflow", "workflow": {"name": "steps"}}],
                                        "devices": {"driver": "sim"}}}
    done = tether(coordinator, "run", "submit", _run_file(tmp_path, body), "--wait")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    run_id = lines[0]
    assert run_id.startswith("r_")
    assert lines[-1] == f"{run_id}  succeeded  4 succeeded"
    assert len(lines) > 2  # the counts moved while it ran
    shown = tether_here(coordinator, capsys, "run", run_id)
    assert shown.code == 0 and "steps" in shown.out and "run-ok" in shown.out
    listed = tether_here(coordinator, capsys, "--json", "runs", "--status", "succeeded").json()
    assert run_id in [r["run_id"] for r in listed["runs"]]


def test_a_failed_run_exits_1_and_its_junit_report_and_rerun_say_what_failed(
        coordinator: CoordinatorProcess, runner: Process, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    body = {"tasks": [{"kind": "workflow", "workflow": {"name": "broken"}, "device_id": "run-fail",
                       "max_attempts": 1},
                      {"kind": "workflow", "workflow": {"name": "steps"}, "device_id": "run-ok"}]}
    done = tether(coordinator, "run", "submit", _run_file(tmp_path, body), "--wait")
    assert done.code == 1, done.err
    run_id = done.out.splitlines()[0]
    assert done.out.splitlines()[-1] == f"{run_id}  failed  1 succeeded, 1 failed"
    junit = tmp_path / "report.xml"
    reported = tether_here(coordinator, capsys, "run", "report", run_id, "--junit", str(junit))
    assert reported.code == 0, reported.err
    cases = {case.name: case for suite in JUnitXml.fromfile(str(junit)) for case in suite}
    assert set(cases) == {"run-fail", "run-ok"}
    assert any(isinstance(r, Failure) for r in cases["run-fail"].result) and cases["run-ok"].is_passed
    table = tether_here(coordinator, capsys, "run", "report", run_id)
    assert table.code == 0 and "run-fail" in table.out and "failed" in table.out
    rerun = tether_here(coordinator, capsys, "run", "rerun-failed", run_id)
    assert rerun.code == 0 and rerun.out.startswith("1 rerun:")


def test_a_run_cancelled_from_the_command_line_ends_cancelled(
        coordinator: CoordinatorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = {"tasks": [{"kind": "goal", "goal": "wait", "device_id": "no-such-phone"}]}
    run_id = tether_here(coordinator, capsys, "run", "submit", _run_file(tmp_path, body)).out.strip()
    cancelled = tether_here(coordinator, capsys, "run", "cancel", run_id)
    assert cancelled.code == 0 and cancelled.out.strip() == f"{run_id}  cancelled  1 cancelled"


@pytest.mark.parametrize("args", [("run",), ("run", "cancel"), ("run", "r_x", "--wait"),
                                  ("run", "cancel", "r_x", "--junit", "x.xml"), ("run", "submit", "/no/such.json")])
def test_a_run_command_said_wrong_is_a_usage_error(coordinator: CoordinatorProcess, args: tuple[str, ...]) -> None:
    done = tether(coordinator, *args)
    assert done.code == 2 and "Traceback" not in done.err


def test_a_run_file_that_is_not_json_is_a_usage_error(coordinator: CoordinatorProcess, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.json"
    path.write_text("name: nightly\n")
    done = tether_here(coordinator, capsys, "run", "submit", str(path))
    assert done.code == 2 and "not JSON" in done.err
    broken = tmp_path / "run.yaml"
    broken.write_text("name: [nightly\n")
    done = tether_here(coordinator, capsys, "run", "submit", str(broken))
    assert done.code == 2 and "not YAML" in done.err


def test_a_run_file_in_yaml_is_the_same_run(coordinator: CoordinatorProcess, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.yml"
    path.write_text("name: nightly-yaml\ntasks:\n  - kind: goal\n    goal: Open Settings\n"
                    "    device_id: no-such-phone\n")
    run_id = tether_here(coordinator, capsys, "run", "submit", str(path)).out.strip()
    run = coordinator.call("GET", f"/api/v1/runs/{run_id}")
    assert run["name"] == "nightly-yaml" and run["counts"]["queued"] == 1


def test_the_clients_run_methods_speak_the_runs_routes(coordinator: CoordinatorProcess) -> None:
    from tests.support import ADMIN
    from tether import Client, TetherError

    with Client(coordinator.url, ADMIN, timeout=5) as client:
        body = {"tasks": [{"kind": "goal", "goal": f"g{i}", "device_id": "paged-run"} for i in range(2)]}
        made = [client.create_run({**body, "name": f"client-{i}"}) for i in range(2)]
        assert client.get_run(made[0]["run_id"])["counts"]["queued"] == 2
        page = client.list_runs(limit=1)
        assert page["runs"][0]["run_id"] == made[-1]["run_id"] and page["next_cursor"] is not None
        listed = [r["run_id"] for r in client.iter_runs(page_size=1)]
        assert listed.index(made[1]["run_id"]) < listed.index(made[0]["run_id"])
        tasks = client.list_tasks(run_id=made[0]["run_id"])["tasks"]
        assert {t["goal"] for t in tasks} == {"g0", "g1"}
        with client.feed(run_id=made[0]["run_id"]) as feed:
            assert client.cancel_run(made[0]["run_id"])["status"] == "cancelled"
            event = next(iter(feed))
            assert event["run_id"] == made[0]["run_id"]
        assert client.rerun_failed(made[0]["run_id"])["created"] == 0
        report = client.run_report(made[0]["run_id"])
        assert [case["status"] for suite in report["suites"] for case in suite["cases"]] == ["cancelled"] * 2
        assert client.run_report_junit(made[0]["run_id"]).startswith(b"<?xml")
        with pytest.raises(TetherError) as raised:
            client.get_run("../runs")
        assert raised.value.code == "invalid_request"
