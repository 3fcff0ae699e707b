"""The README's first command: the demo runs the real coordinator and agent code and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_demo_runs_every_task_to_its_expected_end(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COORDINATOR_", "HOST_AGENT_")) and k != "REDIS_URL"}
    result = subprocess.run([sys.executable, "-m", "coordinator", "demo"], cwd=tmp_path, env=env,
                            capture_output=True, timeout=120)
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    assert "embedded in-memory Redis" in out
    assert "enrolled  online" in out and "static    online" in out
    assert "step " in out  # progress was seen while a workflow ran
    assert "workflow_not_found" in out and "planner_cannot_plan" in out
    assert "6 of 6 tasks finished: 4 succeeded, 2 failed" in out
    assert "Every task ended as expected." in out
    assert "tet_" not in out and "demo-admin-" not in out  # no secret is printed
