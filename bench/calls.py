"""Each hot call against the floor, driven by wrk: renew, an empty claim, an unchanged heartbeat
and a create, each on one coordinator process, in windows alternating with the floor's (a bare
Starlette endpoint doing one EVALSHA, bench/floor_app.py) so drift in the machine's speed hits
both alike; and what Redis alone serves of the floor's work (redis-benchmark, EVALSHA)."""

from __future__ import annotations

from bench.context import Bench
from bench.drivers import floor_requests, leased_fleet
from bench.loadgen import LoadResult, merge
from bench.procs import Server, start_server
from bench.report import Row, cpu_note, fmt_ms
from bench.requests import (
    claim_req,
    create_req,
    fleet,
    heartbeat_req,
    renew_req,
)
from bench.wrk import redis_evalsha_floor, wrk_load

TARGET = 0.8  # issue 12: each call at least 0.8 x the floor's rate


async def calls_vs_floor(b: Bench) -> list[Row]:
    p = b.preset
    hosts = fleet(p.concurrency, "calls")
    prefix = b.prefix("calls")
    coord = await start_server("coordinator", b.env(prefix), hosts, checkout=b.build)
    floor_server: Server | None = None
    floors: list[LoadResult] = []
    calls: dict[str, list[LoadResult]] = {"renew": [], "empty claim": [], "unchanged heartbeat": [], "create": []}
    try:
        assignments = await leased_fleet(coord.port, hosts, b.admin)
        raws = {
            "renew": [renew_req(h, t, a) for (h, t), a in zip(hosts.items(), assignments, strict=True)],
            "empty claim": [claim_req(h, t, 0) for h, t in hosts.items()],  # all claimed: 204
            "unchanged heartbeat": [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in hosts.items()],
            # aimed at busy devices: each create stores, indexes and queues a task
            "create": [create_req(b.admin, f"{h}-d0") for h in hosts],
        }
        floor_raws = floor_requests(hosts, assignments)
        floor_server = await start_server("floor", b.env(b.prefix("floor")))
        for _ in range(p.rounds):
            for name, requests in raws.items():
                floors.append(await wrk_load(floor_server.port, floor_raws, p.throughput_s, p.concurrency,
                                             {"floor": floor_server.pid, "redis": b.redis_pid}, warmup_s=p.warmup_s))
                calls[name].append(await wrk_load(coord.port, requests, p.throughput_s, p.concurrency,
                                                  {"coordinator": coord.pid, "redis": b.redis_pid},
                                                  warmup_s=p.warmup_s))
    finally:
        coord.stop()
        if floor_server is not None:
            floor_server.stop()
        await b.cleanup(prefix)
    redis_floor = redis_evalsha_floor(b.redis_port)
    floor = merge(floors)
    b.floor_rate = floor.rate
    c = p.concurrency
    rows = [
        Row("1w", f"floor: bare Starlette + 1 EVALSHA, 1 process, wrk {c} conns",
            f"{floor.rate:,.0f} req/s, p50 {fmt_ms(_median(floors, 'p50_ms'))}, "
            f"p99 {fmt_ms(_median(floors, 'p99_ms'))}",
            "1.00", "—", "", cpu_note(floor.cpu, floor.errors)),
        Row("1r", f"Redis alone: EVALSHA of `return 1`, redis-benchmark {c} clients",
            f"{redis_floor:,.0f} req/s", f"{redis_floor / floor.rate:.1f} x the HTTP floor" if floor.rate else "",
            "—", "", ""),
    ]
    for name, results in calls.items():
        merged = merge(results)
        ratio = merged.rate / floor.rate if floor.rate else 0.0
        rows.append(Row(
            "2w", f"{name}, 1 process, wrk {c} conns",
            f"{merged.rate:,.0f} req/s, p50 {fmt_ms(_median(results, 'p50_ms'))}, "
            f"p99 {fmt_ms(_median(results, 'p99_ms'))}",
            f"{ratio:.2f} x floor", f">= {TARGET:.1f} x floor", "met" if ratio >= TARGET else "MISSED",
            cpu_note(merged.cpu, merged.errors)))
    return rows


def _median(results: list[LoadResult], key: str) -> float:
    values = sorted(r.extra[key] for r in results)
    return values[len(values) // 2]
