"""The scenarios: each starts its own server processes on a fresh key prefix, measures, stops them
and deletes its keys, and returns rows for the one table.

Load that must saturate something comes from wrk (bench/wrk.py). Load that must be paced (open
loop, at a given rate: the heartbeats, the load under the dispatch probes) comes from the Python
client (bench/loadgen.py) in a spawned generator process (``in_child``) whose CPU is measured;
latency probes, parked polls and one-at-a-time calls use that client in the orchestrator, which
is otherwise idle, so a busy generator does not inflate them. wrk can do neither: it runs closed
loops only and reports no single request's time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import orjson
from redis.asyncio import Redis

from bench.artifacts import artifacts
from bench.calls import calls_vs_floor
from bench.context import Bench
from bench.dispatch import (
    IdleDispatch,
    idle_dispatch,
    saq_figures,
    saq_installed,
    tether_dispatch,
)
from bench.drivers import (
    DEVICES_PER_HOST,
    expect,
    fan_out,
    floor_requests,
    heartbeats,
    lifecycles,
)
from bench.floor_lifecycle import LifecycleFloor
from bench.footprint import footprint, lifecycle_scripts
from bench.loadgen import (
    LoadResult,
    connect,
    in_child,
    merge,
    percentile,
)
from bench.longpoll import long_poll_scale
from bench.mcp import mcp_tap
from bench.placement_scale import placement_scale
from bench.procs import server_pair, start_server
from bench.renewals import batch_renewals
from bench.report import Row, cpu_note, fmt_ms
from bench.requests import (
    GOAL,
    claim_req,
    create_req,
    fleet,
    heartbeat_req,
    renew_req,
    result_req,
)
from bench.runs import matrix_create
from bench.sessions import sessions
from bench.teams import sharing_cost
from bench.webhooks import hanging_endpoint, healthy_beside_hanging
from bench.wrk import wrk_lifecycles, wrk_load
from coordinator.api.bodies import TaskCreate
from coordinator.api.tasks import parse_task
from coordinator.state.keys import Keys
from coordinator.state.store import Store
from coordinator.transport.base import PlainTransport

LIFECYCLE_FLOOR_SHARE = 0.25  # issue 12: lifecycles/s on two processes >= 0.25 x the floor's req/s


@dataclass
class LifecycleTurns:
    """Rows 3w and 3f and the HTTP floor (1w's), each merged over its windows."""

    tether: LoadResult
    floor: LoadResult
    http_floor: LoadResult
    steady: LoadResult  # row 3s: a busy device's jobs, each create + renew + result carrying the next


def _lifecycle_row(b: Bench, life: LoadResult, turns: LifecycleTurns) -> Row:
    """Row 3w, against the HTTP floor and the lifecycle floor (3f) measured in turns with it."""
    measure = f"lifecycles (create, claim, renew, result), 2 processes, {b.preset.lifecycle_hosts} hosts, wrk"
    result = f"{life.rate:,.0f} lifecycles/s ({4 * life.rate:,.0f} req/s)"
    if life.cpu.get("generator", 0.0) >= 0.9:
        limit = "the generator is the limit (>= 0.9 core)"
    elif life.cpu.get("machine", 0.0) >= 0.9 * (os.cpu_count() or 1):
        limit = "all cores busy: the machine is the limit"
    else:
        limit = "the servers are the limit"
    cpu = cpu_note(life.cpu, life.errors) + f"; {limit}"
    floor_rate = turns.http_floor.rate
    share = life.rate / floor_rate
    if share >= LIFECYCLE_FLOOR_SHARE:
        verdict = "met"
    elif turns.floor.rate / floor_rate < LIFECYCLE_FLOOR_SHARE:
        verdict = "out of reach: the lifecycle floor (3f) is below it"
    else:
        verdict = "MISSED"
    return Row("3w", measure, result, f"{share:.2f} x floor ({floor_rate:,.0f} req/s, 1w in turns with 3w); "
               f"{life.rate / turns.floor.rate:.2f} x the lifecycle floor (3f)", f">= {LIFECYCLE_FLOOR_SHARE} x floor",
               verdict, cpu)


def _steady_row(b: Bench, turns: LifecycleTurns) -> Row:
    """Row 3s, beside 3w: the steady state of a busy fleet, where each host keeps one task queued
    ahead and a result's answer carries the next assignment (eager dispatch), against the HTTP
    floor measured in turns with it."""
    steady, floor_rate = turns.steady, turns.http_floor.rate
    share = steady.rate / floor_rate
    measure = (f"steady-state lifecycles (create, renew, result carrying the next: eager dispatch), 2 processes, "
               f"{b.preset.lifecycle_hosts} hosts, wrk")
    result = f"{steady.rate:,.0f} lifecycles/s ({3 * steady.rate:,.0f} req/s)"
    ratio = (f"{share:.2f} x floor ({floor_rate:,.0f} req/s, 1w in turns with it); "
             f"{steady.rate / turns.tether.rate:.2f} x 3w")
    return Row("3s", measure, result, ratio, f">= {LIFECYCLE_FLOOR_SHARE} x floor",
               "met" if share >= LIFECYCLE_FLOOR_SHARE else "MISSED", cpu_note(steady.cpu, steady.errors))


async def _lifecycles_in_turns(b: Bench, ports: tuple[int, int], tether_watch: dict[str, int],
                               rounds_hosts: list[list[tuple[str, str]]],
                               steady_hosts: list[list[tuple[str, str]]]) -> LifecycleTurns:
    """Row 3w's wrk lifecycles on Tether's processes (at ``ports``), the same on two floor
    processes (bench/floor_app.py, each call one script of the lifecycle floor, 8f: row 3f), and
    the HTTP floor of row 1w, in windows alternating round by round: the rows are judged by their
    ratios, and this VM's speed drifts by tens of percent within minutes. wrk stops mid-lifecycle,
    leaving tasks on its hosts' devices until their leases lapse, so each round has hosts of its
    own (``rounds_hosts``)."""
    p = b.preset
    window_s = p.lifecycle_s / len(rounds_hosts)
    prefix, http_prefix = b.prefix("life-floor"), b.prefix("life-http-floor")
    runs: dict[str, list[LoadResult]] = {"tether": [], "floor": [], "http_floor": [], "steady": []}
    try:
        async with server_pair("floor", b.env(prefix)) as (fa, fb):
            await LifecycleFloor(b.redis, prefix).add_free([f"{h}-d0" for hosts in rounds_hosts for h, _ in hosts])
            http_floor = await start_server("floor", b.env(http_prefix))
            try:
                # The HTTP floor's requests carry a renewal's headers and body, as row 1w's.
                floor_raws = floor_requests(dict(rounds_hosts[0]), [
                    {"task_id": f"t_{i:024x}", "attempt": 1, "lease_id": f"l_{i:032x}"}
                    for i in range(len(rounds_hosts[0]))])
                floor_watch = {"floor A": fa.pid, "floor B": fb.pid, "redis": b.redis_pid}
                for r, hosts in enumerate(rounds_hosts):
                    windows: list[tuple[str, Callable[[], Awaitable[LoadResult]]]] = [
                        ("tether", partial(wrk_lifecycles, ports, hosts, b.admin, GOAL, window_s, tether_watch)),
                        ("steady", partial(wrk_lifecycles, ports, steady_hosts[r], b.admin, GOAL, window_s,
                                           tether_watch, steady=True)),
                        ("floor", partial(wrk_lifecycles, (fa.port, fb.port), hosts, b.admin, GOAL, window_s,
                                          floor_watch)),
                        ("http_floor", partial(wrk_load, http_floor.port, floor_raws, window_s, p.concurrency,
                                               {"floor": http_floor.pid, "redis": b.redis_pid},
                                               warmup_s=p.warmup_s)),
                    ]
                    for name, run in (windows if r % 2 == 0 else windows[::-1]):
                        runs[name].append(await run())
            finally:
                http_floor.stop()
    finally:
        await b.cleanup(prefix)
        await b.cleanup(http_prefix)
    return LifecycleTurns(merge(runs["tether"]), merge(runs["floor"]), merge(runs["http_floor"]),
                          merge(runs["steady"]))


def _floor_lifecycle_row(turns: LifecycleTurns) -> Row:
    floor_rate = turns.http_floor.rate
    return Row("3f", "lifecycle floor: row 3w's wrk lifecycles on 2 bare processes, each call one script of the "
               "floor (8f)", f"{turns.floor.rate:,.0f} lifecycles/s ({4 * turns.floor.rate:,.0f} req/s)",
               f"{turns.floor.rate / floor_rate:.2f} x floor ({floor_rate:,.0f} req/s, 1w in turns with it)", "—", "",
               cpu_note(turns.floor.cpu, turns.floor.errors))


async def lifecycle_and_dispatch(b: Bench) -> list[Row]:
    """(3w) lifecycles/s on two processes, from wrk, and (4) dispatch latency, idle then under
    half that load. The load under the probes comes from the Python generator: it must be paced
    (open loop at a given rate), which wrk cannot do, and the probes must time one poll's answer."""
    p = b.preset
    n = p.lifecycle_hosts
    hosts = fleet((2 * p.rounds + 1) * n + 1, "life")
    probe_host, probe_token = hosts.popitem()
    # wrk stops mid-lifecycle, leaving tasks on its hosts' devices until their leases lapse: each
    # round of rows 3w and 3f, and the load under the dispatch probe, runs on hosts of its own.
    fleet_list = list(hosts.items())
    probed = fleet_list[:n]
    rounds_hosts = [fleet_list[(1 + r) * n:(2 + r) * n] for r in range(p.rounds)]
    # row 3s's rounds, each on hosts of its own too (a lease and a task queued ahead are left)
    steady_hosts = [fleet_list[(1 + p.rounds + r) * n:(2 + p.rounds + r) * n] for r in range(p.rounds)]
    prefix = b.prefix("life")
    env = b.env(prefix)
    all_hosts = {**hosts, probe_host: probe_token}
    try:
        async with server_pair("coordinator", env, all_hosts, b.build) as (a, c2):
            ports = (a.port, c2.port)
            await fan_out(a.port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in all_hosts.items()])
            idle = await idle_dispatch(b, ports, probe_host, probe_token, p.dispatch_probes)
            watch = {"coordinator A": a.pid, "coordinator B": c2.pid, "redis": b.redis_pid}
            # Lifecycles from wrk (one host per wrk thread, half the hosts on each process), in turns
            # with the floors they are judged against.
            turns = await _lifecycles_in_turns(b, ports, watch, rounds_hosts, steady_hosts)
            life = turns.tether
            # Dispatch under load: half the throughput of 3w, so the probe sees a busy
            # coordinator rather than the queue of a saturated closed loop.
            half = max(life.rate / 2, 1.0)
            load = asyncio.ensure_future(in_child(lifecycles, ports, probed, b.admin, p.warmup_s,
                                                  p.lifecycle_s, watch, half))
            # Probe until the generator returns; only samples inside its measured window count.
            loaded = await tether_dispatch(b, ports, probe_host, probe_token, 100_000, lambda: not load.done())
            busy: LoadResult = await load
    finally:
        await b.cleanup(prefix)
    # Once Tether's processes have stopped: saq's figures for the rows that compare with them.
    if saq_installed():
        b.saq = await saq_figures()
    b.lifecycle_scripts = await lifecycle_scripts(b)

    lo, hi = busy.extra.get("window_start", 0.0), busy.extra.get("window_end", 0.0)
    under = [lat for t0, lat in loaded if lo <= t0 and t0 + lat <= hi]
    return [
        _lifecycle_row(b, life, turns),
        _steady_row(b, turns),
        _floor_lifecycle_row(turns),
        *_idle_dispatch_rows(idle),
        Row("4b", f"dispatch latency under load: {busy.rate:,.0f} lifecycles/s (half of (3w))",
            f"p50 {fmt_ms(percentile(under, 50) * 1000)}, p99 {fmt_ms(percentile(under, 99) * 1000)} "
            f"(n={len(under)})",
            f"{percentile(under, 99) / percentile(idle.tether, 99):.1f} x idle p99" if under else "",
            "—", "", cpu_note(busy.cpu, busy.errors)),
        _redis_cpu_row(b, life, turns.floor),
    ]


def _redis_ms(load: LoadResult) -> float:
    """Redis CPU (ms) per lifecycle of a lifecycle load."""
    return load.cpu.get("redis", 0.0) / load.rate * 1000 if load.rate else float("nan")


def _redis_cpu_row(b: Bench, life: LoadResult, life_floor: LoadResult) -> Row:
    """Redis CPU per lifecycle under the load of row 3w, against saq's per job in this run. The
    floor that decides whether the target is out of reach is the lifecycle floor under the same
    HTTP load (3f, wrk, beside Tether's under it, 3w): how many calls share a write, and so what
    each costs Redis, depends on the load, and the floor's scripts driven 64 at once with no HTTP
    (8f) are batched as no HTTP load batches them."""
    ms = _redis_ms(life)
    measure = "Redis CPU per lifecycle under the load of (3w)"
    if b.saq is None:
        return Row("8e", measure, f"{ms:.3f} ms", "", "<= the best peer's per job (saq not installed)", "", "")
    saq_ms = b.saq.redis_cpu_ms
    floor_ms = _redis_ms(life_floor)
    alone_ms = b.lifecycle_scripts.floor.cpu_ms_loaded if b.lifecycle_scripts else float("nan")
    if ms <= saq_ms:
        verdict = "met"
    elif floor_ms > saq_ms:
        verdict = "out of reach: the floor under the same HTTP load (3f) is above it"
    else:
        verdict = "MISSED"
    return Row("8e", measure, f"{ms:.3f} ms", f"{ms / saq_ms:.1f} x saq's {saq_ms:.3f} ms per job "
               f"({b.saq.commands:.0f} commands, {b.saq.jobs_per_s:,.0f} jobs/s); the floor under the same "
               f"load {floor_ms:.3f} ms (3f, "
               f"{floor_ms / saq_ms:.2f} x saq's); the floor's scripts alone {alone_ms:.3f} ms (8f)",
               "<= the best peer's per job", verdict, "")


def _idle_dispatch_rows(idle: IdleDispatch) -> list[Row]:
    """Row 4a against its two targets (p99 <= 10 ms; p50 <= saq's, issue 12), with the floors
    (4f: the hops alone; 4g: the hops doing the contract's work) and saq (4s), probed alike, in
    turns with it. The target is out of reach when the floor that does the work is above saq's."""
    def spread(xs: list[float]) -> str:
        return f"p50 {fmt_ms(percentile(xs, 50) * 1000)}, p99 {fmt_ms(percentile(xs, 99) * 1000)} (n={len(xs)})"

    def ratios(xs: list[float]) -> str:
        p50 = percentile(xs, 50)
        return f"{p50 / hops_p50:.2f} x 4f's p50, {p50 / work_p50:.2f} x 4g's"

    hops_p50, work_p50 = percentile(idle.floor, 50), percentile(idle.floor_work, 50)
    p50, p99 = percentile(idle.tether, 50), percentile(idle.tether, 99)
    verdict = "met" if p99 <= 0.010 else "MISSED"
    target = "p99 <= 10 ms"
    if idle.saq:
        saq_p50 = percentile(idle.saq, 50)
        target += "; p50 <= saq's (4s)"
        if p50 > saq_p50:
            verdict += ("; p50 out of reach: the floor (4g) is above saq's" if work_p50 > saq_p50
                        else "; p50 MISSED")
    rows = [
        Row("4a", "dispatch latency, idle (create on A -> poll on B answered), in turns with 4f, 4g and 4s",
            spread(idle.tether), ratios(idle.tether), target, verdict, ""),
        Row("4f", "dispatch floor, its hops alone, idle: bare POST on A pushes (1 script) -> BLMPOP on B "
            "wakes, 1 script, answers", spread(idle.floor), "1.00", "—", "", ""),
        Row("4g", "dispatch floor doing the contract's work, idle: the lifecycle floor's create (8f) on A "
            "wakes its waiting claim on B", spread(idle.floor_work), ratios(idle.floor_work), "—", "", ""),
    ]
    if idle.saq:
        rows.append(Row("4s", "saq, idle: enqueue -> the job function starts in a worker",
                        spread(idle.saq), ratios(idle.saq), "—", "", ""))
    return rows


async def heartbeat_load(b: Bench) -> list[Row]:
    """(6) a fleet heartbeating every 15 s: the CPU share of one coordinator process."""
    p = b.preset
    hosts = fleet(p.heartbeat_hosts, "hb")
    prefix = b.prefix("hb")
    coord = await start_server("coordinator", b.env(prefix, COORDINATOR_HOST_OFFLINE_AFTER_S="45"), hosts,
                               checkout=b.build)
    try:
        result: LoadResult = await in_child(heartbeats, coord.port, list(hosts.items()), p.heartbeat_window_s,
                                            {"coordinator": coord.pid, "redis": b.redis_pid})
    finally:
        coord.stop()
        await b.cleanup(prefix)
    share = result.cpu["coordinator"]
    return [
        Row("6", f"heartbeats: {p.heartbeat_hosts:,} hosts x {DEVICES_PER_HOST} devices every 15 s, 1 process",
            f"{result.rate:,.0f} heartbeats/s -> coordinator CPU {share:.0%} of a core; "
            f"p50 {fmt_ms(result.p(50))}, p99 {fmt_ms(result.p(99))}; "
            f"first (registering) heartbeats {result.extra['registration_per_s']:,.0f}/s",
            f"{share / (p.heartbeat_hosts / 1000):.1%} of a core per 1,000 hosts",
            "report", "—", cpu_note(result.cpu, result.errors)),
    ]


async def _cost_case(b: Bench, label: str, n_hosts: int, n_tasks: int) -> dict[str, list[float]]:
    hosts = fleet(n_hosts, f"cost-{label}")
    prefix = b.prefix(f"cost-{label}")
    coord = await start_server("coordinator", b.env(prefix), hosts, checkout=b.build)
    try:
        await fan_out(coord.port, [heartbeat_req(h, t, [f"{h}-d0"]) for h, t in hosts.items()], 64)
        # Waiting tasks aimed at a device that does not exist, written by the coordinator's own
        # create script (coordinator.state.store.Store), which is what POST /api/v1/tasks runs.
        store = Store(PlainTransport(Redis.from_url(b.redis_url, max_connections=64)), Keys(prefix),
                      host_offline_after_ms=3_600_000)
        await store.load_scripts()
        template = parse_task(TaskCreate.model_validate({"kind": "goal", "goal": GOAL, "device_id": "absent-device"}),
                              86_400_000)
        todo = iter(range(n_tasks))

        async def populate() -> None:
            for i in todo:
                await store.create_task({**template, "id": f"t_bench{i:07d}"})

        await asyncio.gather(*(populate() for _ in range(64)))
        await store.redis.aclose()

        host, token = next(iter(hosts.items()))
        conn = await connect(coord.port)
        timings: dict[str, list[float]] = {"claim": [], "renew": [], "result": []}
        for _ in range(b.preset.cost_samples):
            await expect(conn, create_req(b.admin, f"{host}-d0"), 201)
            t0 = time.perf_counter()
            assignment = orjson.loads(await expect(conn, claim_req(host, token, 0), 200))
            t1 = time.perf_counter()
            await expect(conn, renew_req(host, token, assignment), 200)
            t2 = time.perf_counter()
            await expect(conn, result_req(host, token, assignment), 200)
            t3 = time.perf_counter()
            timings["claim"].append(t1 - t0)
            timings["renew"].append(t2 - t1)
            timings["result"].append(t3 - t2)
        conn.close()
        return timings
    finally:
        coord.stop()
        await b.cleanup(prefix)


async def cost_growth(b: Bench) -> list[Row]:
    """(7) claim and renew latency, one request at a time, with a small and a large fleet and
    queue: flat means the hot paths cost O(1) in fleet and queue size."""
    p = b.preset
    small = await _cost_case(b, "small", 10, 100)
    large = await _cost_case(b, "large", p.cost_hosts, p.cost_tasks)
    rows = []
    for op in ("claim", "renew"):
        s50, s99 = percentile(small[op], 50) * 1000, percentile(small[op], 99) * 1000
        l50, l99 = percentile(large[op], 50) * 1000, percentile(large[op], 99) * 1000
        growth = l50 / s50
        rows.append(Row(
            "7", f"{op} latency: 10 hosts/100 waiting vs {p.cost_hosts:,} hosts/{p.cost_tasks:,} waiting",
            f"p50 {fmt_ms(s50)} -> {fmt_ms(l50)}, p99 {fmt_ms(s99)} -> {fmt_ms(l99)} (n={len(small[op])})",
            f"{growth:.2f} x", "flat (p50 <= 1.5 x)", "met" if growth <= 1.5 else "MISSED", ""))
    return rows


# In this order: the calls give the floor that lifecycle's rows compare with, and lifecycle
# measures saq, which footprint's rows compare with.
SCENARIOS: dict[str, Callable[[Bench], Awaitable[list[Row]]]] = {
    "calls": calls_vs_floor,
    "lifecycle": lifecycle_and_dispatch,
    "footprint": footprint,
    "longpoll": long_poll_scale,
    "heartbeat": heartbeat_load,
    "cost": cost_growth,
    "artifacts": artifacts,
    "renewals": batch_renewals,
    "teams": sharing_cost,
    "runs": matrix_create,
    "webhooks": hanging_endpoint,
    "webhook_latency": healthy_beside_hanging,
    "scale": placement_scale,
    "mcp": mcp_tap,
    "sessions": sessions,
}
