"""(5) Long-poll scale: N waiting polls on one process, its Redis connections and memory against
a floor of N requests parked on a bare Starlette endpoint, and how fast one poll among them is
woken. Driven by the Python client (bench/loadgen.py): wrk cannot park polls or time one of them."""

from __future__ import annotations

import asyncio
import time

import orjson

from bench.context import Bench
from bench.drivers import BenchError, expect, fan_out, get, quiet, waiting_polls
from bench.loadgen import Connection, build, connect, connect_many, percentile
from bench.procs import redis_connections, start_server
from bench.report import Row, cpu_note, fmt_ms
from bench.requests import claim_req, create_req, fleet, heartbeat_req, result_req
from bench.system import CpuWindow, rss_mb


async def long_poll_scale(b: Bench) -> list[Row]:
    """(5) N waiting polls on one process: its Redis connections, its memory, and how fast one
    poll among them is woken."""
    p = b.preset
    hosts = fleet(p.polls, "poll")
    items = list(hosts.items())
    probes = items[:20]
    prefix = b.prefix("poll")
    coord = await start_server("coordinator", b.env(prefix), hosts, checkout=b.build)
    conns: list[Connection] = []
    try:
        await fan_out(coord.port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in probes])
        rss_idle = rss_mb(coord.pid)
        t0 = time.perf_counter()
        conns = await connect_many(coord.port, p.polls)
        # wait_s=60 (the default maximum): every measurement below ends well within it.
        answers = [conn.request(claim_req(h, t, 60), 75) for conn, (h, t) in zip(conns, items, strict=True)]
        deadline = time.perf_counter() + 55
        while await waiting_polls(coord.port) < p.polls:
            if time.perf_counter() > deadline:
                raise BenchError("polls did not all park within 55 s")
            await asyncio.sleep(0.1)
        # A poll counts as waiting once registered, before its first claim script has run:
        # wait until the process has worked through that backlog too.
        await quiet(coord.pid, deadline)
        park_s = time.perf_counter() - t0
        redis_conns = await redis_connections(b.redis, coord.pid, b.redis_port)
        rss = rss_mb(coord.pid)
        window = CpuWindow({"coordinator": coord.pid})
        window.start()

        creator, side = await connect(coord.port), await connect(coord.port)
        latencies: list[float] = []
        for j in range(p.poll_probes):
            if time.perf_counter() > deadline:
                break
            i = j % len(probes)
            host, token = probes[i]
            start = time.perf_counter()
            await expect(creator, create_req(b.admin, f"{host}-d0"), 201)
            status, body = await answers[i]
            if status != 200:
                raise BenchError(f"probe poll answered {status}")
            latencies.append(conns[i].answered_at - start)
            await expect(side, result_req(host, token, orjson.loads(body)), 200)
            answers[i] = conns[i].request(claim_req(host, token, 60), 75)
            await asyncio.sleep(0.03)  # re-parked before it is probed again
        cpu = window.stop()
        redis_conns = max(redis_conns, await redis_connections(b.redis, coord.pid, b.redis_port))
        creator.close()
        side.close()
    finally:
        for c in conns:
            c.close()  # every poll's client goes away at once: the disconnect path runs too
        coord.stop()
        await b.cleanup(prefix)

    floor_rss, floor_idle = await _parked_floor(b, p.polls)
    n = f"{p.polls:,}"
    p99 = percentile(latencies, 99) * 1000
    per_poll = (rss - rss_idle) * 1024 / p.polls
    floor_per_poll = (floor_rss - floor_idle) * 1024 / p.polls
    if per_poll <= POLL_KB_TARGET:
        verdict = "met"
    elif floor_per_poll > POLL_KB_TARGET:
        verdict = "out of reach: the floor (5f) is above it"
    else:
        verdict = "MISSED"
    return [
        Row("5a", f"{n} waiting polls, 1 process: Redis connections it holds",
            f"{redis_conns} (all {n} parked in {park_s:.1f} s)", "", "<= 8",
            "met" if redis_conns <= 8 else "MISSED", ""),
        Row("5b", f"{n} waiting polls: coordinator resident memory",
            f"{rss:,.0f} MB (idle before polls {rss_idle:,.0f} MB)",
            f"{per_poll:.1f} KB/poll", "<= 300 MB", "met" if rss <= 300 else "MISSED", ""),
        Row("5d", f"{n} waiting polls: coordinator memory per poll", f"{per_poll:.1f} KB/poll",
            f"{per_poll / floor_per_poll:.2f} x floor", f"<= {POLL_KB_TARGET} KB", verdict, ""),
        Row("5f", f"floor: {n} requests parked on a bare Starlette endpoint (one future and one timer each)",
            f"{floor_rss:,.0f} MB (idle before {floor_idle:,.0f} MB)", f"{floor_per_poll:.1f} KB/poll", "—", "", ""),
        Row("5c", f"one poll among {n} woken (create -> answered)",
            f"p50 {fmt_ms(percentile(latencies, 50) * 1000)}, p99 {fmt_ms(p99)} (n={len(latencies)})",
            "", "p99 <= 50 ms", "met" if p99 <= 50 else "MISSED", cpu_note(cpu, 0)),
    ]


POLL_KB_TARGET = 10  # issue 12: at most 10 KB of the coordinator's memory per waiting poll


async def _parked_floor(b: Bench, count: int) -> tuple[float, float]:
    """RSS (MB) of a bare Starlette process holding ``count`` parked requests, and before them:
    what the connection, uvicorn's protocol and the request cost, with no work of ours."""
    floor = await start_server("floor", b.env(b.prefix("park-floor")))
    conns: list[Connection] = []
    try:
        idle = rss_mb(floor.pid)
        conns = await connect_many(floor.port, count)
        for conn in conns:
            conn.request(build("POST", "/park?wait_s=60"), 75)
        deadline = time.perf_counter() + 55
        while orjson.loads(await get(floor.port, "/parked"))["parked"] < count:
            if time.perf_counter() > deadline:
                raise BenchError("floor requests did not all park within 55 s")
            await asyncio.sleep(0.1)
        await quiet(floor.pid, deadline)
        return rss_mb(floor.pid), idle
    finally:
        for c in conns:
            c.close()
        floor.stop()
