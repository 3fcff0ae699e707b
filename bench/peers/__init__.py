"""python -m bench.peers: two queues a Python user would otherwise pick (saq and celery), on
the same Redis and machine, measured the way Tether's rows are. They come from the `bench` extra
(`pip install '.[bench]'`), never a runtime dependency. The `tether` column is Tether itself
measured alike (`bench/peers/tether.py`: two coordinators, hosts on the agent's client), and
`tether-floor` its floor: the same with two bare Starlette processes for the coordinators.

Every peer runs its stock worker, two worker processes started here, and one trivial job that
returns the time it started. Rows: idle dispatch (enqueue in this process -> the job function
starts in a worker, one job at a time), jobs/s (all jobs enqueued at once while the two workers
wait, the window closing when the last one is done), the CPU of this process and of the workers'
process groups over that window, Redis commands and Redis CPU over it, Redis commands/s while
the workers idle (which shows other clients' traffic too), and bytes per queued job (used_memory
delta over jobs queued where no worker reads).

Isolation on a shared Redis: every key a peer writes holds a tag of this run (in a queue name, a
key prefix or a job id; it lengthens some key names by about ten bytes), and the keys matching
it are unlinked after each peer. Never FLUSHDB."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from redis import Redis

from bench.system import CLK_TCK, cpu_seconds

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PARKED = 5_000
PROBES = 100
WORKERS = 2
ENQUEUERS = 20  # concurrent enqueues for asyncio clients: unbounded, each opens a Redis connection
IDLE_ROW = "Redis commands/s, workers idle (other clients included)"
PROBE_SPACING_S = 0.01  # between idle dispatch probes, so each meets idle workers
# column -> the module with its Peer and work(). saq: the fastest peer, measured in every
# `python -m bench` run. celery: the queue most Python users already run, and the next peer on
# dispatch and Redis CPU per job; arq (polls every 0.5 s) and rq (forks per job) were further off
# (docs/benchmarks.md, "Beside the peers"), and git history keeps their modules.
# tether: Tether itself, two coordinators and hosts on the agent's client, measured alike (issue 56).
# tether-floor: the same with two bare floor processes for the coordinators, the least that flow
# costs over HTTP with the agent's client (bench/peers/tether.py).
PEERS = {"saq": "saq", "celery": "celery", "tether": "tether", "tether-floor": "tether"}
T = TypeVar("T")


class Peer(Protocol):
    """One queue, seen from the enqueuing process."""

    workers: str  # what the worker processes are, for the table
    jobs: int  # jobs in the throughput window
    servers: tuple[int, ...]  # process groups besides the workers whose CPU counts (Tether's coordinators)

    def park(self, n: int) -> None:
        """Enqueue n jobs on a queue no worker reads."""

    def ready_workers(self) -> int:
        """How many workers serve the benchmark queue, as the peer itself tells."""

    def run(self, n: int) -> int:
        """Enqueue n jobs, return once all are done: the Redis commands spent watching them."""

    def probe(self) -> float:
        """One job on an idle queue: ms from before the enqueue to the job function's start."""

    def close(self) -> None: ...


def make(name: str, tag: str) -> Peer:
    module = importlib.import_module(f"bench.peers.{PEERS[name]}")
    return module.make(tag, name)


def poll_until(done: Callable[[], bool], timeout: float = 120, every: float = 0.01) -> int:
    """Call done() until it holds; return how many calls that took."""
    deadline = time.monotonic() + timeout
    calls = 1
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("gave up waiting")
        time.sleep(every)
        calls += 1
    return calls


class LoopThread:
    """An asyncio peer's client loop, kept running in a thread between calls: saq's pubsub reader
    is a background task, which must finish closing while the bench sleeps between probes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def bounded(coros: list[Awaitable[Any]], limit: int = ENQUEUERS) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[Any]) -> None:
        async with gate:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


def group_cpu(pgid: int) -> float:
    """CPU seconds of a worker's whole process group, reaped children included: celery's pool
    processes are where its jobs run."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
        except OSError:  # exited since the listing
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / CLK_TCK


def redis_cpu_and_calls(redis: Redis) -> tuple[float, int]:
    cpu = redis.info("cpu")
    stats = redis.info("commandstats")
    calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls


def used_memory(redis: Redis) -> int:
    return int(redis.info("memory")["used_memory"])


def start_workers(name: str, tag: str, log: IO[bytes]) -> list[subprocess.Popen[bytes]]:
    # Each in its own session, so its pool children and work horses share its process group:
    # that is what group_cpu() reads and what stop_workers() can kill as a whole.
    return [subprocess.Popen([sys.executable, "-m", "bench.peers", "worker", name, tag, str(i)],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            for i in range(WORKERS)]


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        if w.poll() is None:
            w.terminate()
    for w in workers:
        try:
            w.wait(15)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
        # whatever the worker left of its group (a pool child, a work horse)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(w.pid, signal.SIGKILL)


def unlink_tagged(redis: Redis, tag: str) -> None:
    for key in redis.scan_iter(match=f"*{tag}*", count=1000):
        redis.unlink(key)


def bytes_per_queued_job(peer: Peer, redis: Redis) -> float:
    memory0 = used_memory(redis)
    peer.park(PARKED)
    return (used_memory(redis) - memory0) / PARKED


def wait_ready(peer: Peer, workers: list[subprocess.Popen[bytes]]) -> None:
    def ready() -> bool:
        if any(w.poll() is not None for w in workers):
            raise RuntimeError("a worker exited early")
        return peer.ready_workers() >= len(workers)

    poll_until(ready, timeout=60, every=0.05)


def idle_commands_per_second(redis: Redis) -> int:
    """Redis is shared: what idle workers and any other client send is in every figure too."""
    _, calls0 = redis_cpu_and_calls(redis)
    time.sleep(1)
    return redis_cpu_and_calls(redis)[1] - calls0


def throughput(peer: Peer, redis: Redis, pgids: list[int]) -> dict[str, float]:
    """peer.jobs through the workers, per job: CPU (the workers' process groups ``pgids`` and the
    peer's ``servers``, which are also shown alone), Redis commands and Redis CPU."""
    servers = list(peer.servers)
    workers0, own0 = sum(map(group_cpu, pgids)), cpu_seconds(os.getpid())
    servers0 = sum(map(group_cpu, servers))
    redis_cpu0, calls0 = redis_cpu_and_calls(redis)
    started = time.perf_counter()
    watching = peer.run(peer.jobs)
    seconds = time.perf_counter() - started
    workers, own = sum(map(group_cpu, pgids)) - workers0, cpu_seconds(os.getpid()) - own0
    served = sum(map(group_cpu, servers)) - servers0
    redis_cpu1, calls1 = redis_cpu_and_calls(redis)
    return {"jobs/s": peer.jobs / seconds, "cpu ms": (own + workers + served) / peer.jobs * 1000,
            "client cpu ms": own / peer.jobs * 1000, "servers cpu ms": served / peer.jobs * 1000,
            "commands": (calls1 - calls0 - watching) / peer.jobs,
            "redis cpu ms": (redis_cpu1 - redis_cpu0) / peer.jobs * 1000}


def dispatch_ms(peer: Peer) -> list[float]:
    latencies = []
    for _ in range(PROBES):
        latencies.append(peer.probe())
        time.sleep(PROBE_SPACING_S)
    return sorted(latencies)


@dataclass(frozen=True)
class Figures:
    """One peer's figures, as numbers."""

    workers: str
    jobs: int
    dispatch_ms: list[float]  # sorted
    jobs_per_s: float
    cpu_ms: float  # per job, this process and the workers
    client_cpu_ms: float
    commands: float  # Redis commands per job
    idle_commands: int  # Redis commands/s while the workers idle
    redis_cpu_ms: float  # per job
    bytes_per_job: float
    servers_cpu_ms: float = 0.0  # per job, of the peer's servers (in cpu_ms too)


@contextlib.contextmanager
def session(name: str, peer: Peer, tag: str, redis: Redis) -> Iterator[Callable[[], list[subprocess.Popen[bytes]]]]:
    """Around one use of a peer: ``start()`` its workers and wait until they serve. Afterwards the
    workers are stopped, the peer closed and its tag's keys unlinked; if anything failed, the
    workers' output is shown."""
    workers: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryFile() as log:
        def start() -> list[subprocess.Popen[bytes]]:
            workers.extend(start_workers(name, tag, log))
            wait_ready(peer, workers)
            return workers

        try:
            yield start
        except BaseException:
            log.seek(0)
            print(f"{name} workers' output:\n" + log.read().decode(errors="replace")[-3000:], file=sys.stderr)
            raise
        finally:
            try:
                stop_workers(workers)
                peer.close()
            finally:
                unlink_tagged(redis, tag)


def figures(name: str, peer: Peer, tag: str, redis: Redis) -> Figures:
    with session(name, peer, tag, redis) as start:
        per_job_bytes = bytes_per_queued_job(peer, redis)
        workers = start()
        idle = idle_commands_per_second(redis)
        run = throughput(peer, redis, [w.pid for w in workers])
        latencies = dispatch_ms(peer)
    return Figures(peer.workers, peer.jobs, latencies, run["jobs/s"], run["cpu ms"], run["client cpu ms"],
                   run["commands"], idle, run["redis cpu ms"], per_job_bytes, run["servers cpu ms"])


def measure_alone(name: str) -> Figures:
    """One peer measured on its own tag and connection: the main bench's same-run comparison."""
    tag = f"tb{secrets.token_hex(4)}"
    redis = Redis.from_url(REDIS_URL)
    try:
        return figures(name, make(name, tag), tag, redis)
    finally:
        redis.close()


def measure(name: str, peer: Peer, tag: str, redis: Redis) -> dict[str, str]:
    f = figures(name, peer, tag, redis)
    latencies = f.dispatch_ms
    return {
        "workers": f.workers,
        f"idle dispatch p50 / p99 ({PROBES} probes)":
            f"{statistics.median(latencies):.2f} / {latencies[int(0.99 * len(latencies))]:.2f} ms",
        "jobs/s, two workers (all enqueued at once, enqueue included)":
            f"{f.jobs_per_s:,.0f} ({f.jobs:,} jobs)",
        "CPU per job: all (client; workers; servers)": f"{f.cpu_ms:.2f} ms ({f.client_cpu_ms:.2f}; "
            f"{f.cpu_ms - f.client_cpu_ms - f.servers_cpu_ms:.2f}"
            + (f"; {f.servers_cpu_ms:.2f})" if f.servers_cpu_ms else ")"),
        "Redis commands per job": f"{f.commands:.1f}",
        IDLE_ROW: f"{f.idle_commands:,}",
        "Redis CPU per job": f"{f.redis_cpu_ms:.3f} ms",
        "bytes per queued job": f"{f.bytes_per_job:,.0f}",
    }
