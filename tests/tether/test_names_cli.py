"""`tether` names hosts and devices as people know them, the id following (issue 42, seen 2:
`tether task`, `tasks`, `events`, `history` and `watch` showed only `d_e208…`/`h_abbd…` though
the hostname and the device's serial were known). A managed host's device, whose cloud id is not
its name, run by hand through the host API while a `tether watch` process follows it."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys

import httpx
import pytest

from tests.support import ADMIN, CoordinatorProcess, child_env
from tests.tether.conftest import tether_here


def test_a_managed_device_and_its_host_are_named_then_identified(coordinator: CoordinatorProcess,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    token = coordinator.call("POST", "/api/v1/enrollment-tokens", json={})["token"]
    host_token = "host-" + secrets.token_hex(20)
    enrolled = httpx.post(f"{coordinator.url}/internal/v1/enroll", headers={"authorization": f"Bearer {token}"},
                          json={"enrollment_id": "enr-names", "host_token": host_token, "hostname": "lab-names"})
    host_id, auth = enrolled.json()["host_id"], {"authorization": f"Bearer {host_token}"}
    device_id = httpx.post(f"{coordinator.url}/internal/v1/hosts/{host_id}/devices/enroll", headers=auth, json={
        "devices": [{"local_id": "emulator-5556", "driver": "sim"}]}).json()["devices"][0]["device_id"]
    beat = httpx.put(f"{coordinator.url}/internal/v1/hosts/{host_id}/heartbeat", headers=auth,
                     json={"devices": [{"device_id": device_id, "driver": "sim", "status": "available"}]})
    assert beat.status_code == 200, beat.text
    device, host = f"emulator-5556 ({device_id})", f"lab-names ({host_id})"

    task_id = coordinator.create_task(device_id=device_id)["task_id"]
    watch = subprocess.Popen([sys.executable, "-m", "tether", "watch", task_id], text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                             env=child_env(TETHER_URL=coordinator.url, TETHER_TOKEN=ADMIN))
    try:
        # The watch has read the task (its first line) before the attempt is claimed.
        assert watch.stdout is not None
        first = watch.stdout.readline()
        assert f"task {task_id}" in first, first
        claim = httpx.post(f"{coordinator.url}/internal/v1/hosts/{host_id}/claim?wait_s=0", headers=auth).json()
        done = httpx.post(f"{coordinator.url}/internal/v1/hosts/{host_id}/results", headers=auth, json={
            "task_id": task_id, "attempt": 1, "lease_id": claim["lease_id"], "status": "succeeded",
            "failure_reason": None, "metadata": {}})
        assert done.status_code == 200, done.text
        out, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err
    claimed = next(line for line in out.splitlines() if " claimed " in line)
    assert f"on {device} at {host}" in claimed, out

    shown = tether_here(coordinator, capsys, "task", task_id).out
    assert re.search(rf"^host +{re.escape(host)}$", shown, re.M) and re.search(rf"^device +{re.escape(device)}$",
                                                                                shown, re.M), shown
    listed = tether_here(coordinator, capsys, "tasks", "--device", device_id).out
    assert f" emulator-5556 ({device_id[:4]}" in listed, listed  # the ON column: the name first, then the id
    history = tether_here(coordinator, capsys, "events", task_id).out
    assert any(host in line and device in line for line in history.splitlines() if " claimed " in line), history
    runs = tether_here(coordinator, capsys, "history", device_id).out
    assert host in runs, runs
