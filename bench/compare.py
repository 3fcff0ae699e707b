"""python -m bench.compare [--pairs N] TREE [TREE ...]: idle dispatch of several builds, paired.

Each TREE is a checkout of this repository (a ``git worktree`` of another commit, say). Each runs
as row 4a runs Tether (two coordinator processes, a task created on one for the host whose poll
waits on the other), beside the dispatch floor doing the contract's work (row 4g, from this
checkout), all up throughout. Probes go in rounds, one per build in a shuffled order each round,
so the machine's drift, which on this VM moves idle latencies by more than the differences
sought, falls on every build alike. Reported: each build's p50, and its difference from the first
build's probe of the same round (median, and mean with two standard errors).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import statistics
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import uvloop
from redis.asyncio import Redis

from bench.context import server_env
from bench.dispatch import WARMUP, Prober
from bench.drivers import fan_out
from bench.floor_lifecycle import LifecycleFloor
from bench.procs import REPO, Server, delete_prefix, start_server
from bench.requests import claim_req, create_req, fleet, heartbeat_req, result_req

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
HOST, TOKEN = next(iter(fleet(1, "compare").items()))
DEVICE = f"{HOST}-d0"


@contextlib.asynccontextmanager
async def _pair(kind: str, env: dict[str, str], tree: Path) -> AsyncIterator[tuple[Server, Server]]:
    hosts = {HOST: TOKEN} if kind == "coordinator" else None
    servers: list[Server] = []
    try:
        for _ in range(2):
            servers.append(await start_server(kind, env, hosts, tree))
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


def _settle(answer: bytes) -> bytes:
    """The result that frees the device of a probe's assignment for the next probe."""
    return result_req(HOST, TOKEN, orjson.loads(answer))


@dataclass
class Probed:
    """Each build's latencies (ms, round by round), and its two processes' ports."""

    latency: dict[str, list[float]]
    ports: dict[str, tuple[int, int]]  # (creator, poller)


async def probe_builds(trees: list[Path], pairs: int) -> Probed:
    """``pairs`` probes of each tree's build and of 4g, in rounds, all up throughout. The builds
    are named ``"<n>:<tree>"`` and ``"4g"``."""
    redis = Redis.from_url(REDIS_URL)
    admin = "compare-admin-" + uuid.uuid4().hex
    run = uuid.uuid4().hex[:8]
    names = [f"{n}:{tree}" for n, tree in enumerate(trees)] + ["4g"]
    prefixes = [f"compare-{run}-{n}:{{b}}" for n in range(len(names))]
    poll_raw, create_raw = claim_req(HOST, TOKEN, 10), create_req(admin, DEVICE)
    try:
        async with contextlib.AsyncExitStack() as stack:
            probers: dict[str, Prober] = {}
            ports: dict[str, tuple[int, int]] = {}
            for name, tree, prefix in zip(names, [*trees, REPO], prefixes, strict=True):
                kind = "floor" if name == "4g" else "coordinator"
                env = server_env(REDIS_URL, prefix, admin)
                creator, poller = await stack.enter_async_context(_pair(kind, env, tree))
                if kind == "floor":
                    await LifecycleFloor(redis, prefix).add_free([DEVICE])
                else:
                    await fan_out(creator.port, [heartbeat_req(HOST, TOKEN, [DEVICE])])
                probers[name] = await Prober.open(poller.port, creator.port, poll_raw, create_raw, _settle)
                ports[name] = (creator.port, poller.port)
                stack.callback(probers[name].close)
            latency: dict[str, list[float]] = {name: [] for name in names}
            for n in range(WARMUP + pairs):
                for name in random.sample(names, len(names)):
                    _, seconds = await probers[name].once()
                    if n >= WARMUP:
                        latency[name].append(seconds * 1000)
    finally:
        for prefix in prefixes:
            await delete_prefix(redis, prefix)
        await redis.aclose()
    return Probed(latency, ports)


async def compare(trees: list[Path], pairs: int) -> None:
    latency = (await probe_builds(trees, pairs)).latency
    names = list(latency)
    first = latency[names[0]]
    print(f"{'build':48s} {'p50 ms':>7s}  difference from build 0, paired: median, mean ± 2 SE (ms)")
    for name in names:
        diffs = [a - b for a, b in zip(latency[name], first, strict=True)]
        mean = statistics.fmean(diffs)
        two_se = 2 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
        print(f"{name[:48]:48s} {statistics.median(latency[name]):7.3f}  "
              f"{statistics.median(diffs):+.3f}, {mean:+.3f} ± {two_se:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts of this repository")
    parser.add_argument("--pairs", type=int, default=2000, help="probes of each build (default 2,000)")
    args = parser.parse_args()
    for tree in args.trees:
        if not (tree / "coordinator").is_dir() or not (tree / "bench" / "server.py").is_file():
            parser.error(f"{tree} is not a checkout of this repository")
    uvloop.run(compare([tree.resolve() for tree in args.trees], args.pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
