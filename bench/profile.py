"""python -m bench.profile [--seconds S]: where a coordinator's CPU goes under the lifecycle load.

The load of row 3 (two coordinator processes, every host running create -> claim -> renew ->
result back to back), with py-spy (the `bench` extra) sampling coordinator A. Each sample is put
in a bucket by its innermost frame, the buckets issue 12's profile used, and their shares are
printed as a Markdown table. py-spy reads another process's memory: it needs ptrace rights
(root, or `kernel.yama.ptrace_scope` 0).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import sys
import tempfile

import uvloop
from redis.asyncio import Redis

from bench.context import PRESETS, Bench
from bench.drivers import fan_out, lifecycles
from bench.loadgen import in_child
from bench.procs import redis_info, start_server
from bench.requests import fleet, heartbeat_req

HOSTS = 128
WARMUP_S = 2.0
SAMPLES_PER_S = 250

# (bucket, pattern on the innermost frame "function (file:line)"), first match wins.
BUCKETS: list[tuple[str, re.Pattern[str]]] = [
    ("writing responses (send)", re.compile(r"OneWriteResponses\.write|RequestResponseCycle\.send ")),
    ("the event loop (uvloop's own code: epoll, callbacks)", re.compile(r"Runner\.run ")),
    ("redis-py and the auto-pipeline", re.compile(
        r"redis/|asyncio/streams\.py|coordinator/(autopipeline|scripts|redis_client)\.py")),
    ("asyncio's Python (futures, locks, timeouts)", re.compile(r"asyncio/")),
    ("uvicorn: reading requests, connections", re.compile(r"uvicorn/|coordinator/server\.py")),
    ("Starlette: routing, requests", re.compile(r"starlette/")),
    ("the wake-up inbox", re.compile(r"coordinator/waiter\.py")),
    ("metrics (prometheus-client)", re.compile(r"prometheus_client/")),
    ("our own code (coordinator/, wire/)", re.compile(r"coordinator/|wire/")),
]


def bucket_of(frame: str) -> str:
    for name, pattern in BUCKETS:
        if pattern.search(frame):
            return name
    return "other"


def shares(raw: str) -> dict[str, float]:
    """Share of samples per bucket, from py-spy's raw output ("frame;frame;... count" lines)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            counts[bucket_of(stack.split(";")[-1])] += int(count)
    total = sum(counts.values()) or 1
    return {name: n / total for name, n in counts.most_common()}


async def profile(seconds: float) -> dict[str, float]:
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    redis = Redis.from_url(redis_url)
    _, redis_pid, redis_port = await redis_info(redis)
    b = Bench(PRESETS["small"], redis_url, redis, redis_pid, redis_port)
    hosts = fleet(HOSTS, "prof")
    prefix = b.prefix("profile")
    env = b.env(prefix)
    a = await start_server("coordinator", env, hosts)
    c2 = await start_server("coordinator", env, hosts)
    try:
        await fan_out(a.port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in hosts.items()])
        load = asyncio.ensure_future(in_child(lifecycles, (a.port, c2.port), list(hosts.items()), b.admin,
                                              WARMUP_S, seconds + 1, {"coordinator A": a.pid}))
        await asyncio.sleep(WARMUP_S)
        with tempfile.NamedTemporaryFile(suffix=".txt") as out:
            spy = await asyncio.create_subprocess_exec(
                "py-spy", "record", "--format", "raw", "--nonblocking", "--rate", str(SAMPLES_PER_S),
                "--duration", str(int(seconds)), "--pid", str(a.pid), "--output", out.name,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            _, err = await spy.communicate()
            if spy.returncode != 0:
                raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
            raw = open(out.name).read()
        await load
    finally:
        a.stop()
        c2.stop()
        await b.cleanup(prefix)
        await redis.aclose()
    return shares(raw)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        print("bench.profile: py-spy not found (pip install '.[bench]')", file=sys.stderr)
        return 2
    result = uvloop.run(profile(args.seconds))
    print("| where coordinator A's CPU goes (py-spy, innermost frame) | share |")
    print("|---|---|")
    for name, share in result.items():
        print(f"| {name} | {share:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
