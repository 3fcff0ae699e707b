"""``tether artifacts`` and the artifact lines of ``tether watch``, run as processes against a real
coordinator. The test acts as the host itself (claims the task and uploads over the host API), so
what was uploaded is known exactly."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pngs import solid_png
from tests.support import ADMIN, CoordinatorProcess, child_env
from tests.tether.conftest import Host, tether
from tether import Client, TetherError

pytestmark = pytest.mark.e2e

LOG = b"step 0: home\nstep 1: open settings\n"


@pytest.fixture(scope="module")
def coordinator_settings() -> dict[str, str]:
    # The test is the host and uploads between its own calls: a lease that outlasts them.
    return {"COORDINATOR_LEASE_TTL_S": "30"}


@pytest.fixture(scope="module")
def uploaded(coordinator: CoordinatorProcess) -> dict[str, Any]:
    """A finished task with two step screenshots and a log: its lease, and the bytes by name."""
    files = {"step-0.png": solid_png(4, 3, (255, 0, 0)), "step-1.png": solid_png(5, 2, (0, 0, 255)), "log.txt": LOG}
    with contextlib.closing(Host(coordinator, "art-1")) as host:
        lease = host.run_task()
        host.upload(lease, "step-0.png", files["step-0.png"], "image/png", step_index=0)
        host.upload(lease, "step-1.png", files["step-1.png"], "image/png", step_index=1)
        host.upload(lease, "log.txt", LOG, "text/plain")
        host.succeed(lease)
    return {"lease": lease, "task_id": lease["task_id"], "files": files}


def tether_bytes(coordinator: CoordinatorProcess,
                 *args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    env = child_env(TETHER_URL=coordinator.url, TETHER_TOKEN=ADMIN)
    return subprocess.run([sys.executable, "-m", "tether", *args], env=env, stdout=stdout,
                          stderr=subprocess.PIPE, timeout=30, check=False)


def test_artifacts_lists_every_artifact_in_a_narrow_table(coordinator: CoordinatorProcess,
                                                          uploaded: dict[str, Any]) -> None:
    result = tether(coordinator, "artifacts", uploaded["task_id"])
    assert result.code == 0, result
    header, *rows = result.out.splitlines()
    assert header.split() == ["NAME", "ATTEMPT", "STEP", "SIZE", "TYPE", "CREATED"]
    cells = {row.split()[0]: row.split() for row in rows}
    assert sorted(cells) == ["log.txt", "step-0.png", "step-1.png"]
    assert cells["step-1.png"][1:3] == ["1", "1"] and cells["step-1.png"][5] == "image/png"
    assert cells["log.txt"][1:5] == ["1", "-", str(len(LOG)), "B"] and cells["log.txt"][5] == "text/plain"
    assert all(len(row) <= 100 for row in result.out.splitlines())

    as_json = tether(coordinator, "artifacts", uploaded["task_id"], "--json")
    assert as_json.json() == coordinator.api.get(f"/api/v1/tasks/{uploaded['task_id']}/artifacts").json()


def test_artifacts_saves_one_with_o(coordinator: CoordinatorProcess, uploaded: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "shot.png"
    result = tether(coordinator, "artifacts", uploaded["task_id"], "step-1.png", "-o", str(target), "--attempt", "1")
    assert result.code == 0, result
    assert target.read_bytes() == uploaded["files"]["step-1.png"]
    assert "step-1.png" in result.out and str(target) in result.out and result.err == ""


def test_artifacts_writes_the_bytes_to_a_pipe(coordinator: CoordinatorProcess, uploaded: dict[str, Any]) -> None:
    done = tether_bytes(coordinator, "artifacts", uploaded["task_id"], "step-0.png")
    assert done.returncode == 0, done.stderr
    assert done.stdout == uploaded["files"]["step-0.png"]


def test_artifacts_never_writes_an_image_to_a_terminal(coordinator: CoordinatorProcess,
                                                       uploaded: dict[str, Any]) -> None:
    leader, follower = os.openpty()
    try:
        done = tether_bytes(coordinator, "artifacts", uploaded["task_id"], "step-0.png", stdout=follower)
        os.set_blocking(leader, False)
        try:
            written = os.read(leader, 4096)
        except BlockingIOError:
            written = b""
        assert done.returncode == 2, done.stderr
        assert b"-o FILE" in done.stderr and written == b""
        text = tether_bytes(coordinator, "artifacts", uploaded["task_id"], "log.txt", stdout=follower)
        assert text.returncode == 0, text.stderr  # text is fine on a terminal
    finally:
        os.close(leader)
        os.close(follower)


def test_a_missing_artifact_exits_1_with_its_code_and_writes_no_file(coordinator: CoordinatorProcess,
                                                                      uploaded: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "nothing.png"
    for args in (["step-9.png"], ["step-0.png", "--attempt", "2"]):
        result = tether(coordinator, "artifacts", uploaded["task_id"], *args, "-o", str(target))
        assert result.code == 1, result
        assert result.err.strip().endswith("(not_found)") and len(result.err.strip().splitlines()) == 1, result.err
        assert not target.exists()
    unknown = tether(coordinator, "artifacts", "t_no_such_task")
    assert unknown.code == 1 and "(not_found)" in unknown.err
    nowhere = tether(coordinator, "artifacts", uploaded["task_id"], "log.txt", "-o", str(tmp_path / "no" / "log.txt"))
    assert nowhere.code == 1 and "cannot write" in nowhere.err and "Traceback" not in nowhere.err, nowhere


def test_o_and_attempt_without_a_name_are_bad_usage(coordinator: CoordinatorProcess, uploaded: dict[str, Any]) -> None:
    for extra in (["-o", "x"], ["--attempt", "1"]):
        result = tether(coordinator, "artifacts", uploaded["task_id"], *extra)
        assert result.code == 2 and "NAME" in result.err, result
    assert tether(coordinator, "artifacts", uploaded["task_id"], "a.png", "--attempt", "0").code == 2


def test_the_client_refuses_a_name_that_would_change_the_path(coordinator: CoordinatorProcess) -> None:
    with Client(coordinator.url, ADMIN) as client:
        for name in ("..", "a/b.png", "", "x" * 129):
            with pytest.raises(TetherError) as refused:
                client.get_artifact("t_any", name)
            assert refused.value.code == "invalid_request"


def test_watch_prints_each_artifact_s_name_as_it_arrives(coordinator: CoordinatorProcess) -> None:
    host = Host(coordinator, "art-2")
    lease = host.run_task()
    env = child_env(TETHER_URL=coordinator.url, TETHER_TOKEN=ADMIN)
    with contextlib.closing(host), subprocess.Popen([sys.executable, "-m", "tether", "watch", lease["task_id"]], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as watch:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the watch has read the task: it follows the feed from here
        assert " running " in first, first
        host.upload(lease, "step-0.png", solid_png(2, 2, (0, 255, 0)), "image/png", step_index=0)
        line = watch.stdout.readline()  # printed as it arrives, before the task ends
        assert " artifact " in line and "step-0.png (attempt 1, step 0, " in line and "image/png" in line, line
        host.upload(lease, "log.txt", LOG, "text/plain")
        host.succeed(lease)
        rest, err = watch.communicate(timeout=30)
    lines = [first, line, *rest.splitlines()]
    assert watch.returncode == 0, (lines, err)
    assert [ln.split(" artifact ")[1].split()[0] for ln in lines if " artifact " in ln] == ["step-0.png", "log.txt"]
    assert " succeeded " in lines[-1]

    as_json = tether(coordinator, "watch", lease["task_id"], "--json")  # over: the task alone
    assert json.loads(as_json.out.splitlines()[0])["status"] == "succeeded"


def test_an_artifact_event_reads_as_its_name_and_what_it_is() -> None:
    from tether import render

    event = {"type": "artifact", "at": "2026-12-03T10:00:00.000Z", "task_id": "t_1", "attempt": 2, "step_index": 3,
             "name": "step-3.png", "size": 14_540, "content_type": "image/png"}
    assert render.event_line(event).endswith("artifact          step-3.png (attempt 2, step 3, 14.2 KiB, image/png)")
    log = {**event, "name": "log.txt", "size": 812, "content_type": "text/plain"}
    del log["step_index"]  # the feed leaves it out when the artifact is no step's
    assert render.event_line(log).endswith("log.txt (attempt 2, 812 B, text/plain)")
    assert render.size(3 * 1024 * 1024) == "3.0 MiB"
