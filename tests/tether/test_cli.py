"""The ``tether`` command, every command of the contract's table, run as a process against a
real coordinator and a real agent: its output (tables and ``--json``) and its exit code."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from tests.support import ADMIN, CoordinatorProcess, Process, child_env, free_port
from tests.tether.conftest import HOSTS, tether, tether_here
from tether.cli import main

pytestmark = pytest.mark.e2e


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# -- usage and expected failures ------------------------------------------------------------


def test_version_is_the_installed_package_s(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tether", "--version"], cwd=tmp_path, env=child_env(),
                            capture_output=True, text=True, timeout=30, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"tether {metadata.version('tether')}\n", "")


def test_bad_usage_exits_2(coordinator: CoordinatorProcess) -> None:
    for args in (["frobnicate"], ["submit", "--goal", "x"]):  # no such command; no target
        result = tether(coordinator, *args)
        assert result.code == 2, result
        assert "usage: tether" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize("args", [
    [],
    ["submit", "--goal", "x", "--workflow", "w", "--device", "d"],  # goal and workflow
    ["disable", "some-device"],  # no --reason
    ["tasks", "--status", "sleeping"],
    ["tokens", "create", "--uses", "0"],
    ["submit", "--workflow", "w", "--param", "novalue", "--device", "d"],
    ["submit", "--workflow", "w", "--param", "n:=nojson", "--device", "d"],
])
def test_more_bad_usage_exits_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # In-process (argparse decides before any call), to keep the folder fast.
    with pytest.raises(SystemExit) as exited:
        main(["--url", "http://127.0.0.1:9", "--token", "t", *args])
    assert exited.value.code == 2
    assert "usage: tether" in capsys.readouterr().err


def test_no_url_is_bad_usage(coordinator: CoordinatorProcess) -> None:
    result = tether(coordinator, "tasks", TETHER_URL="")
    assert result.code == 2
    assert "TETHER_URL" in result.err


def test_wrong_token_is_one_line_and_never_shows_the_token(coordinator: CoordinatorProcess) -> None:
    token = "wrong-" + secrets.token_hex(8)
    result = tether(coordinator, "tasks", "--token", token)
    assert result.code == 1 and result.out == ""
    assert "(unauthorized)" in one_line(result.err)
    assert token not in result.err


def test_unknown_task_is_one_line_not_found(coordinator: CoordinatorProcess) -> None:
    for command in ("task", "watch"):
        result = tether(coordinator, command, "t_nobody")
        assert result.code == 1, (command, result)
        assert one_line(result.err).endswith("(not_found)")


def test_coordinator_down_is_one_line_unavailable(coordinator: CoordinatorProcess) -> None:
    for args in (["hosts"], ["watch", "t_any"]):
        result = tether(coordinator, *args, "--url", f"http://127.0.0.1:{free_port()}")
        assert result.code == 1, (args, result)
        line = one_line(result.err)
        assert line.startswith("tether: cannot reach the coordinator at http://127.0.0.1:")
        assert line.endswith("(unavailable)")


# -- tasks, run by a real agent ---------------------------------------------------------------


def test_submit_wait_shows_progress_and_exits_0_when_it_succeeds(coordinator: CoordinatorProcess, runner: Process,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    result = tether(coordinator, "submit", "--workflow", "steps", "--device", "run-ok", "--wait")
    assert result.code == 0, result
    lines = result.out.splitlines()
    task_id = lines[0]
    assert task_id.startswith("t_")
    assert f"task {task_id} attempt 1/3" in lines[1]
    # After the time ("16:04:24 +01:00", the date too on another day), however far it got when read.
    assert re.sub(r"^.*? [+-]\d\d:\d\d\s+", "", lines[1]).split()[0] in ("queued", "assigned", "running")
    # The device then its host, each by name with its id after it when they differ (issue 42):
    # run-ok is a static host's device, named by its id; the runner reports this machine's name.
    assert re.search(r" on run-ok at \S+ \(runner\)", result.out), result.out
    progress = [line for line in lines if " progress " in line]
    assert progress and all("step " in line for line in progress), result.out
    assert " result " in lines[-2] and "succeeded" in lines[-2]
    assert " succeeded " in lines[-1] and task_id in lines[-1]
    # The agent's screenshots and log as they arrived: every one stored (all before its result
    # ended the lease; uploads are best effort, so which ones is the agent's tests' business).
    arrived = [line.split(" artifact ")[1].split()[0] for line in lines if " artifact " in line]
    listing = tether(coordinator, "artifacts", task_id)
    assert listing.code == 0 and sorted(row.split()[0] for row in listing.out.splitlines()[1:]) == sorted(arrived)

    # ... and what it left: the task, its history, the device's runs, the listing.
    shown = tether(coordinator, "task", task_id)
    assert shown.code == 0
    assert "\nstatus    succeeded\n" in shown.out
    assert '\nresult    succeeded {"steps": 4' in shown.out
    assert "workflow steps" in shown.out and "device=run-ok" in shown.out

    history = tether(coordinator, "events", task_id)
    assert history.code == 0
    assert history.out.splitlines()[0].split() == ["AT", "TYPE", "ATTEMPT", "HOST", "DEVICE", "STATUS", "REASON",
                                                    "ACTOR"]
    types = [line.split()[2] for line in history.out.splitlines()[1:]]
    assert types == ["created", "assigned", "claimed", "result"]
    events = tether_here(coordinator, capsys, "events", task_id, "--json").json()["events"]
    assert [e["type"] for e in events] == types

    runs = tether(coordinator, "history", "run-ok")
    assert runs.code == 0
    assert runs.out.splitlines()[0].split() == ["TASK", "ATTEMPT", "HOST", "STARTED", "ENDED", "OUTCOME"]
    assert task_id in runs.out and "succeeded" in runs.out

    conflict = tether_here(coordinator, capsys, "cancel", task_id)  # it succeeded: too late
    assert conflict.code == 1 and one_line(conflict.err).endswith("(task_terminal)")

    listed = tether(coordinator, "tasks", "--device", "run-ok", "--status", "succeeded")
    assert listed.code == 0
    assert listed.out.splitlines()[0].split()[:3] == ["TASK", "STATUS", "ATTEMPT"]
    assert any(line.startswith(task_id) and "succeeded" in line for line in listed.out.splitlines())


def test_watch_exits_1_when_the_task_fails(coordinator: CoordinatorProcess, runner: Process) -> None:
    submitted = tether(coordinator, "submit", "--workflow", "broken", "--device", "run-fail", "--max-attempts", "1")
    assert submitted.code == 0, submitted
    task_id = submitted.out.strip()
    result = tether(coordinator, "watch", task_id)
    assert result.code == 1, result
    assert result.err == ""
    last = result.out.splitlines()[-1]
    assert " failed " in last and task_id in last


def test_a_watch_of_a_finished_task_shows_every_artifact_then_the_task(
        coordinator: CoordinatorProcess, runner: Process, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 42: a watch begun as the task ended showed only the artifacts uploaded after it began.
    task_id = coordinator.create_task(kind="workflow", workflow={"name": "broken", "params": {}},
                                      device_id="run-fail", max_attempts=1)["task_id"]
    coordinator.wait_task(task_id)
    stored = tether_here(coordinator, capsys, "--json", "artifacts", task_id).json()["artifacts"]
    assert stored, "the failed run's final screen and log"
    watched = tether_here(coordinator, capsys, "watch", task_id)
    assert watched.code == 1, watched
    lines = watched.out.splitlines()
    shown = [line.split(" artifact ")[1].split()[0] for line in lines if " artifact " in line]
    assert shown == [a["name"] for a in stored], watched.out
    assert len(lines) == len(stored) + 1 and " failed " in lines[-1] and task_id in lines[-1]


def test_watch_follows_a_running_task_to_success(coordinator: CoordinatorProcess, runner: Process) -> None:
    # The task waits (its device disabled) until the watch is following it, so a watch that starts
    # late cannot miss the run: starting an interpreter can outlast the whole workflow.
    assert tether(coordinator, "disable", "run-watch", "--reason", "held for the watch").code == 0
    task_id = tether(coordinator, "submit", "--workflow", "steps", "--device", "run-watch").out.strip()
    env = child_env(TETHER_URL=coordinator.url, TETHER_TOKEN=ADMIN)
    with subprocess.Popen([sys.executable, "-m", "tether", "watch", task_id], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as watch:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the watch has read the task: it follows the feed from here
        assert tether(coordinator, "enable", "run-watch").code == 0
        rest, err = watch.communicate(timeout=30)
    lines = [first, *rest.splitlines()]
    assert watch.returncode == 0, (lines, err)
    assert any(" progress " in line for line in lines), lines
    assert " succeeded " in lines[-1]


def test_watch_json_is_the_task_then_the_feed_then_the_task(coordinator: CoordinatorProcess, runner: Process) -> None:
    result = tether(coordinator, "submit", "--workflow", "steps", "--param", "ms:=100", "--device", "run-wait",
                    "--wait", "--json")
    assert result.code == 0, result
    lines = [json.loads(line) for line in result.out.splitlines()]
    first, events, last = lines[0], lines[1:-1], lines[-1]
    assert first["task_id"] == last["task_id"] and last["status"] == "succeeded"
    assert first["workflow"] == {"name": "steps", "params": {"ms": 100}}
    progress = [e for e in events if e["type"] == "progress"]
    assert progress and {"step_index", "status", "summary", "attempt", "host_id", "device_id"} <= progress[0].keys()
    assert all(e["task_id"] == first["task_id"] for e in events)


def test_a_queued_task_says_why_it_waits_and_can_be_cancelled(coordinator: CoordinatorProcess) -> None:
    task_id = tether(coordinator, "submit", "--goal", "Open Settings", "--device", "nowhere-1").out.strip()

    shown = tether(coordinator, "task", task_id)
    assert shown.code == 0
    fields = dict(line.split(None, 1) for line in shown.out.splitlines() if len(line.split(None, 1)) == 2)
    assert fields["status"] == "queued"
    assert fields["waiting"] == "no_matching_device"
    assert fields["candidates"].startswith("matching 0, busy 0")
    as_json = tether(coordinator, "task", task_id, "--json").json()
    assert as_json["waiting_reason"] == "no_matching_device" and as_json["candidates"]["matching"] == 0

    listed = tether(coordinator, "tasks", "--status", "queued", "--device", "nowhere-1", "--json").json()
    assert [t["task_id"] for t in listed["tasks"]] == [task_id]
    table = tether(coordinator, "tasks", "--status", "queued", "--limit", "5")
    assert any(line.startswith(task_id) and "no_matching_device" in line for line in table.out.splitlines())

    cancelled = tether(coordinator, "cancel", task_id)
    assert (cancelled.code, cancelled.out) == (0, f"task {task_id}: cancelled\n")

    watched = tether(coordinator, "watch", task_id)  # over already: the task, once, and exit 1
    assert watched.code == 1
    assert len(watched.out.splitlines()) == 1 and " cancelled " in watched.out


# -- hosts ------------------------------------------------------------------------------------


def test_hosts_drain_and_undrain(coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.heartbeat("drain-1", ["dr-1"], agent={"hostname": "bench-7"})
    hosts = tether(coordinator, "hosts")
    assert hosts.code == 0
    assert hosts.out.splitlines()[0].split()[:5] == ["HOST", "HOSTNAME", "KIND", "STATE", "DEVICES"]
    row = next(line.split() for line in hosts.out.splitlines() if line.startswith("drain-1 "))
    assert row[:5] == ["drain-1", "bench-7", "static", "online", "1"]
    assert max(len(line) for line in hosts.out.splitlines()) <= 100, "the table stays narrow"
    listed = tether_here(coordinator, capsys, "hosts", "--json").json()["hosts"]
    assert {h["host_id"] for h in listed} >= {"drain-1", "runner"}

    shown = tether(coordinator, "host", "drain-1")
    assert shown.code == 0 and "online" in shown.out and "static" in shown.out

    drained = tether(coordinator, "drain", "drain-1")
    assert (drained.code, drained.out) == (0, "host drain-1: draining, online\n")
    assert tether_here(coordinator, capsys, "host", "drain-1", "--json").json()["draining"] is True
    row = next(line.split() for line in tether_here(coordinator, capsys, "hosts").out.splitlines()
               if line.startswith("drain-1 "))
    assert row[3] == "draining"
    undrained = tether(coordinator, "undrain", "drain-1")
    assert (undrained.code, undrained.out) == (0, "host drain-1: accepting work, online\n")


def test_revoke_a_host(coordinator: CoordinatorProcess) -> None:
    coordinator.heartbeat("revoke-1", ["rv-1"])
    result = tether(coordinator, "revoke", "revoke-1")
    assert (result.code, result.out) == (0, "host revoke-1: revoked, offline\n")
    response = httpx.put(f"{coordinator.url}/internal/v1/hosts/revoke-1/heartbeat", json={"devices": []},
                         headers={"authorization": f"Bearer {HOSTS['revoke-1']}"})
    assert response.status_code == 401


# -- devices ----------------------------------------------------------------------------------


def test_devices_disable_and_enable(coordinator: CoordinatorProcess, capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.heartbeat("fleet-1", [{"device_id": d, "labels": {"rack": "r1"}} for d in ("fl-1", "fl-2")],
                          agent={"hostname": "bench-9"})
    table = tether(coordinator, "devices", "--host", "fleet-1")
    assert table.code == 0
    lines = table.out.splitlines()
    assert lines[0].split()[:5] == ["DEVICE", "NAME", "HOST", "DRIVER", "STATUS"]
    # HOST: the host's name, then its id (issue 42)
    assert [line.split()[:6] for line in lines[1:]] == [["fl-1", "fl-1", "bench-9", "(fleet-1)", "sim", "available"],
                                                        ["fl-2", "fl-2", "bench-9", "(fleet-1)", "sim", "available"]]
    assert "rack=r1" in lines[1]
    # --host takes the host's hostname as well as its id
    by_name = tether_here(coordinator, capsys, "devices", "--host", "bench-9").out.splitlines()
    assert [line.split()[0] for line in by_name[1:]] == ["fl-1", "fl-2"]
    assert tether_here(coordinator, capsys, "devices", "--host", "no-such-host").out.splitlines()[1:] == []
    found = tether(coordinator, "devices", "--driver", "sim", "--status", "available", "--json").json()
    assert {"fl-1", "fl-2"} <= {d["device_id"] for d in found["devices"]} and found["next_cursor"] is None

    disabled = tether(coordinator, "disable", "fl-1", "--reason", "cracked screen")
    assert (disabled.code, disabled.out) == (0, "device fl-1: disabled (cracked screen)\n")
    row = next(line for line in tether_here(coordinator, capsys, "devices", "--host", "fleet-1").out.splitlines()
               if line.startswith("fl-1 "))
    assert "disabled (cracked screen)" in row
    enabled = tether(coordinator, "enable", "fl-1", "--json")
    assert enabled.code == 0 and enabled.json()["disabled"] is False


def test_workflows_shows_what_the_fleet_can_run(coordinator: CoordinatorProcess,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    coordinator.heartbeat("wf-1", ["wf-a", "wf-b"],
                          agent={"capabilities": {"workflows": ["note-smoke", "zz-only-here"], "planners": []}})
    shown = tether(coordinator, "workflows")
    assert shown.code == 0
    lines = shown.out.splitlines()
    assert lines[0].split() == ["WORKFLOW", "DEVICES", "HOSTS"]
    assert ["zz-only-here", "2", "wf-1"] in [line.split() for line in lines[1:]]
    listed = tether_here(coordinator, capsys, "workflows", "--json").json()["workflows"]
    assert {"name": "zz-only-here", "hosts": ["wf-1"], "devices": 2} in listed


# -- enrollment tokens, and forgetting a managed host's device --------------------------------


def test_tokens_create_list_revoke_and_forget_a_device(coordinator: CoordinatorProcess,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    created = tether(coordinator, "tokens", "create", "--uses", "2", "--ttl", "600", "--label", "site=lab")
    assert created.code == 0, created
    fields = dict(line.split(None, 1) for line in created.out.splitlines()[:5])
    secret, token_id = fields["token"], fields["id"]
    assert secret.startswith("tet_") and created.out.count(secret) == 1
    assert fields["uses"] == "2" and fields["labels"] == "site=lab"

    listed = tether(coordinator, "tokens")
    assert listed.code == 0 and secret not in listed.out
    row = next(line.split() for line in listed.out.splitlines() if line.startswith(token_id))
    assert row[1:3] == ["active", "0/2"]
    as_json = tether(coordinator, "tokens", "--json").json()
    assert token_id in {t["id"] for t in as_json["enrollment_tokens"]} and secret not in json.dumps(as_json)

    # A managed host enrolls with it and pools a device, which the operator then forgets.
    host_token = "host-" + secrets.token_hex(20)
    enrolled = httpx.post(f"{coordinator.url}/internal/v1/enroll", headers={"authorization": f"Bearer {secret}"},
                          json={"enrollment_id": "enr-" + secrets.token_hex(4), "host_token": host_token,
                                "hostname": "lab-9"})
    assert enrolled.status_code == 201, enrolled.text
    host_id, auth = enrolled.json()["host_id"], {"authorization": f"Bearer {host_token}"}
    devices = httpx.post(f"{coordinator.url}/internal/v1/hosts/{host_id}/devices/enroll", headers=auth,
                         json={"devices": [{"local_id": "emulator-5554", "driver": "sim"}]}).json()["devices"]
    device_id = devices[0]["device_id"]
    httpx.put(f"{coordinator.url}/internal/v1/hosts/{host_id}/heartbeat", headers=auth,
              json={"devices": [{"device_id": device_id, "driver": "sim", "status": "available"}]})
    assert device_id in tether_here(coordinator, capsys, "devices", "--host", host_id).out
    # people find it by the host's name and see the device's own name (its serial) beside its id
    row = next(line.split() for line in tether_here(coordinator, capsys, "devices", "--host", "lab-9").out.splitlines()
               if line.startswith(device_id))
    assert row[:4] == [device_id, "emulator-5554", "lab-9", f"({host_id})"]

    forgotten = tether(coordinator, "forget", device_id)
    assert (forgotten.code, forgotten.out) == (0, f"device {device_id}: forgotten\n")
    assert tether_here(coordinator, capsys, "devices", "--host", host_id, "--json").json()["devices"] == []

    revoked = tether(coordinator, "tokens", "revoke", token_id)
    assert (revoked.code, revoked.out) == (0, f"token {token_id}: revoked\n")
    listed = tether_here(coordinator, capsys, "tokens")
    row = next(line.split() for line in listed.out.splitlines() if line.startswith(token_id))
    assert row[1:3] == ["revoked", "1/2"]

    made = tether(coordinator, "tokens", "create", "--json").json()
    assert made["token"].startswith("tet_") and made["max_uses"] == 1


def test_the_admin_token_is_only_taken_from_the_environment_or_the_option(coordinator: CoordinatorProcess) -> None:
    result = tether(coordinator, "hosts", "--json", TETHER_TOKEN="", TETHER_URL=coordinator.url)
    assert result.code == 2 and "TETHER_TOKEN" in result.err
    ok = tether(coordinator, "--json", "hosts", "--token", ADMIN, TETHER_TOKEN="")
    assert ok.code == 0 and "hosts" in ok.json()

