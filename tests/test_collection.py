"""The README's test command reports no "deselected" (issue 42: "93 deselected" looked like a
failure to a newcomer): the cluster backend is generated only for modules marked ``cluster``,
never collected and then dropped."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO, child_env


def test_collecting_deselects_nothing_and_runs_the_cluster_only_where_marked() -> None:
    marked, unmarked = "tests/coordinator/test_static_hosts.py", "tests/coordinator/test_bodies.py"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                             marked, unmarked], cwd=REPO, env=child_env(), capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deselected" not in result.stdout, result.stdout.splitlines()[-1]
    ids = result.stdout.splitlines()
    assert any(i.startswith(marked) and "[cluster" in i for i in ids), "the marked module runs on the cluster"
    assert any(i.startswith(unmarked) and "[redis" in i for i in ids)
    assert not any(i.startswith(unmarked) and "[cluster" in i for i in ids), "an unmarked module does not"
