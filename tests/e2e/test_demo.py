"""The README's first command: the demo runs the real coordinator and agent processes, drives them
through the operator API, stops them and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import child_env

pytestmark = pytest.mark.e2e


def test_demo_runs_every_task_to_its_expected_end(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "coordinator", "demo"], cwd=tmp_path, env=child_env(),
                            capture_output=True, timeout=120, check=False)
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    assert "embedded in-memory Redis" in out
    assert "/ui  (the admin token is in " in out  # the dashboard's address, on screen while it runs
    assert "enrolled  online" in out and "static    online" in out
    assert "step " in out  # progress was seen while a workflow ran
    # a workflow no host lists never reaches a device: it waits, saying why, until its queue timeout
    assert "waiting: no_capable_host" in out and "queue_timeout" in out and "workflow_not_found" not in out
    assert "planner_cannot_plan" in out
    assert "6 of 6 tasks finished: 4 succeeded, 2 failed" in out
    assert "Every task ended as expected." in out
    assert "Hosts and coordinator stopped." in out  # each process exited 0 after SIGTERM
    assert "tet_" not in out and "demo-admin-" not in out and "demo-host-" not in out  # no secret is printed


def test_demo_imports_nothing_from_the_agent() -> None:
    code = ("import sys, coordinator.__main__, coordinator.demo; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agent', 'tether')))")
    result = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, check=True)
    assert result.stdout.decode().strip() == "[]"
