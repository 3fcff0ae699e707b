"""What one lifecycle and one queued task cost Redis: commands (those the scripts run inside
included: Redis's commandstats count them), Redis CPU, and memory.

One coordinator process, one host with one device; lifecycles (create, claim, renew, result) one
at a time, so nothing else runs between the two readings of INFO. Then tasks are queued (aimed at
a device that does not exist) and the memory they hold is read, in all and key by key.
"""

from __future__ import annotations

from typing import Any

import orjson
from redis.asyncio import Redis

from bench.context import Bench
from bench.drivers import expect, fan_out
from bench.loadgen import connect
from bench.procs import glob_escape, start_server
from bench.report import Row
from bench.requests import (
    claim_req,
    create_req,
    fleet,
    heartbeat_req,
    renew_req,
    result_req,
)

LIFECYCLES = 500
QUEUED = 5_000
TARGET_COMMANDS = 30  # issue 12: Redis commands per lifecycle
TARGET_BYTES = 450  # issue 12: bytes per queued task


async def _commandstats(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def _redis_cpu_s(redis: Redis) -> float:
    cpu = await redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def _used_memory(redis: Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def footprint(b: Bench) -> list[Row]:
    ((host, token),) = fleet(1, "foot").items()
    prefix = b.prefix("foot")
    coord = await start_server("coordinator", b.env(prefix), {host: token})
    try:
        await fan_out(coord.port, [heartbeat_req(host, token, [f"{host}-d0"])])
        conn = await connect(coord.port)

        async def lifecycle() -> None:
            await expect(conn, create_req(b.admin, f"{host}-d0"), 201)
            assignment = orjson.loads(await expect(conn, claim_req(host, token, 0), 200))
            await expect(conn, renew_req(host, token, assignment), 200)
            await expect(conn, result_req(host, token, assignment), 200)

        for _ in range(20):  # scripts loaded, connections open, the feed past its first entries
            await lifecycle()
        calls0, cpu0 = await _commandstats(b.redis), await _redis_cpu_s(b.redis)
        for _ in range(LIFECYCLES):
            await lifecycle()
        calls1, cpu1 = await _commandstats(b.redis), await _redis_cpu_s(b.redis)
        # the two INFO readings themselves are not the lifecycles'
        per_command = {name: (calls1[name] - calls0.get(name, 0)) / LIFECYCLES for name in calls1
                       if name != "info" and calls1[name] != calls0.get(name, 0)}
        commands = sum(per_command.values())
        evalshas = per_command.get("evalsha", 0.0)
        cpu_ms = (cpu1 - cpu0) * 1000 / LIFECYCLES

        memory0 = await _used_memory(b.redis)
        await fan_out(coord.port, [create_req(b.admin, "no-such-device")] * QUEUED, concurrency=16)
        memory1 = await _used_memory(b.redis)
        per_task = (memory1 - memory0) / QUEUED
        by_key = await _memory_by_key(b.redis, prefix)
        conn.close()
    finally:
        coord.stop()
        await b.cleanup(prefix)

    top = ", ".join(f"{name} {n:.1f}" for name, n in sorted(per_command.items(), key=lambda x: -x[1])[:8])
    heaviest = ", ".join(f"{k} {v / QUEUED:.0f}" for k, v in sorted(by_key.items(), key=lambda x: -x[1])[:6])
    # The feed is capped (FEED_EVENTS_KEPT entries), so past that many tasks it stops growing.
    uncapped = per_task - by_key.get("feed", 0) / QUEUED
    return [
        Row("8a", "Redis commands per lifecycle (create, claim, renew, result), scripts' own included",
            f"{commands:.1f} ({evalshas:.0f} EVALSHA + {commands - evalshas:.1f} inside them or beside)",
            top, f"<= {TARGET_COMMANDS}", "met" if commands <= TARGET_COMMANDS else "MISSED", ""),
        Row("8b", "Redis CPU per lifecycle, one lifecycle at a time (no batching)", f"{cpu_ms:.3f} ms", "",
            "<= the best peer's per job", "", ""),
        Row("8c", f"bytes per queued task ({QUEUED:,} queued, used_memory delta)", f"{per_task:,.0f} bytes",
            f"by key, bytes per task: {heaviest}; {uncapped:,.0f} without the capped feed", f"<= {TARGET_BYTES}",
            "met" if per_task <= TARGET_BYTES else "MISSED", ""),
    ]


async def _memory_by_key(redis: Redis, prefix: str) -> dict[str, int]:
    """MEMORY USAGE of every key of the prefix, the per-id keys summed by kind."""
    sizes: dict[str, int] = {}
    async for raw in redis.scan_iter(match=glob_escape(prefix) + ":*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        kind = key[len(prefix) + 1:].split(":", 1)[0]
        usage: Any = await redis.memory_usage(key, samples=0)
        sizes[kind] = sizes.get(kind, 0) + int(usage or 0)
    return sizes
