"""python -m bench.failover [--rounds N]: a Redis Cluster failover under load, without and with
COORDINATOR_REDIS_WAIT_REPLICAS=1 (the scenario is tests/e2e/failover.py: a real 3+3 cluster,
one coordinator, two agents, tasks created at 40/s; the slot's master is killed with SIGKILL,
its replica promoted, and the killed server restarted as a replica).

Prints one markdown row per run: tasks acknowledged, lost, not succeeded, re-run, how long the
creating client saw 503 or no answer, the failover and replica-back times, and the create
latency before the kill. Then the per-call cost of WAIT, measured precisely: one process calls
the heartbeat script (an unchanged snapshot: the smallest write) back to back on the cluster,
without and with WAIT 1."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from coordinator.auth import HostPrincipal
from coordinator.keys import Keys
from coordinator.redis_client import open_cluster
from coordinator.scripts import Durability
from coordinator.store import Store
from tests.cluster import LocalCluster, free_port_block
from tests.e2e.failover import FailoverReport, run_failover
from tests.support import unique_prefix

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
    call_cost()


async def _call_cost(url: str, replicas: int, calls: int) -> list[float]:
    redis = open_cluster(url, max_connections=8)
    store = Store(redis, Keys(unique_prefix()), host_offline_after_ms=60_000, durability=Durability(replicas))
    await store.load_scripts()
    host = HostPrincipal(host_id="h1", kind="static", digest="d")
    snapshot = '{"agent":{},"devices":[]}'
    await store.heartbeat(host, snapshot)
    taken = []
    for _ in range(calls):
        started = time.perf_counter()
        await store.heartbeat(host, snapshot)
        taken.append((time.perf_counter() - started) * 1e6)
    await redis.aclose()
    return taken


async def _raw_cost(url: str, calls: int) -> list[tuple[str, list[float]]]:
    """The same script alone, and followed by WAIT 1, on one connection of the slot's master:
    what WAIT itself adds, without any client's own work."""
    redis = open_cluster(url, max_connections=8)
    key = unique_prefix() + ":counter"
    sha = await redis.script_load("return redis.call('INCR', KEYS[1])")
    node = redis.get_node_from_key(key)
    connection = node.acquire_connection()
    rows = []
    for label, commands in [("script alone", [("EVALSHA", sha, 1, key)]),
                            ("script + WAIT 1", [("EVALSHA", sha, 1, key), ("WAIT", 1, 1000)])] * 2:
        taken = []
        for _ in range(calls):
            started = time.perf_counter()
            await connection.send_packed_command(connection.pack_commands(commands))
            for _ in commands:
                await connection.read_response()
            taken.append((time.perf_counter() - started) * 1e6)
        rows.append((label, taken))
    node.release(connection)
    await redis.aclose()
    return rows


def call_cost(calls: int = 3000) -> None:
    print("\n| call | p50 (us) | p99 (us) |\n|---|---|---|")
    with LocalCluster(free_port_block(6)) as cluster:
        rows = [(f"heartbeat through the store, WAIT replicas {replicas}",
                 asyncio.run(_call_cost(cluster.url, replicas, calls))) for _ in range(2) for replicas in (0, 1)]
        rows += asyncio.run(_raw_cost(cluster.url, calls))
        for label, taken in rows:
            print(f"| {label} | {statistics.median(taken):.0f} | {statistics.quantiles(taken, n=100)[98]:.0f} |")


if __name__ == "__main__":
    main()
