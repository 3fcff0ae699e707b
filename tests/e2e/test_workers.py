"""`python -m coordinator serve` with WEB_CONCURRENCY gunicorn worker processes on one listening socket,
and its JSON logs, as real processes on loopback and the real Redis.

Which worker served a request is read from its JSON request line (the ``pid`` field, found by the
``X-Request-ID`` the test sent); a client "on" a worker is a keep-alive connection that worker
accepted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.support import (
    ADMIN,
    HOSTS,
    CoordinatorProcess,
    Process,
    coordinator_env,
    free_port,
    fresh_prefix,
    redis_server,
    unique_prefix,
    wait_until,
)

pytestmark = [pytest.mark.e2e]

ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}
HOST_HEADERS = {"authorization": f"Bearer {HOSTS['host-a']}"}
CLAIM = "/internal/v1/hosts/host-a/claim"


class Served:
    """A running `serve` process and what its log says."""

    def __init__(self, coordinator: CoordinatorProcess) -> None:
        self.coordinator = coordinator
        self.url = coordinator.url
        assert coordinator.process is not None
        self.process = coordinator.process
        self.clients: list[httpx.Client] = []  # closed by the fixture

    def log(self) -> str:
        return self.process.log()

    def entries(self) -> list[dict[str, Any]]:
        """Every complete line of the log, each of which must be one JSON object."""
        return [json.loads(line) for line in self.log().split("\n")[:-1]]

    def started_workers(self) -> list[int]:
        """The pids of the workers started so far, in order, as gunicorn logs them."""
        return [int(m.group(1)) for e in self.entries()
                if (m := re.fullmatch(r"Booting worker with pid: (\d+)", e["message"]))]

    def ready_workers(self) -> set[int]:
        """The pids of the workers whose application has started (uvicorn's line in each, which
        it logs under gunicorn)."""
        return {e["pid"] for e in self.entries() if e["message"] == "Application startup complete."}

    def served_by(self, request_id: str) -> int:
        """The pid of the worker that answered the request sent with ``request_id``."""
        def pid() -> int | None:
            return next((e["pid"] for e in self.entries() if e.get("request_id") == request_id), None)

        return wait_until(pid, 10, 0.02, what=f"the request line of {request_id}")

    def clients_on_workers(self, per_worker: int, workers: int = 2) -> dict[int, list[httpx.Client]]:
        """``per_worker`` keep-alive clients connected to each of ``workers`` workers, by pid."""
        found: dict[int, list[httpx.Client]] = {}

        def connect() -> tuple[int, httpx.Client]:
            client = httpx.Client(base_url=self.url, timeout=30)
            self.clients.append(client)
            rid = uuid.uuid4().hex
            assert client.get("/healthz", headers={"x-request-id": rid}).status_code == 200
            return self.served_by(rid), client

        def enough() -> bool:
            # Connections opened together land on workers that are all awake to accept them.
            with ThreadPoolExecutor(8) as pool:
                for pid, client in pool.map(lambda _: connect(), range(8)):
                    if len(found.setdefault(pid, [])) < per_worker:
                        found[pid].append(client)
            return len([c for c in found.values() if len(c) >= per_worker]) >= workers

        wait_until(enough, 20, 0, what=f"connections to {workers} workers")
        return found


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start `python -m coordinator serve` on the real Redis and its own key prefix, logging
    JSON, with these settings (None: unset); each is stopped at the end of the test."""
    started: list[Served] = []

    def start(**overrides: Any) -> Served:
        env = coordinator_env(prefix, **{"COORDINATOR_LOG_FORMAT": "json", **overrides})
        for name in [name for name, value in overrides.items() if value is None]:
            del env[name]
        coordinator = CoordinatorProcess(env, tmp_path / f"serve-{len(started)}")
        coordinator.start()
        started.append(Served(coordinator))
        return started[-1]

    with fresh_prefix() as prefix:
        yield start
        for served in started:
            for client in served.clients:
                client.close()
            served.coordinator.stop()
            print(f"--- log of {served.process.workdir.name}:\n{served.log()}")  # shown on failure


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^PPid:\s+(\d+)$", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def _waiting_polls(client: httpx.Client) -> float:
    metric = re.search(rb"^tether_waiting_polls (\S+)$", client.get("/metrics").content, re.MULTILINE)
    assert metric is not None
    return float(metric.group(1))


def _poll(client: httpx.Client, wait_s: int, request_id: str, into: list[httpx.Response]) -> threading.Thread:
    def claim() -> None:
        into.append(client.post(f"{CLAIM}?wait_s={wait_s}", headers={**HOST_HEADERS, "x-request-id": request_id}))

    thread = threading.Thread(target=claim)
    thread.start()
    return thread


def test_two_workers_serve_from_two_processes_under_the_parent(serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2)
    workers = wait_until(lambda: len(served.started_workers()) == 2 and served.started_workers())
    assert served.process.pid not in workers
    assert {_parent(pid) for pid in workers} == {served.process.pid}
    clients = served.clients_on_workers(per_worker=1)
    assert set(clients) == set(workers)


def test_a_poll_waiting_in_one_worker_is_answered_by_a_task_created_through_the_other(
        serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2)
    (first, (poller, watcher)), (second, (creator, _)) = served.clients_on_workers(per_worker=2).items()
    heartbeat = {"devices": [{"device_id": "w-phone", "driver": "sim", "status": "available"}]}
    assert creator.put("/internal/v1/hosts/host-a/heartbeat", json=heartbeat, headers=HOST_HEADERS).status_code == 200
    answers: list[httpx.Response] = []
    thread = _poll(poller, 20, "crossworkerpoll", answers)
    wait_until(lambda: _waiting_polls(watcher) == 1, 10, 0.02, what="the poll waiting in the first worker")
    assert _waiting_polls(creator) == 0
    created_at = time.monotonic()
    task = creator.post("/api/v1/tasks", headers={**ADMIN_HEADERS, "x-request-id": "crossworkertask"},
                        json={"kind": "goal", "goal": "g", "device_id": "w-phone"})
    thread.join(10)
    assert answers[0].status_code == 200 and answers[0].json()["task_id"] == task.json()["task_id"]
    assert time.monotonic() - created_at < 5  # the wake-up, not the 20 s poll timeout
    assert served.served_by("crossworkerpoll") == first and served.served_by("crossworkertask") == second


def test_sigterm_to_the_parent_answers_polls_in_every_worker_and_exits_0(
        serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2)
    workers = served.clients_on_workers(per_worker=2)
    answers: list[httpx.Response] = []
    threads = [_poll(poller, 30, f"stoppoll{pid}", answers) for pid, (poller, _) in workers.items()]
    for _, watcher in workers.values():
        wait_until(lambda watcher=watcher: _waiting_polls(watcher) == 1, 10, 0.02, what="a poll waiting")
    served.process.signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    for thread in threads:
        thread.join(10)
    exit_code = served.process.wait(10)
    assert exit_code == 0 and time.monotonic() - signalled_at < 4
    assert [a.status_code for a in answers] == [204, 204]
    assert not any(_alive(pid) for pid in workers)
    assert {served.served_by(f"stoppoll{pid}") for pid in workers} == set(workers)
    assert "Traceback" not in served.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_warns_once_and_stops_without_an_error_line(serve: Callable[..., Served], workers: int) -> None:
    # Issue 42: every worker repeated the short admin token's warning, and logged "Error while
    # closing socket [Errno 9] Bad file descriptor" at every stop.
    served = serve(WEB_CONCURRENCY=str(workers), COORDINATOR_ADMIN_TOKEN="short-token")
    # Each worker running its application, not only booted: a worker stopped while it boots exits
    # before it can say so (a run of the suite on both cores caught one). One process is ready
    # when `serve` returns.
    if workers > 1:
        wait_until(lambda: len(served.ready_workers()) == workers, what="the workers' applications")
    served.process.signal(signal.SIGTERM)
    assert served.process.wait(10) == 0
    messages = [e["message"] for e in served.entries()]
    assert sum("COORDINATOR_ADMIN_TOKEN is shorter than" in m for m in messages) == 1, messages
    assert not [m for m in messages if "Bad file descriptor" in m or "Error while closing" in m], messages
    if workers > 1:
        assert sum("Worker exiting" in m for m in messages) == workers, messages  # each did stop


def test_a_killed_worker_is_replaced(serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2)
    workers = wait_until(lambda: len(served.started_workers()) == 2 and served.started_workers())
    os.kill(workers[0], signal.SIGKILL)
    replacement = wait_until(lambda: len(served.started_workers()) == 3 and served.started_workers()[2],
                             what="a replacement worker")
    assert f"Worker (pid:{workers[0]}) was sent SIGKILL!" in served.log()
    clients = served.clients_on_workers(per_worker=1)
    assert set(clients) == {workers[1], replacement}
    assert served.coordinator.stop() == 0


def _until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_workers_keep_the_request_head_limits(serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2, COORDINATOR_HEADER_TIMEOUT_S="0.5")
    address = ("127.0.0.1", served.coordinator.port)
    for _ in range(4):  # connections spread over both workers
        with socket.create_connection(address, timeout=5) as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 100 * 1024 + b"\r\n\r\n")
                answer = _until_closed(sock)
            except ConnectionResetError:
                answer = b""  # closed before it read the rest: the contract's other answer
            assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")
        with socket.create_connection(address, timeout=5) as sock:
            assert _until_closed(sock) == b""  # no head at all: closed at the header timeout


def test_workers_that_cannot_start_stop_serve_with_the_startup_failure(tmp_path: Path) -> None:
    # A user that may ask INFO (serve's check before any worker starts) but not load the
    # scripts (each worker's start): every worker fails at its lifespan.
    port = free_port()
    with redis_server(port):
        admin = redis.Redis(port=port)
        admin.acl_setuser("limited", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                          commands=["+@all", "-function"])
        admin.close()
        env = coordinator_env(unique_prefix(), REDIS_URL=f"redis://limited:pw@127.0.0.1:{port}/0",
                              WEB_CONCURRENCY="2", COORDINATOR_LOG_FORMAT="json")
        process = Process("serve", [sys.executable, "-m", "coordinator", "serve", "--port", str(free_port())],
                          env, tmp_path)
        try:
            assert process.wait(30) == 3
        finally:
            process.stop()
    log = process.log()
    # gunicorn's arbiter says one or the other, as its reaping and the worker's exit race.
    assert "Worker failed to boot" in log or "exited with code 3" in log, log
    assert all(line.startswith("{") for line in log.splitlines()), log  # JSON, tracebacks included


def test_embedded_redis_runs_one_process_and_says_why(serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=3, REDIS_URL=None)
    assert served.started_workers() == []
    assert any("WEB_CONCURRENCY=3 ignored" in e["message"] for e in served.entries())
    rid = uuid.uuid4().hex
    assert httpx.get(f"{served.url}/healthz", headers={"x-request-id": rid}).status_code == 200
    assert served.served_by(rid) == served.process.pid


def test_json_logs_every_line_of_every_process_and_no_secret(serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2)
    clients = served.clients_on_workers(per_worker=1)
    for pid, (client,) in clients.items():
        assert client.get("/api/v1/tasks/t_none?probe=query-secret", headers=ADMIN_HEADERS).status_code == 404
        assert client.post(f"{CLAIM}?wait_s=0", headers={**HOST_HEADERS, "x-request-id": f"c{pid}"}).status_code == 204
    # A request uvicorn cannot parse: its warning line is JSON too.
    with socket.create_connection(("127.0.0.1", served.coordinator.port), timeout=5) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        sock.recv(4096)
    for pid in clients:
        assert served.served_by(f"c{pid}") == pid
    assert served.coordinator.stop() == 0
    entries = served.entries()  # every line parses
    assert all({"time", "level", "logger", "message", "pid"} <= entry.keys() for entry in entries)
    requests = [e for e in entries if e["logger"] == "coordinator.requests"]
    assert {e["route"] for e in requests} >= {"/healthz", "/api/v1/tasks/{task_id}", "/internal/v1/hosts/{host_id}/claim"}
    claims = [e for e in requests if e["route"] == "/internal/v1/hosts/{host_id}/claim"]
    assert {e["host_id"] for e in claims} == {"host-a"} and {e["pid"] for e in claims} == set(clients)
    assert any(e["logger"] == "uvicorn.error" for e in entries)
    log = served.log()
    for secret in (ADMIN, HOSTS["host-a"], "query-secret", "wait_s", "t_none"):
        assert secret not in log


def test_an_operator_token_revoked_through_one_worker_is_refused_by_the_other_and_never_logged(
        serve: Callable[..., Served]) -> None:
    served = serve(WEB_CONCURRENCY=2)
    (first, *_), (second, *_) = served.clients_on_workers(per_worker=1).values()
    minted = first.post("/api/v1/operator-tokens", headers=ADMIN_HEADERS,
                        json={"name": "wall", "scopes": ["read"]})
    assert minted.status_code == 201
    token = minted.json()
    headers = {"authorization": f"Bearer {token['token']}"}
    assert second.get("/api/v1/tasks", headers=headers).status_code == 200
    refused = second.post("/api/v1/hosts/host-a/drain", headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
    assert first.delete(f"/api/v1/operator-tokens/{token['id']}", headers=ADMIN_HEADERS).status_code == 200
    for method, path in [("GET", "/api/v1/tasks"), ("GET", "/api/v1/me"), ("POST", "/api/v1/hosts/host-a/drain")]:
        answer = second.request(method, path, headers=headers)
        assert answer.status_code == 401 and token["token"] not in answer.text
    assert token["token"] not in second.get("/metrics").text
    assert served.coordinator.stop() == 0
    entries = served.entries()
    assert {e["status"] for e in entries if e.get("route") == "/api/v1/tasks"} == {200, 401}
    assert token["token"] not in served.log() and token["token"][4:] not in served.log()


def test_text_logs_have_no_request_lines(serve: Callable[..., Served]) -> None:
    served = serve(COORDINATOR_LOG_FORMAT="text")
    for _ in range(3):
        assert httpx.get(f"{served.url}/healthz").status_code == 200
    assert httpx.get(f"{served.url}/api/v1/tasks/t_none", headers=ADMIN_HEADERS).status_code == 404
    assert served.coordinator.stop() == 0
    log = served.log()
    assert "INFO coordinator: coordinator using redis://" in log
    assert "/healthz" not in log and "/api/v1/tasks" not in log and "t_none" not in log
    assert not any(line.startswith("{") for line in log.splitlines())
