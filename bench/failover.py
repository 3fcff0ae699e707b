"""python -m bench.failover [--rounds N]: a Redis Cluster failover under load, without and with
COORDINATOR_REDIS_WAIT_REPLICAS=1 (the scenario is tests/e2e/failover.py: a real 3+3 cluster,
one coordinator, two agents, tasks created at 40/s; the slot's master is killed with SIGKILL,
its replica promoted, and the killed server restarted as a replica).

Prints one markdown row per run: tasks acknowledged, lost, not succeeded, re-run, how long the
creating client saw 503 or no answer, the failover and replica-back times, and the create
latency before the kill (the per-request cost of WAIT)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from tests.e2e.failover import FailoverReport, run_failover

COLUMNS = ["wait_replicas", "acknowledged", "lost", "not_succeeded", "rerun", "unavailable_answers",
           "unavailable_window_ms", "failover_ms", "replica_back_ms", "create_p50_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("| " + " | ".join(COLUMNS) + " | create_p99_ms |")
    print("|" + "---|" * (len(COLUMNS) + 1))
    for _ in range(args.rounds):
        for replicas in (0, 1):  # interleaved, so both see the same machine
            with tempfile.TemporaryDirectory(prefix="tether-failover-") as workdir:
                report: FailoverReport = run_failover(Path(workdir), replicas)
            row = report.row()
            p99 = statistics.quantiles(report.create_ms, n=100)[98] if len(report.create_ms) > 1 else 0.0
            print("| " + " | ".join(str(row[c]) for c in COLUMNS) + f" | {p99:.2f} |", flush=True)


if __name__ == "__main__":
    main()
