"""python -m bench.peers: the queue a Python user would otherwise pick, on the same Redis and
machine, measured the way Tether's rows are. saq so far (`pip install saq`, a bench extra, never
a runtime dependency); celery, arq and rq are still to come.

Rows: idle dispatch (enqueue -> the job function starts, one at a time), jobs/s with two worker
processes (trivial jobs, enqueued ahead, closed when the last one is done), CPU and Redis
commands per job over that window, and bytes per queued job (used_memory delta over 5,000
jobs queued with no worker running).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from redis.asyncio import Redis

from bench.system import CpuWindow

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
JOBS = 5_000
PROBES = 200


async def started_at(ctx: dict[str, Any]) -> float:
    """The trivial job: it returns when it started."""
    return time.time()


async def _worker(queue_name: str) -> None:
    from saq import Queue, Worker

    queue = Queue.from_url(REDIS_URL, name=queue_name)
    worker = Worker(queue, functions=[started_at], concurrency=10)
    await worker.start()


async def _redis_cpu_and_calls(redis: Redis) -> tuple[float, int]:
    cpu = await redis.info("cpu")
    calls = sum(int(v["calls"]) for k, v in (await redis.info("commandstats")).items() if k != "cmdstat_info")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls


async def _drained(queue: Any) -> None:
    while True:
        info = await queue.info()
        if info["queued"] == 0 and info["active"] == 0:
            return
        await asyncio.sleep(0.01)


async def bench_saq() -> dict[str, str]:
    from saq import Queue

    redis = Redis.from_url(REDIS_URL)
    redis_pid = int((await redis.info("server"))["process_id"])
    names = [f"bench-saq-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    parked, queue = Queue.from_url(REDIS_URL, name=names[0]), Queue.from_url(REDIS_URL, name=names[1])
    await parked.connect()
    await queue.connect()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        # bytes per queued job: jobs nobody works on
        memory0 = int((await redis.info("memory"))["used_memory"])
        await asyncio.gather(*(parked.enqueue("started_at") for _ in range(JOBS)))
        per_job_bytes = (int((await redis.info("memory"))["used_memory"]) - memory0) / JOBS

        # jobs/s: two workers, idle, then every job enqueued at once until all are done
        workers = [subprocess.Popen([sys.executable, "-m", "bench.peers", "worker", names[1]])  # noqa: ASYNC220
                   for _ in range(2)]
        while len((await queue.info())["workers"]) < len(workers):
            await asyncio.sleep(0.05)
        window = CpuWindow({"redis": redis_pid, **{f"worker {i}": w.pid for i, w in enumerate(workers)}})
        cpu0, calls0 = await _redis_cpu_and_calls(redis)
        own0 = time.process_time()
        window.start()
        started = time.perf_counter()
        await asyncio.gather(*(queue.enqueue("started_at") for _ in range(JOBS)))
        await _drained(queue)
        seconds = time.perf_counter() - started
        cpu = window.stop()
        own = time.process_time() - own0
        cpu1, calls1 = await _redis_cpu_and_calls(redis)

        # idle dispatch: one job at a time, from enqueue to the job function's start
        latencies = []
        for _ in range(PROBES):
            sent = time.time()
            job = await queue.enqueue("started_at")
            await job.refresh(until_complete=10)
            latencies.append((job.result - sent) * 1000)
            await asyncio.sleep(0.01)
        latencies.sort()
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(10)
        for name in names:
            async for key in redis.scan_iter(match=f"saq:{name}*", count=1000):
                await redis.unlink(key)
        await redis.aclose()
        await parked.disconnect()
        await queue.disconnect()
    servers = sum(v for k, v in cpu.items() if k != "machine")  # the workers and Redis, in cores
    return {
        "idle dispatch p50 / p99": f"{statistics.median(latencies):.2f} / {latencies[int(0.99 * len(latencies))]:.2f} ms",
        "jobs/s, two workers (enqueue included)": f"{JOBS / seconds:,.0f}",
        "CPU per job: workers + Redis (+ the enqueuing client)":
            f"{servers * seconds / JOBS * 1000:.2f} ms (+ {own / JOBS * 1000:.2f} ms)",
        "Redis commands per job": f"{(calls1 - calls0) / JOBS:.1f}",
        "Redis CPU per job": f"{(cpu1 - cpu0) / JOBS * 1000:.3f} ms",
        "bytes per queued job": f"{per_job_bytes:,.0f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="bench", choices=["bench", "worker"])
    parser.add_argument("queue", nargs="?")
    args = parser.parse_args()
    if args.role == "worker":
        asyncio.run(_worker(args.queue))
        return
    figures = asyncio.run(bench_saq())
    print("| measure | saq |\n|---|---|")
    for measure, value in figures.items():
        print(f"| {measure} | {value} |")


if __name__ == "__main__":
    main()
