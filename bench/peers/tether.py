"""Tether beside its peers: two coordinator processes (`python -m bench.server coordinator`, which
runs `python -m coordinator serve`) on the same Redis under a key prefix holding the run's tag, and
two worker processes of HOSTS static hosts each, one device a host (20 devices, as saq's two
workers run 10 jobs each at once). A host is driven by the agent's own protocol client
(agent/client.py): one heartbeat, then a claim; each job is "run" (it takes time.time()) and its
result asks `next`, so a busy device's next job comes back in the result's answer (eager
dispatch), and a claim is sent only when none did. Worker i's hosts wait on coordinator i; the
bench's creates alternate between the two, so half of them wake a poll on the other process.

What the bench learns from the workers goes through Redis keys of the tag, outside Tether's own:
a probe job (goal "probe") pushes its start time on a list the bench pops; the other jobs are
counted in each worker and the count written every 10 ms, which the bench reads (both are
counted as watching commands, left out of the job's).

The `tether-floor` column is the same bench with the two coordinators replaced by two bare
Starlette processes (`python -m bench.server floor`, bench/floor_app.py): each request one script
of the lifecycle floor (bench/floor_lifecycle.py), a result asking `next` dispatching the device's
next queued job in the same script, a waiting claim woken through its process's inbox. The same
hosts, client and flow: what it measures is the least this job flow costs over HTTP with the
agent's client, with none of the coordinator's work."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import httpx
from pydantic import SecretStr
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from agent.answers import Assignment
from agent.client import CoordinatorClient, HostClient
from bench.context import server_env
from bench.loadgen import Connection, build, connect
from bench.peers import ENQUEUERS, REDIS_URL, LoopThread, poll_until, stop_workers
from bench.system import free_port
from wire import ResultStatus

HOSTS = 10  # per worker process, one device each
WORKERS = 2
CLAIM_WAIT_S = 20
FLUSH_S = 0.01  # how often a worker writes its count of jobs done
PROBE_WORKER = 1  # probes aim at a device of worker 1, whose hosts wait on coordinator 1
CREATE_ON = 0  # ... and are created on coordinator 0: every probe crosses processes


class Keys:
    """The bench's own keys (outside Tether's prefix), all holding the tag."""

    def __init__(self, tag: str) -> None:
        self.ports = f"{tag}-tether-ports"
        self.started = f"{tag}-tether-started"
        self.prefix = f"{tag}-tether:{{b}}"  # Tether's own keys
        self._tag = tag

    def ready(self, index: int) -> str:
        return f"{self._tag}-tether-ready-{index}"

    def done(self, index: int) -> str:
        return f"{self._tag}-tether-done-{index}"


def host_id(index: int, n: int) -> str:
    return f"w{index}h{n:03d}"


def device_id(tag: str, index: int, n: int) -> str:
    return f"{host_id(index, n)}-d0"  # the floor finds a device's host from its name; the prefix holds the tag


def host_token(tag: str, index: int, n: int) -> str:
    return f"bench-{tag}-token-{host_id(index, n)}"


def fleet(tag: str) -> dict[str, str]:
    return {host_id(i, n): host_token(tag, i, n) for i in range(WORKERS) for n in range(HOSTS)}


class Counter:
    def __init__(self) -> None:
        self.done = 0


async def run_host(client: HostClient, device: str, started_key: str, redis: AsyncRedis, done: Counter) -> None:
    """One host as the agent drives it: claim when it has nothing, else run the assignment the
    last result's answer carried."""
    await client.heartbeat(
        [{"device_id": device, "driver": "adb", "status": "available", "attributes": {"model": "Pixel 7"}}],
        {"version": "bench", "hostname": client.host_id})
    assignment: Assignment | None = None
    while True:
        if assignment is None:
            assignment = await client.claim(uuid.uuid4().hex, CLAIM_WAIT_S)
            continue
        started = time.time()  # the job "starts"
        if assignment.goal == "probe":
            await redis.rpush(started_key, repr(started))
        else:
            done.done += 1
        answer = await client.report_result(
            task_id=assignment.task_id, attempt=assignment.attempt, lease_id=assignment.lease_id,
            status=ResultStatus.SUCCEEDED, failure_reason=None, metadata={}, next_wanted=True)
        following = answer.get("next_assignment")
        assignment = None if following is None else Assignment.from_wire(following)


async def flush(redis: AsyncRedis, key: str, done: Counter) -> None:
    """The count of jobs done, with how many writes it took so far, whenever it changed."""
    written, writes = -1, 0
    while True:
        if done.done != written:
            written, writes = done.done, writes + 1
            await redis.set(key, f"{written} {writes}")
        await asyncio.sleep(FLUSH_S)


async def serve_hosts(tag: str, index: int) -> None:
    keys = Keys(tag)
    redis = AsyncRedis.from_url(REDIS_URL)
    ports = await redis.get(keys.ports)
    if ports is None:
        raise RuntimeError("no coordinator ports in Redis: start the workers through bench.peers")
    ports = json.loads(ports)
    done = Counter()
    limits = httpx.Limits(max_connections=HOSTS * 2, max_keepalive_connections=HOSTS * 2)
    async with CoordinatorClient(f"http://127.0.0.1:{ports[index]}",
                                 transport=httpx.AsyncHTTPTransport(limits=limits)) as client:
        hosts = [asyncio.create_task(run_host(client.host(host_id(index, n), SecretStr(host_token(tag, index, n))),
                                              device_id(tag, index, n), keys.started, redis, done))
                 for n in range(HOSTS)]
        flusher = asyncio.create_task(flush(redis, keys.done(index), done))
        await asyncio.sleep(0.5)  # every host has heartbeated and its claim waits
        for task in hosts:
            if task.done():
                task.result()  # a host that failed to start: its error
        await redis.set(keys.ready(index), "1")
        await asyncio.gather(*hosts, flusher)


def work(tag: str, name: str, index: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(serve_hosts(tag, index))


def start_server(kind: str, tag: str, admin: str, hosts_file: str) -> tuple[subprocess.Popen[bytes], int]:
    """A coordinator or a floor process (``kind``, as `bench.server` takes it) in a session of its
    own (its CPU is its process group's), not yet ready."""
    port = free_port()
    env = server_env(REDIS_URL, Keys(tag).prefix, admin)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.server", kind, "--port", str(port), "--hosts-file", hosts_file],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return process, port


def wait_ready(process: subprocess.Popen[bytes], port: int, path: str) -> None:
    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"a server exited with {process.returncode}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    poll_until(ready, timeout=60, every=0.05)


class TetherPeer:
    """Tether's two coordinators, or with ``floor`` two floor processes in their place."""

    jobs = 5_000

    def __init__(self, tag: str, floor: bool = False) -> None:
        kind, ready_path = ("floor", "/healthz") if floor else ("coordinator", "/readyz")
        self.workers = f"2 × {kind}; 2 × {HOSTS} hosts (agent/client.py, one device each, eager dispatch)"
        self.tag = tag
        self.keys = Keys(tag)
        self.admin = "bench-admin-" + uuid.uuid4().hex
        self.redis = Redis.from_url(REDIS_URL)
        self.coordinators: list[subprocess.Popen[bytes]] = []
        with tempfile.NamedTemporaryFile("w", suffix=".json") as hosts_file:
            json.dump(fleet(tag), hosts_file)
            hosts_file.flush()
            try:
                started = [start_server(kind, tag, self.admin, hosts_file.name) for _ in range(WORKERS)]
                self.coordinators = [p for p, _ in started]
                for process, port in started:
                    wait_ready(process, port, ready_path)
            except BaseException:
                self.close()
                raise
        self.ports = [port for _, port in started]
        self.redis.set(self.keys.ports, json.dumps(self.ports))
        self.servers = tuple(p.pid for p in self.coordinators)
        self.loop = LoopThread()
        self.prober: Connection | None = None

    def _create_req(self, body: dict[str, Any]) -> bytes:
        return build("POST", "/api/v1/tasks", self.admin, body)

    async def _creates(self, bodies: list[dict[str, Any]]) -> None:
        """The creates, ENQUEUERS at a time on connections of their own (opened now: a
        kept-alive connection left idle is closed by the server), alternating between the
        coordinators."""
        conns = [await connect(self.ports[i % WORKERS]) for i in range(ENQUEUERS)]
        queue = iter(bodies)

        async def send(conn: Connection) -> None:
            for body in queue:
                status, answer = await conn.request(self._create_req(body), 30)
                if status != 201:
                    raise RuntimeError(f"create answered {status}: {answer[:200]!r}")

        try:
            await asyncio.gather(*(send(c) for c in conns))
        finally:
            for c in conns:
                c.close()

    def park(self, n: int) -> None:
        body = {"kind": "goal", "goal": "job", "device_id": f"{self.tag}-nowhere"}
        self.loop.run(self._creates([body] * n))

    def ready_workers(self) -> int:
        return int(self.redis.exists(*(self.keys.ready(i) for i in range(WORKERS))))

    def _done(self) -> tuple[int, int]:
        """(jobs done, writes the workers spent counting them)."""
        values = self.redis.mget([self.keys.done(i) for i in range(WORKERS)])
        pairs = [tuple(int(x) for x in v.split()) for v in values if v is not None]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def run(self, n: int) -> int:
        body = {"kind": "goal", "goal": "job", "selector": {"driver": "adb"}}
        done0, writes0 = self._done()
        self.loop.run(self._creates([body] * n))
        polls = poll_until(lambda: self._done()[0] - done0 >= n)
        return polls + self._done()[1] - writes0

    def probe(self) -> float:
        raw = self._create_req({"kind": "goal", "goal": "probe", "device_id": device_id(self.tag, PROBE_WORKER, 0)})

        async def create() -> None:
            if self.prober is None or self.prober.closed:
                self.prober = await connect(self.ports[CREATE_ON])
            status, answer = await self.prober.request(raw, 10)
            if status != 201:
                raise RuntimeError(f"probe create answered {status}: {answer[:200]!r}")

        sent = time.time()
        self.loop.run(create())
        popped = self.redis.blpop([self.keys.started], timeout=10)
        if popped is None:
            raise TimeoutError("tether probe job not started within 10 s")
        return (float(popped[1]) - sent) * 1000

    def close(self) -> None:
        if hasattr(self, "loop"):
            if self.prober is not None:
                self.prober.close()
            self.loop.close()
        stop_workers(self.coordinators)
        self.redis.close()


def make(tag: str, name: str) -> TetherPeer:
    return TetherPeer(tag, floor=name == "tether-floor")
