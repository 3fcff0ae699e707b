"""What tests share that is not a fixture: loopback ports, real child processes (the coordinator
above all), per-test key prefixes and their cleanup, and waiting until a condition holds.

Child processes run the checkout under test (it leads ``PYTHONPATH``, as it leads ``sys.path``
in the tests themselves), in a working folder of their own so no ``.env`` file is picked up,
with every ``COORDINATOR_*``, ``HOST_AGENT_*`` and ``REDIS_URL`` of the caller's environment
removed. Whatever starts one stops it the same way: SIGTERM, wait, SIGKILL; and prints its log
when it ended with an exit code nobody expected.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis
import redis.asyncio as aioredis

from coordinator.state.keys import Keys
from wire import TERMINAL_STATUSES

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
REAL_REDIS_URL = "redis://127.0.0.1:6379/0"
ADMIN = "test-admin-token"
HOSTS = {"host-a": "token-a-0123456789", "host-b": "token-b-0123456789", "host-c": "token-c-0123456789"}
# Exit codes of a process stopped as intended: a clean exit, or SIGTERM not handled.
_STOPPED = (0, -signal.SIGTERM)


def free_port() -> int:
    """A loopback TCP port nobody listens on (free when asked: bind it soon)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- key prefixes ------------------------------------------------------------------------------


def unique_prefix() -> str:
    """A key prefix of its own for one test (or one module's processes), with a hash tag."""
    return f"tether-test-{uuid.uuid4().hex[:12]}:{{t}}"


def glob_escape(text: str) -> str:
    """``text`` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def sync_client(url: str) -> redis.Redis | redis.RedisCluster:
    """A blocking client of the Redis at ``url``: a cluster client if it is a cluster node."""
    client = redis.Redis.from_url(url)
    if client.info("cluster").get("cluster_enabled") != 1:
        return client
    client.close()
    return redis.RedisCluster.from_url(url)


def delete_prefix(prefix: str, url: str = REAL_REDIS_URL) -> None:
    """Delete every key of ``prefix`` on the Redis at ``url`` (never FLUSHDB: Redis is shared)."""
    client = sync_client(url)
    try:
        for key in client.scan_iter(match=glob_escape(Keys(prefix).base) + "*", count=1000):
            client.delete(key)
    finally:
        client.close()


async def delete_prefix_async(client: aioredis.Redis, prefix: str) -> None:
    """Delete every key of ``prefix`` through an open asyncio client (real Redis or fakeredis)."""
    async for key in client.scan_iter(match=glob_escape(Keys(prefix).base) + "*", count=1000):
        await client.delete(key)


@contextmanager
def fresh_prefix(url: str = REAL_REDIS_URL) -> Iterator[str]:
    """A unique prefix whose keys are deleted at the end of the block."""
    prefix = unique_prefix()
    try:
        yield prefix
    finally:
        delete_prefix(prefix, url)


# -- waiting -----------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.05,
               what: str = "condition") -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and
    return that; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], T | Awaitable[T]], timeout: float = 20.0,
                           interval: float = 0.01, what: str = "condition") -> T:
    """``wait_until`` on the event loop; ``predicate`` may be a plain function or a coroutine
    function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


# -- child processes ---------------------------------------------------------------------------


def child_env(**overrides: Any) -> dict[str, str]:
    """This environment minus Tether's settings, with the checkout first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COORDINATOR_", "HOST_AGENT_")) and k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def coordinator_env(prefix: str, redis_url: str = REAL_REDIS_URL, **overrides: Any) -> dict[str, str]:
    """A coordinator on real Redis (a single node, or any node of a cluster) under ``prefix``,
    with the test admin token and ``HOSTS``."""
    return child_env(**{
        "REDIS_URL": redis_url,
        "COORDINATOR_KEY_PREFIX": prefix,
        "COORDINATOR_ADMIN_TOKEN": ADMIN,
        "COORDINATOR_STATIC_HOSTS": json.dumps(HOSTS),
        "COORDINATOR_REAPER_INTERVAL_S": "0.2",
        **overrides,
    })


def stop_process(popen: subprocess.Popen[Any], timeout: float = 15.0) -> int:
    """SIGTERM if it still runs, wait up to ``timeout``, then SIGKILL; the exit code."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    return popen.returncode


class Process:
    """A child process whose output (stdout and stderr) goes to ``<workdir>/<name>.log``.
    Without a ``workdir`` it gets a temporary one, removed by ``stop``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], workdir: Path | None = None) -> None:
        self.name = name
        self._tempdir = None if workdir is not None else tempfile.mkdtemp(prefix=f"tether-{name}-")
        self.workdir = Path(workdir if workdir is not None else self._tempdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{name}.log"
        with open(self.log_path, "ab") as log:  # appended to: a restarted process keeps its history
            self.popen = subprocess.Popen(args, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float = 20.0) -> int:
        """The exit code; fails the test, showing the log, if it has not exited in time."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit in {timeout:g} s; log:\n{self.log()}") from None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; the log is printed (pytest shows it
        with a failure) unless the process exited 0 or by the SIGTERM."""
        stop_process(self.popen, timeout)
        if self.popen.returncode not in _STOPPED:
            print(f"--- {self.name} exited with {self.popen.returncode}; its log:\n{self.log()}")
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
        return self.popen.returncode


def redis_answers(port: int) -> bool:
    """Whether a Redis on ``port`` of loopback answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server(port: int, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    """A throwaway ``redis-server`` of the test's own on ``port`` (no persistence), so the test
    may kill it (or make it busy); killed at the end of the block. ``options``: more of
    redis-server's command line (``"--busy-reply-threshold", "50"``)."""
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: redis_answers(port), 10, 0.02, what=f"redis-server on port {port}")
        yield process
    finally:
        process.kill()
        process.wait()


# Agent settings that keep tests quick: short polls and heartbeats, a short backoff cap.
FAST_AGENT = {"POLL_WAIT_S": "2", "HEARTBEAT_INTERVAL_S": "0.3", "BACKOFF_CAP_S": "0.5"}


def agent_process(url: str, workdir: Path, name: str = "agent", **settings: str) -> Process:
    """``python -m agent`` against ``url``, configured by ``settings`` (``HOST_AGENT_`` names
    without the prefix: ``HOST_ID="host-a"``), with FAST_AGENT's timings unless overridden."""
    merged = {"URL": url, **FAST_AGENT, **settings}
    env = child_env(**{f"HOST_AGENT_{k}": v for k, v in merged.items()})
    return Process(name, [sys.executable, "-m", "agent"], env, workdir)


# Coordinator settings that keep process tests quick: leases that lapse within a test, a reaper
# that notices at once, hosts that heartbeat often.
FAST_COORDINATOR = {"COORDINATOR_LEASE_TTL_S": "1.5", "COORDINATOR_REAPER_INTERVAL_S": "0.1",
                    "COORDINATOR_HEARTBEAT_INTERVAL_S": "0.5"}


def write_workflows(folder: Path, workflows: Mapping[str, list[dict[str, Any]]]) -> Path:
    """``folder`` (created) holding one workflow file per entry, ``{name: steps}``: what an
    agent's ``WORKFLOWS_DIR`` reads."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, steps in workflows.items():
        (folder / f"{name}.json").write_text(json.dumps({"name": name, "steps": steps}))
    return folder


class CoordinatorProcess:
    """``python -m coordinator serve`` on a loopback port, configured by ``env`` (see
    ``coordinator_env``); ``start`` returns once ``/readyz`` answers 200. It may be stopped and
    started again, on the same port.

    The one coordinator process of the tests, and the calls they make of it: ``api`` is an
    operator's client (the test admin token; through ``transport`` when one is given, which is how
    a test records its history), closed by ``close``; ``call``, ``create_task``, ``task`` and
    ``wait_task`` speak the operator API and fail the test on an error answer; ``heartbeat`` speaks
    for a static host, with the token the process was configured with
    (``COORDINATOR_STATIC_HOSTS``). Start it with ``running``."""

    def __init__(self, env: dict[str, str], workdir: Path | None = None, *, port: int | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.env = env
        self.workdir = workdir
        self.port = port if port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None
        # The hosts' tokens are read from what the process was given, so they cannot disagree.
        self.hosts: dict[str, str] = json.loads(env.get("COORDINATOR_STATIC_HOSTS") or "{}")
        self._transport = transport
        self._api: httpx.Client | None = None

    @property
    def api(self) -> httpx.Client:
        if self._api is None:
            self._api = httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10,
                                     transport=self._transport)
        return self._api

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    @property
    def prefix(self) -> str:
        return self.env["COORDINATOR_KEY_PREFIX"]

    def host_headers(self, host: str) -> dict[str, str]:
        """The bearer of static host ``host``."""
        return {"authorization": f"Bearer {self.hosts[host]}"}

    # -- calls ---------------------------------------------------------------------------------

    def call(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> Any:
        """An operator API call (as ``token``, the admin token by default) that must succeed:
        its JSON body, or None when it has none."""
        if token is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), "authorization": f"Bearer {token}"}
        response = self.api.request(method, path, **kwargs)
        assert response.status_code < 300, f"{method} {path}: {response.status_code} {response.text}"
        return response.json() if response.content else None

    def heartbeat(self, host: str, devices: Iterable[str | Mapping[str, Any]], *,
                  agent: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Static host ``host``'s snapshot of ``devices``: a device id is a simulated device,
        available; a mapping is sent over those defaults (``{"device_id": "p1", "status":
        "busy"}``). ``agent`` describes its agent (``hostname``, ``version``)."""
        body: dict[str, Any] = {"devices": [
            {"driver": "sim", "status": "available", **({"device_id": d} if isinstance(d, str) else d)}
            for d in devices]}
        if agent is not None:
            body["agent"] = dict(agent)
        response = self.api.put(f"/internal/v1/hosts/{host}/heartbeat", json=body, headers=self.host_headers(host))
        assert response.status_code == 200, response.text
        return response.json()

    def create_task(self, *, token: str | None = None, **body: Any) -> dict[str, Any]:
        """A new task (a goal unless ``kind`` says otherwise): the created task."""
        body.setdefault("kind", "goal")
        if body["kind"] == "goal":
            body.setdefault("goal", "Turn on airplane mode")
        return self.call("POST", "/api/v1/tasks", token=token, json=body)

    def task(self, task_id: str) -> dict[str, Any]:
        return self.call("GET", f"/api/v1/tasks/{task_id}")

    def wait_task(self, task_id: str, statuses: Collection[str] = TERMINAL_STATUSES,
                  timeout: float = 20) -> dict[str, Any]:
        """The task once its status is one of ``statuses`` (ended, by default)."""
        return wait_until(lambda: (t := self.task(task_id))["status"] in statuses and t, timeout,
                          what=f"task {task_id} in {sorted(statuses)}")

    def claim(self, host: str) -> dict[str, Any]:
        """Static host ``host`` claims, without waiting: its assignment (fails without one)."""
        response = self.api.post(f"/internal/v1/hosts/{host}/claim", params={"wait_s": 0},
                                 headers=self.host_headers(host))
        assert response.status_code == 200, response.text
        return response.json()

    def mint(self, name: str, scopes: list[str], ttl_s: int = 3600) -> str:
        """A new operator token's secret."""
        return self.call("POST", "/api/v1/operator-tokens",
                         json={"name": name, "scopes": scopes, "ttl_s": ttl_s})["token"]

    # -- the process ---------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> None:
        args = [sys.executable, "-m", "coordinator", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        process = self.process = Process("coordinator", args, self.env, self.workdir)

        # One client for every probe: httpx.get builds a client, and its TLS context, per call,
        # and at 20 probes a second that CPU was taken from the process starting beside it.
        probe = httpx.Client(timeout=1.0)

        def ready() -> bool:
            if process.popen.poll() is not None:
                # stop() below prints its log
                raise AssertionError(f"coordinator exited with {process.popen.returncode} before it was ready")
            try:
                return probe.get(f"{self.url}/readyz").status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_until(ready, timeout, what=f"coordinator ready at {self.url}")
        except BaseException:
            process.stop()
            raise
        finally:
            probe.close()

    def stop(self) -> int | None:
        return self.process.stop() if self.process is not None else None

    def close(self) -> int | None:
        """Stop it for good: the process, then the operator's client."""
        try:
            return self.stop()
        finally:
            if self._api is not None:
                self._api.close()


@contextmanager
def running(coordinator: CoordinatorProcess) -> Iterator[CoordinatorProcess]:
    """``coordinator`` started, and closed at the end of the block."""
    coordinator.start()  # stops the process itself if it never gets ready
    try:
        yield coordinator
    finally:
        coordinator.close()


@contextmanager
def coordinator_process(env: dict[str, str], workdir: Path | None = None) -> Iterator[CoordinatorProcess]:
    """A started ``CoordinatorProcess``, closed at the end of the block."""
    with running(CoordinatorProcess(env, workdir)) as coordinator:
        yield coordinator
