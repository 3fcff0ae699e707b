"""What one lifecycle and one queued task cost Redis: commands (those the scripts run inside
included: Redis's commandstats count them), Redis CPU, and memory.

One coordinator process, one host with one device; lifecycles (create, claim, renew, result) one
at a time, so nothing else runs between the two readings of INFO. Then tasks are queued (aimed at
a device that does not exist) and the memory they hold is read, in all and key by key.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson
from redis.asyncio import Redis

from bench.context import Bench
from bench.drivers import expect, fan_out
from bench.floor_lifecycle import (
    LifecycleFloor,
    Lifecycles,
    LifecycleScripts,
    ScriptFigures,
    TetherScripts,
)
from bench.loadgen import connect
from bench.procs import glob_escape, start_server
from bench.report import Row
from bench.requests import (
    claim_req,
    create_body,
    create_req,
    fleet,
    heartbeat_req,
    renew_req,
    result_req,
)

LIFECYCLES = 500
BY_REQUEST_LIFECYCLES = 20
QUEUED = 5_000
TARGET_COMMANDS = 40  # issue 37 (issue 12 asked 30, below the floor 8f): Redis commands per lifecycle
TARGET_BYTES = 450  # issue 12: bytes per queued task


async def _commandstats(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _commands(before: dict[str, int], after: dict[str, int]) -> int:
    """Commands Redis ran between two readings of its commandstats, but the readings' own INFO."""
    return sum(n - before.get(name, 0) for name, n in after.items() if name != "info")


async def _script_us(redis: Redis) -> int:
    """Microseconds Redis spent running scripts (FCALL and EVALSHA, the commands they issue
    included), as its commandstats count them."""
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in ("fcall", "evalsha"))


async def _redis_cpu_s(redis: Redis) -> float:
    cpu = await redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def _used_memory(redis: Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


FLOOR_CONCURRENCY = 64


async def _scripts_alone(b: Bench, lifecycles: Lifecycles, prefix: str) -> ScriptFigures:
    # The create body without a target: each lifecycle aims at its own host's device.
    body: dict[str, object] = {k: v for k, v in create_body("").items() if k != "device_id"}
    try:
        await lifecycles.load(FLOOR_CONCURRENCY)
        await lifecycles.run(20, 1, body)  # the feed and the clients past their first entries
        calls0, us0, cpu0 = await _commandstats(b.redis), await _script_us(b.redis), await _redis_cpu_s(b.redis)
        await lifecycles.run(LIFECYCLES, 1, body)
        calls1, us1, cpu1 = await _commandstats(b.redis), await _script_us(b.redis), await _redis_cpu_s(b.redis)
        await lifecycles.run(LIFECYCLES * 4, FLOOR_CONCURRENCY, body)
        cpu2 = await _redis_cpu_s(b.redis)
    finally:
        await b.cleanup(prefix)
    commands = _commands(calls0, calls1) / LIFECYCLES
    return ScriptFigures(commands, (us1 - us0) / LIFECYCLES, (cpu1 - cpu0) * 1000 / LIFECYCLES,
                         (cpu2 - cpu1) * 1000 / (LIFECYCLES * 4))


async def lifecycle_scripts(b: Bench) -> LifecycleScripts:
    """The lifecycle floor's scripts and Tether's, driven alike straight at Redis: commands and
    Redis CPU per lifecycle, one at a time and FLOOR_CONCURRENCY at once."""
    floor_prefix, tether_prefix = b.prefix("lifefloor"), b.prefix("lifescripts")
    floor = await _scripts_alone(b, LifecycleFloor(b.redis, floor_prefix), floor_prefix)
    tether = await _scripts_alone(b, TetherScripts(b.redis, tether_prefix), tether_prefix)
    return LifecycleScripts(floor, tether)


async def footprint(b: Bench) -> list[Row]:
    ((host, token),) = fleet(1, "foot").items()
    prefix = b.prefix("foot")
    coord = await start_server("coordinator", b.env(prefix), {host: token}, checkout=b.build)
    try:
        await fan_out(coord.port, [heartbeat_req(host, token, [f"{host}-d0"])])
        conn = await connect(coord.port)

        by_request = dict.fromkeys(("create", "claim", "renew", "result"), 0)

        async def call(name: str, raw: bytes, status: int, counted: bool) -> bytes:
            before = await _commandstats(b.redis) if counted else {}
            body = await expect(conn, raw, status)
            if counted:
                by_request[name] += _commands(before, await _commandstats(b.redis))
            return body

        async def lifecycle(counted: bool = False) -> None:
            await call("create", create_req(b.admin, f"{host}-d0"), 201, counted)
            assignment = orjson.loads(await call("claim", claim_req(host, token, 0), 200, counted))
            await call("renew", renew_req(host, token, assignment), 200, counted)
            await call("result", result_req(host, token, assignment), 200, counted)

        for _ in range(20):  # scripts loaded, connections open, the feed past its first entries
            await lifecycle()
        calls0, us0, cpu0 = await _commandstats(b.redis), await _script_us(b.redis), await _redis_cpu_s(b.redis)
        for _ in range(LIFECYCLES):
            await lifecycle()
        calls1, us1, cpu1 = await _commandstats(b.redis), await _script_us(b.redis), await _redis_cpu_s(b.redis)
        script_us = (us1 - us0) / LIFECYCLES
        # the two INFO readings themselves are not the lifecycles'
        per_command = {name: (calls1[name] - calls0.get(name, 0)) / LIFECYCLES for name in calls1
                       if name != "info" and calls1[name] != calls0.get(name, 0)}
        commands = sum(per_command.values())
        # Each request's own, read around it (what each script's header lists, lua/): fewer
        # lifecycles, as each reads INFO eight times.
        for _ in range(BY_REQUEST_LIFECYCLES):
            await lifecycle(counted=True)
        fcalls = per_command.get("fcall", 0.0)
        cpu_ms = (cpu1 - cpu0) * 1000 / LIFECYCLES

        # The steady state of a busy device (eager dispatch, row 8s): one task queued ahead, so a
        # lifecycle is create (queued behind the running one) + renew + a result whose answer
        # carries the next assignment.
        await call("create", create_req(b.admin, f"{host}-d0"), 201, False)
        running = orjson.loads(await call("claim", claim_req(host, token, 0), 200, False))

        async def steady() -> None:
            nonlocal running
            await call("create", create_req(b.admin, f"{host}-d0"), 201, False)
            await call("renew", renew_req(host, token, running), 200, False)
            answer = orjson.loads(await call("result", result_req(host, token, running, eager=True), 200, False))
            running = answer.get("next_assignment")
            if running is None:  # a build without eager dispatch (bench ab against one): claimed
                running = orjson.loads(await call("claim", claim_req(host, token, 0), 200, False))

        for _ in range(20):
            await steady()
        calls2, us2 = await _commandstats(b.redis), await _script_us(b.redis)
        for _ in range(LIFECYCLES):
            await steady()
        calls3, us3 = await _commandstats(b.redis), await _script_us(b.redis)
        steady_commands, steady_us = _commands(calls2, calls3) / LIFECYCLES, (us3 - us2) / LIFECYCLES
        await call("result", result_req(host, token, running), 200, False)

        memory0 = await _used_memory(b.redis)
        await fan_out(coord.port, [create_req(b.admin, "no-such-device")] * QUEUED, concurrency=16)
        memory1 = await _used_memory(b.redis)
        per_task = (memory1 - memory0) / QUEUED
        by_key = await _memory_by_key(b.redis, prefix)
        conn.close()
        zset_entry, hash_entry = await _entry_sizes(b.redis, prefix, orjson.dumps(create_body(f"{host}-d0")))
    finally:
        coord.stop()
        await b.cleanup(prefix)

    if b.lifecycle_scripts is None:
        b.lifecycle_scripts = await lifecycle_scripts(b)
    lf, ts = b.lifecycle_scripts.floor, b.lifecycle_scripts.tether
    if commands <= TARGET_COMMANDS:
        commands_verdict = "met"
    elif lf.commands > TARGET_COMMANDS:
        commands_verdict = "out of reach: the floor (8f) is above it"
    else:
        commands_verdict = "MISSED"
    top = ", ".join(f"{name} {n:.1f}" for name, n in sorted(per_command.items(), key=lambda x: -x[1])[:8])
    heaviest = ", ".join(f"{k} {v / QUEUED:.0f}" for k, v in sorted(by_key.items(), key=lambda x: -x[1])[:6])
    # The feed is capped (FEED_EVENTS_KEPT entries): past that many events it stops growing, so
    # what a queued task holds for as long as it waits is the figure without it.
    uncapped = per_task - by_key.get("feed", 0) / QUEUED
    floor = INDEXES_PER_QUEUED_TASK * zset_entry + hash_entry
    if uncapped <= TARGET_BYTES:
        verdict = "met"
    elif floor > TARGET_BYTES:
        verdict = "out of reach: the floor (8d) is above it"
    else:
        verdict = "MISSED"
    saq = b.saq
    return [
        Row("8a", "Redis commands per lifecycle (create, claim, renew, result), scripts' own included",
            f"{commands:.1f} ({fcalls:.0f} FCALL + {commands - fcalls:.1f} inside them or beside)",
            f"{commands / lf.commands:.2f} x floor (8f); by request: "
            + ", ".join(f"{name} {n / BY_REQUEST_LIFECYCLES:.1f}" for name, n in by_request.items()) + "; " + top
            + (f"; saq: {saq.commands:.0f} per job" if saq else ""), f"<= {TARGET_COMMANDS}",
            commands_verdict, ""),
        Row("8b", "Redis CPU per lifecycle, one lifecycle at a time (no batching)", f"{cpu_ms:.3f} ms",
            f"{cpu_ms / lf.cpu_ms_alone:.2f} x floor (8f)", "— (under load: 8e)", "", ""),
        Row("8h", "Redis's time inside the scripts per lifecycle, one lifecycle at a time (commandstats)",
            f"{script_us:.0f} µs", f"{script_us / lf.script_us_alone:.2f} x floor (8f)", "—", "", ""),
        Row("8s", "Redis per lifecycle in the steady state of a busy device (eager dispatch: create, renew, "
            "result carrying the next; a build without it claims the next), one at a time (commandstats)",
            f"{steady_us:.0f} µs in the scripts, {steady_commands:.1f} commands",
            f"{steady_us / lf.script_us_alone:.2f} x the floor's µs (8f), {steady_us / script_us:.2f} x 8h; "
            f"{steady_commands / lf.commands:.2f} x the floor's commands", "<= 1.5 x floor (8f)",
            "met" if steady_us <= 1.5 * lf.script_us_alone else "MISSED", ""),
        Row("8c", f"bytes per queued task ({QUEUED:,} queued, used_memory delta)",
            f"{uncapped:,.0f} bytes without the capped feed ({per_task:,.0f} with it)",
            f"{uncapped / floor:.2f} x floor; by key, bytes per task: {heaviest}"
            + (f"; saq: {saq.bytes_per_job:,.0f} per job" if saq else ""),
            f"<= {TARGET_BYTES} (the feed is a capped ring: judged without it)", verdict, ""),
        Row("8d", f"floor: a queued task's {INDEXES_PER_QUEUED_TASK} index entries (sorted-set members, "
            "task ids) and the task as submitted (one hash field)", f"{floor:,.0f} bytes",
            f"{zset_entry:,.0f} per index entry, {hash_entry:,.0f} for the task", "—", "", ""),
        Row("8f", "floor: a lifecycle in the fewest Redis commands the contract allows "
            "(bench/floor_lifecycle.py), driven straight at Redis",
            f"{lf.commands:.1f} commands, {lf.script_us_alone:.0f} µs in the scripts",
            f"Redis CPU per lifecycle {lf.cpu_ms_alone:.3f} ms one at a time, {lf.cpu_ms_loaded:.3f} ms "
            f"{FLOOR_CONCURRENCY} at once, auto-pipelined", "—", "", ""),
        Row("8g", "Tether's four scripts driven as the floor (8f) is (coordinator.state.store, no HTTP)",
            f"{ts.commands:.1f} commands, {ts.script_us_alone:.0f} µs in the scripts",
            f"{ts.script_us_alone / lf.script_us_alone:.2f} x the floor's µs in its scripts; "
            f"Redis CPU per lifecycle {ts.cpu_ms_alone:.3f} ms one at a time ({ts.cpu_ms_alone / lf.cpu_ms_alone:.2f}"
            f" x floor), {ts.cpu_ms_loaded:.3f} ms {FLOOR_CONCURRENCY} at once "
            f"({ts.cpu_ms_loaded / lf.cpu_ms_loaded:.2f} x floor)", "—", "", ""),
    ]


# A queued task is in three sorted sets: its queue (FIFO by seq), the queue deadlines (the
# reaper's), and tasks_by_status (the listing); docs/redis-keys.md.
INDEXES_PER_QUEUED_TASK = 3


async def _entry_sizes(redis: Redis, prefix: str, task: bytes) -> tuple[float, float]:
    """used_memory per member of a sorted set of QUEUED task ids, and per field of a hash holding
    ``task`` under each id: what an index entry and a record cost Redis, with nothing of ours."""
    ids = [f"t_{secrets.token_hex(12)}" for _ in range(QUEUED)]
    zset, records = f"{prefix}:floor-index", f"{prefix}:floor-records"
    try:
        memory0 = await _used_memory(redis)
        for start in range(0, QUEUED, 500):
            await redis.zadd(zset, {task_id: i for i, task_id in enumerate(ids[start:start + 500], start)})
        memory1 = await _used_memory(redis)
        for start in range(0, QUEUED, 500):
            await redis.hset(records, mapping=dict.fromkeys(ids[start:start + 500], task))
        memory2 = await _used_memory(redis)
    finally:
        await redis.delete(zset, records)
    return (memory1 - memory0) / QUEUED, (memory2 - memory1) / QUEUED


async def _memory_by_key(redis: Redis, prefix: str) -> dict[str, int]:
    """MEMORY USAGE of every key of the prefix, the per-id keys summed by kind."""
    sizes: dict[str, int] = {}
    async for raw in redis.scan_iter(match=glob_escape(prefix) + ":*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        kind = key[len(prefix) + 1:].split(":", 1)[0]
        usage: Any = await redis.memory_usage(key, samples=0)
        sizes[kind] = sizes.get(kind, 0) + int(usage or 0)
    return sizes
