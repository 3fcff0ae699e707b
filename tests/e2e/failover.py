"""A Redis Cluster failover under load, as a scenario the test runs.

A real local cluster (3 masters, 3 replicas, cluster-node-timeout 1 s), one real coordinator on
it, two real agents with four simulated devices each. An operator's client creates tasks at a
steady rate, each with its own idempotency key, and retries a create that was not answered
(503, or no answer) with the same key, as a well-behaved client does. Meanwhile the master that
holds the deployment's slot is killed with SIGKILL and its replica takes over; then the killed
server is started again, as an operator would, and rejoins as the new master's replica.

Afterwards every task whose create was acknowledged must exist and end ``succeeded``. Without
``COORDINATOR_REDIS_WAIT_REPLICAS`` Redis replication is asynchronous, so the last writes the
dead master acknowledged may be missing on the promoted replica; with it, a change is
acknowledged only once the replica has it. The price: while the promoted master has no replica
yet, WAIT cannot be satisfied, so changes are refused (503) until the restarted node has synced.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.cluster import LocalCluster, free_port_block
from tests.support import (
    ADMIN,
    HOSTS,
    CoordinatorProcess,
    Process,
    agent_process,
    coordinator_env,
    unique_prefix,
    wait_until,
)
from wire import TERMINAL_STATUSES


@dataclass
class FailoverReport:
    wait_replicas: int
    acknowledged: int = 0  # creates answered 201/200
    lost: int = 0  # acknowledged, then gone (404)
    not_succeeded: int = 0  # acknowledged, but not succeeded in the end
    rerun: int = 0  # needed a second attempt (a lease or result that did not survive)
    unavailable_answers: int = 0  # 503s and unanswered requests seen by the creating client
    unavailable_window_ms: float = 0.0  # from the first to the last of them, around the kill
    failover_ms: float = 0.0  # kill -> a replica serves the slot (as the cluster reports it)
    replica_back_ms: float = 0.0  # kill -> the restarted node is the new master's synced replica
    create_ms: list[float] = field(default_factory=list)  # latency of acknowledged creates, before the kill

    @property
    def create_p50_ms(self) -> float:
        return statistics.median(self.create_ms) if self.create_ms else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "wait_replicas": self.wait_replicas,
            "acknowledged": self.acknowledged,
            "lost": self.lost,
            "not_succeeded": self.not_succeeded,
            "rerun": self.rerun,
            "unavailable_answers": self.unavailable_answers,
            "unavailable_window_ms": round(self.unavailable_window_ms),
            "failover_ms": round(self.failover_ms),
            "replica_back_ms": round(self.replica_back_ms),
            "create_p50_ms": round(self.create_p50_ms, 2),
        }


class _Creator(threading.Thread):
    """Creates tasks at ``rate_hz`` until stopped, retrying each create until it is answered."""

    def __init__(self, url: str, rate_hz: float, report: FailoverReport) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=5)
        self.interval = 1 / rate_hz
        self.report = report
        self.stop = threading.Event()
        self.killed_at: float | None = None
        self.task_ids: list[str] = []
        self.failures: list[float] = []
        self.unexpected: list[str] = []  # answers other than 200, 201 and 503

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            body = {"kind": "goal", "goal": "Turn on airplane mode", "selector": {"driver": "sim"},
                    "idempotency_key": f"load-{n}"}
            while True:
                started = time.monotonic()
                try:
                    response = self.client.post("/api/v1/tasks", json=body)
                except httpx.HTTPError:
                    response = None
                if response is not None and response.status_code in (200, 201):
                    if self.killed_at is None:
                        self.report.create_ms.append((time.monotonic() - started) * 1000)
                    self.task_ids.append(response.json()["task_id"])
                    break
                if response is not None and response.status_code != 503:
                    self.unexpected.append(f"{response.status_code} {response.text}")
                self.failures.append(time.monotonic())
                time.sleep(0.05)
            time.sleep(self.interval)
        self.client.close()


def run_failover(workdir: Path, wait_replicas: int, *, rate_hz: float = 40, before_s: float = 2.0,
                 after_s: float = 3.0) -> FailoverReport:
    report = FailoverReport(wait_replicas)
    prefix = unique_prefix()
    slot_key = f"{prefix}:tasks"
    with LocalCluster(free_port_block(6), node_timeout_ms=1000) as cluster:
        env = coordinator_env(prefix, cluster.url, COORDINATOR_REDIS_WAIT_REPLICAS=str(wait_replicas),
                              COORDINATOR_LEASE_TTL_S="5", COORDINATOR_HEARTBEAT_INTERVAL_S="0.5",
                              COORDINATOR_REAPER_INTERVAL_S="0.2")
        coordinator = CoordinatorProcess(env, workdir)
        coordinator.start()
        agents: list[Process] = []
        try:
            for host in ("host-a", "host-b"):
                devices = ",".join(f"sim:{host}-{i}" for i in range(4))
                agent = agent_process(coordinator.url, workdir / host, host, HOST_ID=host, TOKEN=HOSTS[host],
                                      DEVICES=devices, POLL_WAIT_S="5")
                agents.append(agent)
            admin = httpx.Client(base_url=coordinator.url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
            wait_until(lambda: len(admin.get("/api/v1/devices").json()["devices"]) == 8, what="8 pooled devices")

            creator = _Creator(coordinator.url, rate_hz, report)
            creator.start()
            time.sleep(before_s)  # the load runs steadily before the kill
            creator.killed_at = killed = time.monotonic()
            port = cluster.kill_master_of(slot_key)
            cluster.wait_failover(slot_key, deadline_s=30)
            report.failover_ms = (time.monotonic() - killed) * 1000
            cluster.restart(port)
            report.replica_back_ms = (time.monotonic() - killed) * 1000
            time.sleep(after_s)
            creator.stop.set()
            creator.join(30)

            # Every answer was a create or a 503; an unexpected one is shown with the process's
            # error lines, which name what Redis raised.
            if creator.unexpected:
                log = coordinator.process.log() if coordinator.process is not None else ""
                errors = [line for line in log.splitlines() if "unexpected" in line or "Error" in line]
                raise AssertionError((creator.unexpected[:3], errors[-40:]))
            report.acknowledged = len(creator.task_ids)
            around = [t for t in creator.failures if t >= killed - 1]
            report.unavailable_answers = len(around)
            if around:
                report.unavailable_window_ms = (max(around) - min(around)) * 1000

            def finished() -> bool:
                done = 0
                for task_id in creator.task_ids:
                    response = admin.get(f"/api/v1/tasks/{task_id}")
                    if response.status_code == 404 or response.json()["status"] in TERMINAL_STATUSES:
                        done += 1
                return done == len(creator.task_ids)

            wait_until(finished, timeout=90, interval=0.5, what="every acknowledged task to finish")
            for task_id in creator.task_ids:
                response = admin.get(f"/api/v1/tasks/{task_id}")
                if response.status_code == 404:
                    report.lost += 1
                    continue
                task = response.json()
                report.not_succeeded += task["status"] != "succeeded"
                report.rerun += task["attempt"] > 1
            admin.close()
        finally:
            for agent in agents:
                agent.stop()
            coordinator.stop()
    return report
