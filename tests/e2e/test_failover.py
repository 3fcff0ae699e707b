"""A Redis Cluster failover under load (tests/e2e/failover.py): with
COORDINATOR_REDIS_WAIT_REPLICAS=1 nothing acknowledged is lost when the master holding the
deployment's slot is killed and its replica promoted. (Without it, what is lost is reported by
the scenario, not asserted: asynchronous replication may or may not drop the last writes.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster import cluster_available
from tests.e2e.failover import run_failover

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not cluster_available(), reason="needs redis-server")]


def test_with_wait_replicas_a_failover_loses_nothing_acknowledged(tmp_path: Path) -> None:
    # A second of load once the restarted node is the new master's replica is enough to see
    # creates acknowledged again (the scenario waits three by default).
    report = run_failover(tmp_path, wait_replicas=1, after_s=1.0)
    assert report.acknowledged > 40
    assert report.lost == 0 and report.not_succeeded == 0, report.row()
    # the coordinator answered 503 for a while, then served again
    assert report.unavailable_answers > 0 and report.unavailable_window_ms < 15_000, report.row()
    print(report.row())
