"""Faults under load, judged by their history (tests/history/): lost responses, a coordinator
process killed (kill -9) or stopped (SIGTERM) while agents work through a second one, and Redis
killed and restarted with its data.

Every client operation goes through a recording proxy: the agents' (``python -m agent`` on real
processes) and the operator's (this test's, with idempotency keys, retried after no answer). At
the end every task is read through the same proxy and the checker decides from the history
whether every promise held: nothing lost, nothing run twice, replays answered as first answered.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.history.checker import verify
from tests.history.proxy import RecordingProxy
from tests.history.records import TERMINAL, History, Op, RecordingTransport
from tests.support import (
    ADMIN,
    HOSTS,
    CoordinatorProcess,
    Process,
    agent_process,
    coordinator_env,
    coordinator_process,
    free_port,
    fresh_prefix,
    unique_prefix,
    wait_until,
)

pytestmark = pytest.mark.e2e

COORDINATOR = {"COORDINATOR_LEASE_TTL_S": "2", "COORDINATOR_REAPER_INTERVAL_S": "0.1",
               "COORDINATOR_HEARTBEAT_INTERVAL_S": "0.5", "COORDINATOR_HOST_OFFLINE_AFTER_S": "3"}
AGENTS = {"host-a": "sim:a1,sim:a2", "host-b": "sim:b1,sim:b2"}


class Operator:
    """The test's operator: every call through the proxy, retried while there is no answer (or a
    5xx "try again"); creates carry an idempotency key, so a retry is a replay."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        def answered() -> httpx.Response | None:
            try:
                response = self.http.request(method, path, json=body)
            except httpx.TransportError:
                return None
            return response if response.status_code < 500 else None

        return wait_until(answered, 20, 0.05, what=f"an answer to {method} {path}")

    def close(self) -> None:
        self.http.close()

    def create(self, key: str, **body: Any) -> str:
        response = self.call("POST", "/api/v1/tasks", {**body, "idempotency_key": key})
        assert response.status_code in (200, 201), response.text
        return response.json()["task_id"]

    def wait_terminal(self, task_ids: list[str], timeout: float = 30) -> None:
        """Read every task until all have ended; the last reads are the history's final reads."""
        def ended() -> bool:
            return all(self.call("GET", f"/api/v1/tasks/{t}").json()["status"] in TERMINAL for t in task_ids)

        wait_until(ended, timeout, 0.2, what="every task ended")


def losses(rate: float, seed: int) -> Callable[[Op, int, Any], bool]:
    """Lose a share ``rate`` of the answers to POSTs (claims, renewals, results, creates, cancels),
    seeded; and always the first answer handing out an assignment, recording a result and creating
    a task, so every kind of replay happens in every run."""
    rng = random.Random(seed)
    lock = threading.Lock()
    firsts: set[str] = set()

    def lose(op: Op, status: int, body: Any) -> bool:
        kind = op.path.rsplit("/", 1)[-1]
        with lock:
            if status in (200, 201) and kind in ("claim", "results", "tasks") and kind not in firsts:
                firsts.add(kind)
                return True
            return op.method == "POST" and rng.random() < rate

    return lose


@contextmanager
def agents(url: str, tmp_path: Path, workflows: Path) -> Iterator[list[Process]]:
    started = [agent_process(url, tmp_path / host, host, HOST_ID=host, TOKEN=HOSTS[host], DEVICES=devices,
                             WORKFLOWS_DIR=str(workflows), SHUTDOWN_GRACE_S="5")
               for host, devices in AGENTS.items()]
    try:
        yield started
    finally:
        for process in started:
            process.stop()


# Three teams sharing the pool (PROTOCOL.md, "Sharing the fleet"): weights, a cap, priorities.
TEAMS = {"release": {"weight": 2}, "checkout": {"weight": 1}, "nightly": {"weight": 1, "max_devices": 1}}


def work(operator: Operator, keys: range, ms: int = 500, teams: bool = False) -> list[str]:
    """Workflow tasks for any sim device; with ``teams``, spread over TEAMS, some urgent."""
    def sharing(n: int) -> dict[str, Any]:
        return {"team": list(TEAMS)[n % 3], "priority": 10 if n % 4 == 0 else 0} if teams else {}

    return [operator.create(f"job-{n}", kind="workflow", workflow={"name": "slow", "params": {"ms": ms}},
                            selector={"driver": "sim"}, max_attempts=3, **sharing(n)) for n in keys]


def count(operator: Operator, status: str) -> int:
    return len(operator.call("GET", f"/api/v1/tasks?status={status}&limit=100").json()["tasks"])


def test_lost_responses_are_replayed_and_every_replay_gets_the_first_answer(
    tmp_path: Path, workflows: Path
) -> None:
    history = History()
    with ExitStack() as stack:
        prefix = stack.enter_context(fresh_prefix())
        coordinator = CoordinatorProcess(coordinator_env(prefix, **COORDINATOR))
        coordinator.start()
        stack.callback(coordinator.stop)
        proxy = stack.enter_context(RecordingProxy(history, [coordinator.url], lose=losses(0.2, seed=26)))
        stack.enter_context(agents(proxy.url, tmp_path, workflows))
        operator = Operator(proxy.url)
        stack.callback(operator.close)
        tasks = work(operator, range(12))
        operator.wait_terminal(tasks)
        assert proxy.lost >= 3
    report = verify(history, at_least=100, name="lost responses")
    for replays in ("claim_replays", "result_replays", "create_replays"):
        assert report.counts[replays] >= 1, report.counts


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_coordinator_process_stopped_under_load_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, workflows: Path, signum: signal.Signals
) -> None:
    """Two coordinator processes on one Redis, taken in turn by the proxy; one of them is killed
    (or told to stop) while tasks run, the agents and the operator retry through the other, and
    the stopped one comes back on its port. The work belongs to three teams, one of them capped."""
    history = History()
    with ExitStack() as stack:
        prefix = stack.enter_context(fresh_prefix())
        doomed, survivor = (CoordinatorProcess(coordinator_env(prefix, **COORDINATOR)) for _ in range(2))
        for coordinator in (doomed, survivor):
            coordinator.start()
            stack.callback(coordinator.stop)
        proxy = stack.enter_context(RecordingProxy(history, [doomed.url, survivor.url]))
        stack.enter_context(agents(proxy.url, tmp_path, workflows))
        operator = Operator(proxy.url)
        stack.callback(operator.close)
        for team, settings in TEAMS.items():
            assert operator.call("PUT", f"/api/v1/teams/{team}", settings).status_code == 200
        tasks = work(operator, range(8), teams=True)
        wait_until(lambda: count(operator, "running") >= 2, what="tasks running")
        assert doomed.process is not None
        doomed.process.signal(signum)
        doomed.process.wait()
        doomed.stop()  # only its temporary folder is left to remove
        tasks += work(operator, range(8, 14), teams=True)
        wait_until(lambda: count(operator, "succeeded") >= 4, what="work done while one process is down")
        doomed.start()  # the same port: the proxy takes it in turn again
        tasks += work(operator, range(14, 18), teams=True)
        operator.wait_terminal(tasks)
        teams = {t["team"]: t for t in operator.call("GET", "/api/v1/teams").json()["teams"]}
        assert all((teams[team]["running"], teams[team]["queued"]) == (0, 0) for team in TEAMS), teams
        for task_id in tasks:  # each task's own history: when it waited and was placed (checker, (f))
            assert operator.call("GET", f"/api/v1/tasks/{task_id}/events").status_code == 200
    report = verify(history, at_least=100, name=f"coordinator {signum.name}")
    assert report.counts["placements_ordered"] >= len(tasks), report.counts
    assert report.counts["placed_past_a_waiting_task"] > 0, report.counts  # the order was put to the test


@contextmanager
def redis_server(port: int, folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A redis-server of our own that writes every change to its append-only file before it
    answers, so one killed and started again on ``folder`` has every acknowledged write."""
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        wait_until(lambda: _pings(url), 10, 0.02, what=f"redis-server on port {port}")
        yield process
    finally:
        process.kill()
        process.wait()


def _pings(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to kill and start")
def test_redis_killed_and_restarted_under_load_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, workflows: Path
) -> None:
    history = History()
    port, folder = free_port(), tmp_path / "redis"
    folder.mkdir()
    env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://127.0.0.1:{port}/0", **COORDINATOR)
    with ExitStack() as stack:
        server = stack.enter_context(redis_server(port, folder))
        coordinator = CoordinatorProcess(env)
        coordinator.start()
        stack.callback(coordinator.stop)
        proxy = stack.enter_context(RecordingProxy(history, [coordinator.url]))
        stack.enter_context(agents(proxy.url, tmp_path, workflows))
        operator = Operator(proxy.url)
        stack.callback(operator.close)
        tasks = work(operator, range(8))
        wait_until(lambda: count(operator, "running") >= 2, what="tasks running")
        server.kill()
        server.wait()
        # Unanswered meanwhile: the agents' renewals, results and polls get 503 and are retried.
        wait_until(lambda: sum(op.status == 503 for op in history.ops) >= 5, what="503s while Redis is away")
        stack.enter_context(redis_server(port, folder))
        tasks += work(operator, range(8, 12))
        operator.wait_terminal(tasks)
    verify(history, at_least=100, name="redis killed")


def test_a_late_replay_of_a_retried_attempts_result_gets_its_first_answer() -> None:
    """Attempt 1 reports a retryable failure and the answer is lost; the host repeats the
    identical report only after attempt 2 has run and reported (a long outage on its side). The
    contract: the identical report again gets the recorded result, ``replayed: true``. (Found by
    this checker: the coordinator used to answer 409 stale_attempt once attempt 2 had reported.)"""
    history = History()
    host = {"authorization": f"Bearer {HOSTS['host-a']}"}
    admin = {"authorization": f"Bearer {ADMIN}"}
    with (fresh_prefix() as prefix, coordinator_process(coordinator_env(prefix, **COORDINATOR)) as coordinator,
          httpx.Client(base_url=coordinator.url, transport=RecordingTransport(history), timeout=10) as http):
        snapshot = {"devices": [{"device_id": "a1", "driver": "sim", "status": "available"}]}
        assert http.put("/internal/v1/hosts/host-a/heartbeat", json=snapshot, headers=host).status_code == 200
        created = http.post("/api/v1/tasks", headers=admin,
                            json={"kind": "goal", "goal": "g", "device_id": "a1", "max_attempts": 2})
        task_id = created.json()["task_id"]
        reports = []
        for claim_id, outcome in (("c1", {"status": "failed", "failure_reason": "shutdown", "retryable": True}),
                                  ("c2", {"status": "succeeded", "failure_reason": None})):
            lease = http.post("/internal/v1/hosts/host-a/claim", params={"wait_s": 0}, headers=host,
                              json={"claim_id": claim_id}).json()
            report = {"task_id": task_id, "attempt": lease["attempt"], "lease_id": lease["lease_id"],
                      "metadata": {}, **outcome}
            assert http.post("/internal/v1/hosts/host-a/results", json=report, headers=host).status_code == 200
            reports.append(report)
        http.post("/internal/v1/hosts/host-a/results", json=reports[0], headers=host)  # the late replay
        assert http.get(f"/api/v1/tasks/{task_id}", headers=admin).json()["status"] == "succeeded"
    verify(history, at_least=7)
